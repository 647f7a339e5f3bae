// `pagoda generate`: runs one prompt through LlmEngine (n = 1, or --parallel copies) and prints
// the text as it comes, then prefill and decode speeds on stderr, so its figures measure the
// engine the server runs. Greedy unless --temp is given (engine/sampling/sampling.h).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "engine/loop/engine.h"
#include "engine/loop/kv_budget.h"
#include "kernels/kv_layout.h"
#include "server/cli/commands.h"
#include "server/cli/engine_factory.h"

namespace pagoda::cli {
namespace {

struct GenerateArgs {
  std::string model;
  std::string prompt;
  int n_predict = 32;
  float temp = 0.0f;  // 0 = greedy
  uint64_t seed = 0;
  int threads = 0;    // 0 = hardware threads
  std::string device = "auto";
  std::string cpu_decode_pack = "auto";
  bool cuda_batch_invariant = false;  // --cuda-batch-invariant (as pagoda serve's)
  int ctx = 2048;
  int batch = 512;    // prefill chunk (max tokens per forward pass)
  bool ignore_eos = false;
  int parallel = 0;   // > 0: run that many copies of the prompt at once through the engine
  KvTypes kv_types;  // --kv-cache-type, then --kv-cache-type-k / -v over it (any order)
  bool print_tokens = false;  // each generated token's id and logprob on stderr
};

const char* kUsage =
    "usage: pagoda generate --model M.gguf --prompt TEXT [-n N] [--temp T] [--seed S]\n"
    "                       [--threads T] [--device D] [--ctx C] [--batch B] [--ignore-eos]\n"
    "                       [--kv-cache-type T] [--kv-cache-type-k T] [--kv-cache-type-v T]\n"
    "                       [--print-tokens] [--cpu-decode-pack auto|on|off]\n"
    "                       [--cuda-batch-invariant on|off]\n"
    "  -n N          new tokens to generate (default 32)\n"
    "  --temp T      sampling temperature; 0 = greedy (default 0)\n"
    "  --seed S      sampler seed (default 0)\n"
    "  --threads T   CPU threads (default: all hardware threads)\n"
    "  --device D    cpu, cuda or auto (default auto: CUDA when a device is present)\n"
    "  --ctx C       context size in tokens (default 2048)\n"
    "  --batch B     tokens per prefill step (default 512)\n"
    "  --ignore-eos  keep generating past end-of-generation tokens\n"
    "  --parallel N  run N copies of the prompt at once through the engine (continuous\n"
    "                batching over the paged cache); prints aggregate decode tok/s\n"
    "  --kv-cache-type T  KV cache elements of K and V: f16 (default), f32 or q8_0\n"
    "  --kv-cache-type-k T, --kv-cache-type-v T (also -ctk, -ctv)\n"
    "                     K's or V's elements alone, overriding --kv-cache-type\n"
    "  --print-tokens     after the text, one line per generated token on stderr:\n"
    "                     'token ID LOGPROB' (the chosen token's log-probability)\n"
    "  --cpu-decode-pack M  CPU: decode-layout copies of the quantized matrices (every type on\n"
    "                     AVX2 hosts; Q8_0, Q4_0, IQ4_NL, Q4_K, Q6_K, IQ4_XS on AVX-512 hosts)\n"
    "                     (faster decode; they replace the mapped file's pages in memory):\n"
    "                     auto (default: while they fit half the available memory), on or off\n"
    "  --cuda-batch-invariant on|off  CUDA: matmuls and attention give a sequence the same\n"
    "                     bits whatever else is in the batch and however its prompt is chunked\n"
    "                     (quantized and bf16 weights; default off)\n";

long parse_int(const std::string& flag, const char* v, long lo, long hi) {
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (end == v || *end || x < lo || x > hi)
    throw std::invalid_argument(flag + " expects an integer in [" + std::to_string(lo) + ", " +
                                std::to_string(hi) + "], got '" + v + "'");
  return x;
}

// The KV element type named `v` for `flag`; std::invalid_argument for any other name.
GgmlType parse_kv_type(const std::string& flag, const char* v) {
  GgmlType t;
  if (!kv_type_from_name(v, &t))
    throw std::invalid_argument(flag + " expects f16, f32 or q8_0, got '" + std::string(v) + "'");
  return t;
}

// Returns false when --help was asked for.
bool parse_args(int argc, char** argv, GenerateArgs& a) {
  std::optional<GgmlType> both, k_only, v_only;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    if (f == "--help" || f == "-h") return false;
    if (f == "--ignore-eos") { a.ignore_eos = true; continue; }
    if (f == "--print-tokens") { a.print_tokens = true; continue; }
    if (i + 1 >= argc) throw std::invalid_argument(f + " needs a value (or is unknown)");
    const char* v = argv[++i];
    if (f == "--model" || f == "-m") a.model = v;
    else if (f == "--prompt" || f == "-p") a.prompt = v;
    else if (f == "-n" || f == "--n-predict") a.n_predict = static_cast<int>(parse_int(f, v, 0, 1 << 24));
    else if (f == "--seed") a.seed = static_cast<uint64_t>(parse_int(f, v, 0, 1L << 62));
    else if (f == "--threads" || f == "-t") a.threads = static_cast<int>(parse_int(f, v, 0, 1024));
    else if (f == "--device") a.device = v;
    else if (f == "--cpu-decode-pack") a.cpu_decode_pack = v;
    else if (f == "--cuda-batch-invariant") {
      if (std::string(v) != "on" && std::string(v) != "off")
        throw std::invalid_argument("--cuda-batch-invariant expects on or off, got '" + std::string(v) + "'");
      a.cuda_batch_invariant = std::string(v) == "on";
    }
    else if (f == "--kv-cache-type") both = parse_kv_type(f, v);
    else if (f == "--kv-cache-type-k" || f == "-ctk") k_only = parse_kv_type(f, v);
    else if (f == "--kv-cache-type-v" || f == "-ctv") v_only = parse_kv_type(f, v);
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
  a.kv_types = KvTypes(k_only.value_or(both.value_or(GgmlType::F16)), v_only.value_or(both.value_or(GgmlType::F16)));
  return true;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// --parallel N: N copies of the prompt through LlmEngine. Prints each completion, then the
// aggregate decode speed: tokens generated after every sequence had its first token, over the
// time since then (prefill excluded, as llama-batched-bench's S_TG).
int generate_parallel(const GenerateArgs& a, LoadedEngine& loaded, const ModelLoad& load,
                      const std::vector<int32_t>& prompt) {
  const int n = a.parallel;
  const int per_seq = static_cast<int>(prompt.size()) + a.n_predict;
  EngineConfig cfg;
  cfg.max_seqs = n;
  cfg.max_batch_tokens = a.batch;
  cfg.ctx_size = a.ctx;
  cfg.kv_types = a.kv_types;
  cfg.kv_cache_memory = kv_bytes_for_sequences(n, per_seq, cfg.block_size,
                                               loaded.model->kv_block_bytes(cfg.block_size, cfg.kv_types));
  start_engine(loaded, cfg, load, "");
  LlmEngine& engine = *loaded.engine;

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

// One sequence through LlmEngine. Prefill: from submit to the first token; decode: the
// forward passes after it (one per further token) over the time from the first token to the
// last, as the engine-less loop this replaced counted them.
int generate_one(const GenerateArgs& a, LoadedEngine& loaded, const ModelLoad& load,
                 const std::vector<int32_t>& prompt) {
  const int total = static_cast<int>(prompt.size()) + a.n_predict;
  if (total > a.ctx)
    throw std::invalid_argument("prompt (" + std::to_string(prompt.size()) + " tokens) + -n " +
                                std::to_string(a.n_predict) + " exceed --ctx " + std::to_string(a.ctx));
  EngineConfig cfg;
  cfg.max_seqs = 1;
  cfg.max_batch_tokens = a.batch;
  // Checked above: the sequence never reaches the context, so no shift. The engine needs a
  // context longer than the prompt and than one block; the cache holds exactly the context.
  cfg.ctx_size = std::max({a.ctx, total + 1, 2 * cfg.block_size + 1});
  cfg.kv_types = a.kv_types;
  cfg.kv_cache_memory = kv_bytes_for_sequences(1, cfg.ctx_size, cfg.block_size,
                                               loaded.model->kv_block_bytes(cfg.block_size, cfg.kv_types));
  // The engine's start-up line would land on stdout, among the generated text.
  const spdlog::level::level_enum log_level = spdlog::get_level();
  spdlog::set_level(spdlog::level::warn);
  start_engine(loaded, cfg, load, "");
  spdlog::set_level(log_level);
  LlmEngine& engine = *loaded.engine;

  GenerationRequest req;
  req.prompt = prompt;
  req.stop.max_tokens = std::max(a.n_predict, 1);  // -n 0: the prefill alone; its token is dropped
  req.stop.ignore_eos = a.ignore_eos;
  req.sampling.temperature = a.temp;
  req.sampling.seed = a.seed;
  if (a.print_tokens) req.sampling.logprobs = 0;  // the chosen token's logprob, no alternatives
  std::vector<TokenLogprob> chosen;
  const auto t_submit = std::chrono::steady_clock::now();
  SubmitError err;
  const std::shared_ptr<RequestStream> stream = engine.submit(std::move(req), &err);
  if (!stream) throw std::runtime_error("request rejected: " + err.message);

  int tokens = 0;
  double prefill_s = 0;
  bool at_line_start = true;  // the text written so far ends with a newline (or is empty)
  std::chrono::steady_clock::time_point t_first, t_last;
  while (!stream->done()) {  // the engine ends every stream, even when it stops
    const std::optional<Delta> d = stream->next(std::chrono::seconds(1));
    if (!d) continue;
    if (!d->tokens.empty()) {
      t_last = std::chrono::steady_clock::now();
      if (tokens == 0) {
        t_first = t_last;
        prefill_s = seconds_since(t_submit);
      }
      tokens += static_cast<int>(d->tokens.size());
      chosen.insert(chosen.end(), d->logprobs.begin(), d->logprobs.end());
    }
    if (a.n_predict > 0 && !d->text.empty()) {
      std::fwrite(d->text.data(), 1, d->text.size(), stdout);
      std::fflush(stdout);
      at_line_start = d->text.back() == '\n';
    }
    if (d->finish == FinishReason::Error) throw std::runtime_error(d->error);
  }
  // The text ends its line before the stats (stderr) start theirs, on a terminal too.
  if (!at_line_start) std::fputc('\n', stdout);
  std::fflush(stdout);

  if (a.print_tokens && a.n_predict > 0)
    for (const TokenLogprob& t : chosen) std::fprintf(stderr, "token %d %.7g\n", t.token, t.logprob);
  const int decode_steps = a.n_predict > 0 ? std::max(tokens - 1, 0) : 0;
  const double decode_s = decode_steps > 0 ? std::chrono::duration<double>(t_last - t_first).count() : 0.0;
  std::fprintf(stderr, "prefill: %zu tokens in %.3f s (%.2f tok/s)\n", prompt.size(), prefill_s,
               static_cast<double>(prompt.size()) / prefill_s);
  std::fprintf(stderr, "decode: %d tokens in %.3f s (%.2f tok/s)\n", decode_steps, decode_s,
               decode_steps > 0 ? decode_steps / decode_s : 0.0);
  return 0;
}

}  // namespace

int generate(int argc, char** argv) {
  GenerateArgs a;
  if (!parse_args(argc, argv, a)) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  ModelLoad load;
  load.path = a.model;
  load.backend = BackendChoice{a.device, a.threads, false, a.cpu_decode_pack};
  load.backend.cuda_batch_invariant = a.cuda_batch_invariant;
  load.max_batch_tokens = a.batch;
  const std::unique_ptr<LoadedEngine> loaded = load_model(load);
  if (!loaded->fallback_reason.empty())
    std::fprintf(stderr, "no usable CUDA device (%s), using the CPU\n", loaded->fallback_reason.c_str());
  std::fprintf(stderr, "backend: %s\n", loaded->backend_name.c_str());
  if (loaded->is_encoder())
    throw std::invalid_argument(a.model + " is an encoder model: it makes embeddings (pagoda serve, /v1/embeddings), "
                                "not text");

  const std::vector<int32_t> prompt = loaded->tokenizer->encode(a.prompt, true, false);
  if (prompt.empty()) throw std::invalid_argument("the prompt has no tokens");
  if (a.parallel > 0) return generate_parallel(a, *loaded, load, prompt);
  return generate_one(a, *loaded, load, prompt);
}

}  // namespace pagoda::cli
