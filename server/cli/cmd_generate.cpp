// `pagoda generate`: runs one prompt through the model on the CPU backend and prints the text,
// then prefill and decode speeds on stderr. One sequence, blocks 0, 1, 2, ... of the paged
// cache; greedy unless --temp is given (engine/sampling.h draws the tokens).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/backend/backend_select.h"
#include "engine/core/engine.h"
#include "engine/gguf/gguf.h"
#include "engine/model/model.h"
#include "engine/core/sampling.h"
#include "engine/backend/step_plan.h"
#include "engine/tokenizer/tokenizer.h"
#include "server/cli/commands.h"

namespace pagoda::cli {
namespace {

constexpr int kBlockSize = 16;

struct GenerateArgs {
  std::string model;
  std::string prompt;
  int n_predict = 32;
  float temp = 0.0f;  // 0 = greedy
  uint64_t seed = 0;
  int threads = 0;    // 0 = hardware threads
  std::string device = "auto";
  int ctx = 2048;
  int batch = 512;    // prefill chunk (max tokens per forward pass)
  bool ignore_eos = false;
  int parallel = 0;   // > 0: run that many copies of the prompt at once through the engine
};

const char* kUsage =
    "usage: pagoda generate --model M.gguf --prompt TEXT [-n N] [--temp T] [--seed S]\n"
    "                       [--threads T] [--device D] [--ctx C] [--batch B] [--ignore-eos]\n"
    "  -n N          new tokens to generate (default 32)\n"
    "  --temp T      sampling temperature; 0 = greedy (default 0)\n"
    "  --seed S      sampler seed (default 0)\n"
    "  --threads T   CPU threads (default: all hardware threads)\n"
    "  --device D    cpu, cuda or auto (default auto: CUDA when a device is present)\n"
    "  --ctx C       context size in tokens (default 2048)\n"
    "  --batch B     tokens per prefill step (default 512)\n"
    "  --ignore-eos  keep generating past end-of-generation tokens\n"
    "  --parallel N  run N copies of the prompt at once through the engine (continuous\n"
    "                batching over the paged cache); prints aggregate decode tok/s\n";

long parse_int(const std::string& flag, const char* v, long lo, long hi) {
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (end == v || *end || x < lo || x > hi)
    throw std::invalid_argument(flag + " expects an integer in [" + std::to_string(lo) + ", " +
                                std::to_string(hi) + "], got '" + v + "'");
  return x;
}

// Returns false when --help was asked for.
bool parse_args(int argc, char** argv, GenerateArgs& a) {
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    if (f == "--help" || f == "-h") return false;
    if (f == "--ignore-eos") { a.ignore_eos = true; continue; }
    if (i + 1 >= argc) throw std::invalid_argument(f + " needs a value (or is unknown)");
    const char* v = argv[++i];
    if (f == "--model" || f == "-m") a.model = v;
    else if (f == "--prompt" || f == "-p") a.prompt = v;
    else if (f == "-n" || f == "--n-predict") a.n_predict = static_cast<int>(parse_int(f, v, 0, 1 << 24));
    else if (f == "--seed") a.seed = static_cast<uint64_t>(parse_int(f, v, 0, 1L << 62));
    else if (f == "--threads" || f == "-t") a.threads = static_cast<int>(parse_int(f, v, 0, 1024));
    else if (f == "--device") a.device = v;
    else if (f == "--ctx" || f == "-c") a.ctx = static_cast<int>(parse_int(f, v, 1, 1 << 24));
    else if (f == "--batch" || f == "-b") a.batch = static_cast<int>(parse_int(f, v, 1, 1 << 16));
    else if (f == "--parallel" || f == "-np") a.parallel = static_cast<int>(parse_int(f, v, 1, 4096));
    else if (f == "--temp") {
      char* end = nullptr;
      a.temp = std::strtof(v, &end);
      if (end == v || *end || !(a.temp >= 0.0f) || !std::isfinite(a.temp))
        throw std::invalid_argument("--temp expects a number >= 0, got '" + std::string(v) + "'");
    } else {
      throw std::invalid_argument("unknown option " + f);
    }
  }
  if (a.model.empty()) throw std::invalid_argument("--model is required");
  return true;
}

// A step for one sequence (id 0) whose block table is 0, 1, 2, ...: tokens [begin, end) of
// `ids`, logits for the last one.
StepPlan one_sequence_step(const std::vector<int32_t>& ids, int begin, int end) {
  StepPlan p;
  const int n_blocks = (end + kBlockSize - 1) / kBlockSize;
  for (int i = begin; i < end; ++i) {
    p.tokens.push_back(ids[static_cast<size_t>(i)]);
    p.positions.push_back(i);
    p.slots.push_back(i);  // block i / B is block number i / B: the slot is the index itself
    p.token_seq.push_back(0);
  }
  p.seqs.push_back(SeqInStep{0, 0, end - begin, begin, 0, n_blocks});
  for (int b = 0; b < n_blocks; ++b) p.block_tables.push_back(b);
  p.logit_rows.push_back(end - begin - 1);
  return p;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// --parallel N: N copies of the prompt through LlmEngine. Prints each completion, then the
// aggregate decode speed: tokens generated after every sequence had its first token, over the
// time since then (prefill excluded, as llama-batched-bench's S_TG).
int generate_parallel(const GenerateArgs& a, Model& model, const Tokenizer& tok,
                      const std::vector<int32_t>& prompt) {
  const int n = a.parallel;
  const int per_seq = static_cast<int>(prompt.size()) + a.n_predict;
  EngineConfig cfg;
  cfg.max_seqs = n;
  cfg.max_batch_tokens = a.batch;
  cfg.ctx_size = a.ctx;
  cfg.kv_cache_memory = static_cast<size_t>(n) * ((per_seq + cfg.block_size - 1) / cfg.block_size + 1) *
                        model.kv_block_bytes(cfg.block_size);
  LlmEngine engine(model, &tok, cfg);

  GenerationRequest req;
  req.prompt = prompt;
  req.stop.max_tokens = a.n_predict;
  req.stop.ignore_eos = a.ignore_eos;
  req.sampling.temperature = a.temp;
  std::vector<std::shared_ptr<RequestStream>> streams;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    req.sampling.seed = a.seed + static_cast<uint64_t>(i);
    SubmitError err;
    auto s = engine.submit(req, &err);
    if (!s) throw std::runtime_error("request rejected: " + err.message);
    streams.push_back(std::move(s));
  }
  std::vector<std::string> text(n);
  std::vector<int> tokens(n, 0);
  int started = 0, done = 0;
  long after_start = 0;
  std::chrono::steady_clock::time_point t_all_started;
  std::vector<bool> finished(n, false);
  while (done < n) {
    for (int i = 0; i < n; ++i) {
      if (finished[i]) continue;
      // Every running sequence gets a delta each step: block on this one, then drain.
      auto wait = std::chrono::milliseconds(50);
      while (auto d = streams[i]->next(wait)) {
        wait = std::chrono::milliseconds(0);
        if (tokens[i] == 0 && !d->tokens.empty() && ++started == n) t_all_started = std::chrono::steady_clock::now();
        else if (started == n) after_start += static_cast<long>(d->tokens.size());
        tokens[i] += static_cast<int>(d->tokens.size());
        text[i] += d->text;
        if (d->finish != FinishReason::None) {
          ++done;
          finished[i] = true;
          if (d->finish == FinishReason::Error) std::fprintf(stderr, "[%d] error: %s\n", i, d->error.c_str());
        }
      }
    }
  }
  const double total_s = seconds_since(t0);
  const double decode_s = started == n ? seconds_since(t_all_started) : 0.0;
  long all_tokens = 0;
  for (int i = 0; i < n; ++i) {
    all_tokens += tokens[i];
    std::printf("[%d] %s\n", i, text[i].c_str());
  }
  const EngineStats st = engine.stats();
  std::fprintf(stderr, "parallel %d: %ld tokens in %.3f s (%.2f tok/s end to end, prefill included)\n", n,
               all_tokens, total_s, all_tokens / total_s);
  std::fprintf(stderr, "decode: %ld tokens in %.3f s after all %d sequences started (%.2f tok/s aggregate)\n",
               after_start, decode_s, n, decode_s > 0 ? after_start / decode_s : 0.0);
  std::fprintf(stderr, "engine: %llu steps, %llu prompt tokens computed, %llu from cache, %llu preemptions\n",
               static_cast<unsigned long long>(st.steps),
               static_cast<unsigned long long>(st.prefill_tokens_computed),
               static_cast<unsigned long long>(st.prompt_tokens_cached),
               static_cast<unsigned long long>(st.preemptions));
  std::fprintf(stderr, "engine: %.3f s in steps, %.3f s of them in the forward pass\n", st.step_seconds,
               st.forward_seconds);
  return 0;
}

}  // namespace

