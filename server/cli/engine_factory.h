// The one way the CLI makes an engine, for `serve` and `generate` alike: open the GGUF file,
// read its tokenizer, pick the backend, put the weights on it, then (once the caller has made
// its EngineConfig, which may need the tokenizer) load the draft model when the engine drafts
// with one and start LlmEngine.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "engine/backend/backend_select.h"
#include "engine/encoder/bert_model.h"
#include "engine/encoder/encoder_engine.h"
#include "engine/gguf/gguf.h"
#include "engine/loop/engine.h"
#include "engine/model/model.h"
#include "engine/tokenizer/tokenizer.h"

namespace pagoda::cli {

// What the engine runs on, members in the order they are made: torn down in reverse (the
// engine first, the file it maps last).
struct LoadedEngine {
  gguf::GgufFile file;
  std::unique_ptr<Tokenizer> tokenizer;
  size_t weight_bytes = 0;      // the tensors' bytes in the file
  std::string backend_name;     // BackendSelection::description
  std::string fallback_reason;  // "auto" chose the CPU: why CUDA was not usable; empty: it did not
  std::unique_ptr<Model> model;
  std::optional<gguf::GgufFile> draft_file;  // --draft-model (outlives the engine)
  std::unique_ptr<Model> draft_model;
  std::unique_ptr<LlmEngine> engine;  // empty until start_engine
  // An encoder model (engine/encoder): these instead of model and engine, which stay empty.
  std::unique_ptr<encoder::BertModel> encoder_model;
  std::unique_ptr<encoder::EncoderEngine> encoder_engine;

  bool is_encoder() const { return encoder_model != nullptr; }
  // What the server talks to: the encoder's engine or LlmEngine.
  EngineApi& api() const {
    if (encoder_engine) return *encoder_engine;
    return *engine;
  }
};

struct ModelLoad {
  std::string path;
  BackendChoice backend;
  int max_batch_tokens = 512;
  // Each optional. `progress`: a percentage (0-80) and what is being done; `before_weights`:
  // runs once the tokenizer is read, before the weights go to the backend; `on_layer`: the
  // weights' upload, layer by layer (Model's callback).
  std::function<void(int pct, const std::string& what)> progress;
  std::function<void(const LoadedEngine&)> before_weights;
  std::function<void(int done, int n_layers)> on_layer;
};

// Opens the model file, its tokenizer and the backend, and loads the weights; no engine yet.
// An encoder file (BertConfig::is_encoder) gets an encoder_model instead: on the CPU, or with
// --device cuda its layers on the CUDA backend (bert files; nomic-bert is refused there with a
// clear error). --device auto keeps encoders on the CPU.
std::unique_ptr<LoadedEngine> load_model(const ModelLoad& load);

// Starts the engine on `loaded` with `cfg`. With cfg.speculative == Draft, first loads
// `draft_path` (it must have the model's vocabulary, token for token) on a backend of the same
// choice and sets cfg.draft_model to it. An encoder gets its EncoderEngine (bounded by
// cfg.max_seqs + cfg.max_queue; no speculative decoding). Throws std::runtime_error.
void start_engine(LoadedEngine& loaded, EngineConfig cfg, const ModelLoad& load, const std::string& draft_path);

}  // namespace pagoda::cli
