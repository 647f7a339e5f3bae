#include "server/cli/engine_factory.h"

#include <stdexcept>
#include <utility>

namespace pagoda::cli {
namespace {

// A draft model must speak the model's vocabulary: the same token strings, id for id.
void check_same_vocabulary(const gguf::GgufFile& model, const gguf::GgufFile& draft, const std::string& draft_path) {
  const auto* a = model.get_string_array("tokenizer.ggml.tokens");
  const auto* b = draft.get_string_array("tokenizer.ggml.tokens");
  if (!a || !b || *a != *b)
    throw std::runtime_error("--draft-model " + draft_path +
                             ": its vocabulary (tokenizer.ggml.tokens) differs from the model's");
}

void report(const ModelLoad& load, int pct, const std::string& what) {
  if (load.progress) load.progress(pct, what);
}

}  // namespace

std::unique_ptr<LoadedEngine> load_model(const ModelLoad& load) {
  report(load, 0, "opening " + load.path);
  auto loaded =
      std::unique_ptr<LoadedEngine>(new LoadedEngine{gguf::GgufFile::open(load.path), {}, {}, {}, {}, {}, {}, {}, {}, {}, {}});
  report(load, 10, "tokenizer");
  loaded->tokenizer = Tokenizer::from_gguf(loaded->file);
  for (const auto& t : loaded->file.tensors()) loaded->weight_bytes += t.nbytes;
  if (load.before_weights) load.before_weights(*loaded);
  if (encoder::BertConfig::is_encoder(loaded->file)) {
    if (load.backend.device == "cuda") {  // bert files: the layers on the GPU (bert_backend.h)
      BackendSelection backend = select_backend(load.backend);
      loaded->backend_name = backend.description + " (encoder)";
      report(load, 60, "encoder weights to the backend (" + std::to_string(loaded->weight_bytes >> 20) + " MiB)");
      loaded->encoder_model = std::make_unique<encoder::BertModel>(loaded->file, load.backend.threads,
                                                                   std::move(backend.backend), load.max_batch_tokens);
      return loaded;
    }
    loaded->backend_name = "cpu (encoder)";
    report(load, 60, "encoder weights (" + std::to_string(loaded->weight_bytes >> 20) + " MiB, used in place)");
    loaded->encoder_model = std::make_unique<encoder::BertModel>(loaded->file, load.backend.threads);
    return loaded;
  }
  BackendSelection backend = select_backend(load.backend);
  loaded->backend_name = backend.description;
  loaded->fallback_reason = backend.fallback_reason;
  report(load, 60, "weights to the backend (" + std::to_string(loaded->weight_bytes >> 20) + " MiB)");
  loaded->model = std::make_unique<Model>(loaded->file, std::move(backend.backend), load.max_batch_tokens,
                                          load.on_layer);
  return loaded;
}

void start_engine(LoadedEngine& loaded, EngineConfig cfg, const ModelLoad& load, const std::string& draft_path) {
  if (loaded.is_encoder()) {
    if (cfg.speculative != SpeculativeMode::None)
      throw std::runtime_error("--speculative does not apply to an encoder model");
    report(load, 80, "encoder engine");
    const int bound = cfg.max_queue >= 0 && cfg.max_seqs > 0 ? cfg.max_seqs + cfg.max_queue : 0;
    loaded.encoder_engine = std::make_unique<encoder::EncoderEngine>(
        *loaded.encoder_model, *loaded.tokenizer,
        encoder::EncoderEngine::Limits{bound, cfg.max_batch_tokens, cfg.max_seqs});
    return;
  }
  if (cfg.speculative == SpeculativeMode::Draft) {
    report(load, 70, "draft model " + draft_path);
    loaded.draft_file.emplace(gguf::GgufFile::open(draft_path));
    check_same_vocabulary(loaded.file, *loaded.draft_file, draft_path);
    loaded.draft_model = std::make_unique<Model>(*loaded.draft_file, std::move(select_backend(load.backend).backend),
                                                 load.max_batch_tokens);
    cfg.draft_model = loaded.draft_model.get();
  }
  report(load, 80, "KV cache and engine");
  loaded.engine = std::make_unique<LlmEngine>(*loaded.model, loaded.tokenizer.get(), std::move(cfg));
}

}  // namespace pagoda::cli
