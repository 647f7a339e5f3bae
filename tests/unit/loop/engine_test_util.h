// Helpers for the engine tests: a tiny random-weight model (engine/model_writer) loaded on the
// CPU backend, and a collector that drains a RequestStream.
#pragma once

#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include "engine/backend/cpu/backend_cpu.h"
#include "engine/loop/engine.h"
#include "engine/engine_api.h"
#include "engine/gguf/gguf.h"
#include "engine/model/model.h"
#include "engine/model/model_writer.h"

namespace pagoda::test {

inline gguf::GgufFile tiny_model_file(int ctx = 1024, uint64_t seed = 1) {
  ModelSpec spec;
  spec.n_layers = 2;
  spec.dim = 64;
  spec.ff_dim = 128;
  spec.n_heads = 4;
  spec.n_kv_heads = 2;
  spec.ctx = ctx;
  spec.type = GgmlType::F32;
  spec.seed = seed;
  return gguf::GgufFile::from_bytes(build_model(spec, {}, 1).to_bytes(), "tiny.gguf");
}

// tiny_model_file's shape with a sliding window of `window`: gemma2 (the default) windows its
// local layers and soft-caps attention, the attention_ext path once a context passes the window;
// phi3 windows every layer, so blocks behind the window can be released.
inline gguf::GgufFile tiny_windowed_model_file(int window = 8, uint64_t seed = 7, Arch arch = Arch::Gemma2,
                                               int ctx = 0) {
  ModelSpec spec;
  spec.arch = arch;
  if (ctx > 0) spec.ctx = ctx;
  spec.n_layers = 2;
  spec.dim = 64;
  spec.ff_dim = 128;
  spec.n_heads = 4;
  spec.n_kv_heads = 2;
  spec.type = GgmlType::F32;
  spec.seed = seed;
  spec.sliding_window = window;
  return gguf::GgufFile::from_bytes(build_model(spec, {}, 1).to_bytes(), "windowed.gguf");
}

inline std::unique_ptr<Model> load_model(const gguf::GgufFile& f, int max_batch_tokens = 512, int threads = 1) {
  return std::make_unique<Model>(f, std::make_unique<CpuBackend>(threads), max_batch_tokens);
}

// The default tiny_model_file(), built once per test binary (building it takes a while).
inline const gguf::GgufFile& tiny_model() {
  static const gguf::GgufFile f = tiny_model_file();
  return f;
}

// An engine configuration for tiny_model(): blocks of 16 tokens, a KV cache of `kv_blocks`
// blocks of `kv_type` elements (K's and V's), and the given step token budget and
// running-sequence limit.
inline EngineConfig tiny_engine_config(int kv_blocks, int max_batch_tokens = 512, int max_seqs = 16,
                                       KvTypes kv_type = GgmlType::F16) {
  EngineConfig c;
  c.block_size = 16;
  c.max_batch_tokens = max_batch_tokens;
  c.max_seqs = max_seqs;
  c.kv_types = kv_type;
  c.kv_cache_memory = static_cast<size_t>(kv_blocks) * load_model(tiny_model(), 8)->kv_block_bytes(16, kv_type);
  return c;
}

// A one-sequence plan over the whole of `prompt` from position 0 on a fresh cache (blocks 0, 1,
// ... in order): what a direct forward pass computes the engine's results against. Every
// position's row is asked for as a logit row (`logits`) or a hidden-state row (else).
inline StepPlan whole_prompt_plan(const std::vector<int32_t>& prompt, int block_size, bool logits) {
  const int n = static_cast<int>(prompt.size());
  const int n_blocks = (n + block_size - 1) / block_size;
  StepPlan plan;
  SeqInStep s;
  s.seq_id = 1;
  s.n_tokens = n;
  s.n_blocks = n_blocks;
  plan.seqs.push_back(s);
  for (int b = 0; b < n_blocks; ++b) plan.block_tables.push_back(b);
  for (int i = 0; i < n; ++i) {
    plan.tokens.push_back(prompt[static_cast<size_t>(i)]);
    plan.positions.push_back(i);
    plan.slots.push_back(i);
    plan.token_seq.push_back(0);
    (logits ? plan.logit_rows : plan.hidden_rows).push_back(i);
  }
  return plan;
}

inline std::vector<int32_t> random_tokens(int n, uint64_t seed, int vocab = 256) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> v(n);
  for (auto& t : v) t = static_cast<int32_t>(rng() % vocab);
  return v;
}