int generate(int argc, char** argv) {
  GenerateArgs a;
  if (!parse_args(argc, argv, a)) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  const gguf::GgufFile file = gguf::GgufFile::open(a.model);
  const auto tok = Tokenizer::from_gguf(file);
  BackendSelection backend = select_backend(BackendChoice{a.device, a.threads, false});
  if (!backend.fallback_reason.empty())
    std::fprintf(stderr, "no usable CUDA device (%s), using the CPU\n", backend.fallback_reason.c_str());
  std::fprintf(stderr, "backend: %s\n", backend.description.c_str());
  Model model(file, std::move(backend.backend), a.batch);

  const std::vector<int32_t> prompt = tok->encode(a.prompt, true, false);
  if (prompt.empty()) throw std::invalid_argument("the prompt has no tokens");
  if (a.parallel > 0) return generate_parallel(a, model, *tok, prompt);
  const int total = static_cast<int>(prompt.size()) + a.n_predict;
  if (total > a.ctx)
    throw std::invalid_argument("prompt (" + std::to_string(prompt.size()) + " tokens) + -n " +
                                std::to_string(a.n_predict) + " exceed --ctx " + std::to_string(a.ctx));
  model.init_kv_cache((a.ctx + kBlockSize - 1) / kBlockSize, kBlockSize);

  std::vector<int32_t> ids = prompt;
  std::vector<float> logits;
  SamplingParams params;
  params.temperature = a.temp;
  params.seed = a.seed;
  Rng rng(a.seed);

  const auto t_prefill = std::chrono::steady_clock::now();
  for (int begin = 0; begin < static_cast<int>(prompt.size()); begin += a.batch) {
    const int end = std::min<int>(begin + a.batch, static_cast<int>(prompt.size()));
    model.forward(one_sequence_step(ids, begin, end), logits);
  }
  const double prefill_s = seconds_since(t_prefill);

  const auto t_decode = std::chrono::steady_clock::now();
  int generated = 0, decode_steps = 0;
  while (generated < a.n_predict) {
    const std::vector<int32_t> output(ids.begin() + static_cast<long>(prompt.size()), ids.end());
    const int32_t next = sample_token(logits.data(), model.config().vocab_size, params, prompt, output, rng).token;
    ++generated;
    if (!a.ignore_eos && tok->is_eog(next)) break;
    const std::string piece = tok->token_to_piece(next);
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
    ids.push_back(next);
    if (generated == a.n_predict) break;  // the last token needs no forward pass
    const int n = static_cast<int>(ids.size());
    model.forward(one_sequence_step(ids, n - 1, n), logits);
    ++decode_steps;
  }
  const double decode_s = seconds_since(t_decode);
  std::fputc('\n', stdout);

  // Decode speed counts the single-token forward passes (the first new token comes from prefill).
  std::fprintf(stderr, "prefill: %zu tokens in %.3f s (%.2f tok/s)\n", prompt.size(), prefill_s,
               static_cast<double>(prompt.size()) / prefill_s);
  std::fprintf(stderr, "decode: %d tokens in %.3f s (%.2f tok/s)\n", decode_steps, decode_s,
               decode_steps > 0 ? decode_steps / decode_s : 0.0);
  return 0;
}

}  // namespace pagoda::cli