// A request the scheduler must preempt on an engine whose cache holds `kv_blocks` blocks of
// `block_size`, however its steps and other submissions interleave: its choices are admitted
// together as one group (a request's choices always are) and decode in lockstep, each to a
// length that fits the cache alone, while together (the prompt's full block shared, the rest
// each choice's own) they outgrow it. Seeded sampling: choice c draws with seed + c, as
// choice_alone(request, c) does with one choice.
inline GenerationRequest preempting_request(int kv_blocks, uint64_t seed, int block_size = 16) {
  constexpr int kChoices = 4;
  const int own = kv_blocks / kChoices + 1;  // blocks of its own per choice: kChoices * own > kv_blocks
  const int length = (own + 1) * block_size + block_size / 2;  // own + 2 blocks at the end
  if (own + 2 > kv_blocks) throw std::invalid_argument("preempting_request: a choice alone must fit the cache");
  GenerationRequest r;
  r.prompt = random_tokens(block_size + block_size / 4, seed);  // one full block and part of one
  r.n = kChoices;
  r.stop.max_tokens = length - static_cast<int>(r.prompt.size());
  r.stop.ignore_eos = true;
  r.sampling.temperature = 0.9f;
  r.sampling.seed = seed;
  r.sampling.logprobs = 1;
  return r;
}

// Choice c of `r` as a request of its own: one choice, drawing with the seed choice c draws with.
inline GenerationRequest choice_alone(GenerationRequest r, int c) {
  r.n = 1;
  r.sampling.seed = r.sampling.seed.value_or(0) + static_cast<uint64_t>(c);
  return r;
}

// Everything one choice produced.
struct ChoiceResult {
  std::vector<int32_t> tokens;
  std::vector<uint32_t> logprob_bits;  // bit patterns: comparisons are exact
  std::vector<std::vector<int32_t>> top_tokens;
  std::string text;
  FinishReason finish = FinishReason::None;
  std::string error;
  bool operator==(const ChoiceResult& o) const {
    return tokens == o.tokens && logprob_bits == o.logprob_bits && top_tokens == o.top_tokens &&
           finish == o.finish;
  }
};

struct RequestResult {
  std::vector<ChoiceResult> choices;
  Usage usage;
};

// Reads the stream to the end (fails after `limit`).
inline RequestResult collect(RequestStream& s, int n = 1, std::chrono::seconds limit = std::chrono::seconds(120)) {
  RequestResult r;
  r.choices.resize(n);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!s.done()) {
    if (std::chrono::steady_clock::now() > deadline) throw std::runtime_error("request did not finish in time");
    auto d = s.next(std::chrono::milliseconds(100));
    if (!d) continue;
    ChoiceResult& c = r.choices.at(d->index);
    c.tokens.insert(c.tokens.end(), d->tokens.begin(), d->tokens.end());
    for (const auto& lp : d->logprobs) {
      uint32_t bits;
      std::memcpy(&bits, &lp.logprob, 4);
      c.logprob_bits.push_back(bits);
      std::vector<int32_t> top;
      for (const auto& t : lp.top) top.push_back(t.token);
      c.top_tokens.push_back(top);
    }
    c.text += d->text;
    if (d->finish != FinishReason::None) {
      c.finish = d->finish;
      c.error = d->error;
    }
  }
  r.usage = s.usage();
  return r;
}

// Submits `req`; throws when the engine refuses it.
inline std::shared_ptr<RequestStream> submit_or_throw(EngineApi& engine, const GenerationRequest& req) {
  SubmitError err;
  auto s = engine.submit(req, &err);
  if (!s) throw std::runtime_error("submit refused: " + err.code + ": " + err.message);
  return s;
}

// Submits every request of `reqs`, in order; throws when the engine refuses one.
inline std::vector<std::shared_ptr<RequestStream>> submit_all(EngineApi& engine,
                                                               const std::vector<GenerationRequest>& reqs) {
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const auto& r : reqs) streams.push_back(submit_or_throw(engine, r));
  return streams;
}

// Waits (up to about a second) until the engine has nothing running or waiting, so that its
// block counts can be checked; returns its stats then.
inline EngineStats wait_idle(const EngineApi& engine) {
  EngineStats st = engine.stats();
  for (int i = 0; i < 100 && (st.running != 0 || st.waiting != 0); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    st = engine.stats();
  }
  return st;
}

}  // namespace pagoda::test
