// LlmEngine over the CudaBackend, where simple requests are sampled on the GPU (only ids come
// back), against LlmEngine over the CpuBackend, on a tiny random bf16 llama (and, for greedy
// batches with chunked prefills, tiny gemma2/gemma3/phi3/qwen3/qwen2moe models):
// - greedy requests, batched, give the CPU engine's tokens. The GPU rounds activations to bf16
//   before each GEMM, so a near-tie can flip the argmax: at the first token where the two
//   engines differ, the CPU's top-2 margin there must be a near-tie (the rule of
//   test_cuda_model.cpp: under 2% of the top logit + 1), and nothing after it is compared.
// - seeded sampled requests are reproducible (the same request twice) and independent of their
//   batch mates (alone vs. with a greedy and a seeded n = 2 request), and the n choices differ.
// - a greedy JSON-schema request with a penalty, a bias and logprobs (mask, edits and logprobs
//   all on the GPU) gives the CPU engine's tokens, its logprobs within 2e-2 (the GPU rounds
//   activations to bf16, which moves the logits by up to ~2%: 6e-3 under the emulation).
// - a speculating request draws on the GPU the tokens (and logprobs) it draws without
//   speculation.
// - with batch_invariant, a request's tokens and logprobs are bit-identical however the
//   scheduler chunks its prompt (one-token chunks too), whatever shares its steps, and when it
//   is preempted and recomputed.
// Skips (CTest: Skipped) without a CUDA device. Kept tiny for the CPU emulation
// (scripts/gpu-check.sh emu), where every CUDA thread is an OS thread.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <set>
#include <thread>

#include "engine/backend/cpu/backend_cpu.h"
#include "engine/backend/cuda/backend_cuda.h"
#include "engine/loop/engine.h"
#include "engine/gguf/gguf.h"
#include "engine/model/model.h"
#include "engine/model/model_writer.h"
#include "engine/loop/request_stream.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/gpu/cuda_test_util.h"

using namespace pagoda;

namespace {

constexpr int kBlock = 16;

std::unique_ptr<Model> make_model(bool gpu, const gguf::GgufFile& file = gputest::tiny_bf16_model(),
                                  const CudaBackendOptions& opts = {}) {
  if (gpu) return std::make_unique<Model>(file, make_cuda_backend(opts), 64);
  return std::make_unique<Model>(file, std::make_unique<CpuBackend>(1), 64);
}

std::vector<int32_t> prompt(int n, int salt, int vocab) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back((i * 37 + salt * 101 + 11) % vocab);
  return p;
}

GenerationRequest greedy(int prompt_len, int salt, int vocab, int max_tokens) {
  GenerationRequest r;
  r.prompt = prompt(prompt_len, salt, vocab);
  r.stop.max_tokens = max_tokens;
  r.stop.ignore_eos = true;
  r.sampling.temperature = 0;
  return r;
}

GenerationRequest seeded(int prompt_len, int salt, int vocab, int max_tokens) {
  GenerationRequest r = greedy(prompt_len, salt, vocab, max_tokens);
  r.sampling.temperature = 1.0f;
  r.sampling.top_p = 0.9f;
  r.sampling.seed = 7000 + static_cast<uint64_t>(salt);
  return r;
}

// The tokens of every choice of every request, run concurrently on a fresh engine; `logprobs`
// (optional) gets each request's first choice's token logprobs.
// `kv_blocks` sizes the cache; `stats` (optional) gets the engine's counters once it is idle;
// `speculate`: n-gram drafts of up to 4 tokens in trees of 2 branches, drafted every step.
std::vector<std::vector<std::vector<int32_t>>> run(Model& model, const std::vector<GenerationRequest>& reqs,
                                                    int max_batch_tokens = 64,
                                                    std::vector<std::vector<TokenLogprob>>* logprobs = nullptr,
                                                    int kv_blocks = 32, EngineStats* stats = nullptr,
                                                    bool speculate = false) {
  EngineConfig cfg;
  cfg.block_size = kBlock;
  cfg.max_batch_tokens = max_batch_tokens;
  cfg.max_seqs = 8;
  cfg.max_step_ms = -1;  // chunks cut by the token budget alone, never by timing
  cfg.kv_cache_memory = static_cast<size_t>(kv_blocks) * model.kv_block_bytes(kBlock);
  if (speculate) {
    cfg.speculative = SpeculativeMode::Ngram;
    cfg.spec_tokens = 4;
    cfg.spec_tree = 2;
    cfg.spec_cost_gate = false;  // a tiny model's steps cost per token: the gate would not draft
  }
  LlmEngine engine(model, nullptr, cfg);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const auto& r : reqs) {
    SubmitError err;
    streams.push_back(engine.submit(r, &err));
    REQUIRE(streams.back());
  }
  std::vector<std::vector<std::vector<int32_t>>> out;
  if (logprobs) logprobs->assign(streams.size(), {});
  for (size_t i = 0; i < streams.size(); ++i) {
    std::vector<std::vector<int32_t>> choices(static_cast<size_t>(reqs[i].n));
    while (!streams[i]->done()) {
      auto d = streams[i]->next(std::chrono::milliseconds(100));
      if (!d) continue;
      auto& c = choices.at(static_cast<size_t>(d->index));
      c.insert(c.end(), d->tokens.begin(), d->tokens.end());
      if (logprobs && d->index == 0) (*logprobs)[i].insert((*logprobs)[i].end(), d->logprobs.begin(), d->logprobs.end());
      REQUIRE(d->finish != FinishReason::Error);
    }
    out.push_back(choices);
  }
  if (stats) {
    *stats = engine.stats();
    for (int i = 0; i < 200 && (stats->running != 0 || stats->waiting != 0); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      *stats = engine.stats();
    }
  }
  return out;
}

// Each token logprob (and its top alternatives) of `got` bit for bit equal to `want`'s.
void check_same_logprobs(const std::vector<TokenLogprob>& got, const std::vector<TokenLogprob>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t k = 0; k < want.size(); ++k) {
    const TokenLogprob &g = got[k], &w = want[k];
    INFO("token " << k);
    CHECK(std::memcmp(&g.logprob, &w.logprob, sizeof(float)) == 0);
    REQUIRE(g.top.size() == w.top.size());
    for (size_t i = 0; i < w.top.size(); ++i) {
      CHECK(g.top[i].token == w.top[i].token);
      CHECK(std::memcmp(&g.top[i].logprob, &w.top[i].logprob, sizeof(float)) == 0);
    }
  }
}

// A tiny q8_0 llama on a CUDA backend with batch_invariant: a row's bits do not depend on the
// rows beside it.
std::unique_ptr<Model> invariant_q8_model() {
  static const gguf::GgufFile file = gguf::GgufFile::from_bytes(
      build_model(gputest::tiny_arch_spec(Arch::Llama, GgmlType::Q8_0)).to_bytes(), "q8.gguf");
  CudaBackendOptions opts;
  opts.batch_invariant = true;
  return make_model(true, file, opts);
}

// The CPU model's logits for the next token after `tokens` (one prefill of them all).
std::vector<float> cpu_next_logits(const std::vector<int32_t>& tokens, const gguf::GgufFile& file) {
  auto model = make_model(false, file);
  const int n = static_cast<int>(tokens.size());
  const int n_blocks = (n + kBlock - 1) / kBlock;
  model->init_kv_cache(n_blocks + 1, kBlock);
  StepPlan p;
  SeqInStep s;
  s.n_tokens = n;
  s.n_blocks = n_blocks;
  p.seqs.push_back(s);
  for (int b = 0; b < n_blocks; ++b) p.block_tables.push_back(b);
  for (int i = 0; i < n; ++i) {
    p.tokens.push_back(tokens[static_cast<size_t>(i)]);
    p.positions.push_back(i);
    p.slots.push_back(i);
    p.token_seq.push_back(0);
  }
  p.logit_rows.push_back(n - 1);
  std::vector<float> logits;
  model->forward(p, logits);
  return logits;
}

// Three greedy requests (prompts of `lens` tokens) batched on a GPU and a CPU engine: equal
// tokens up to the first difference, which must be a CPU near-tie; at least half compared.
void check_batched_greedy(const gguf::GgufFile& file, const std::vector<int>& lens, int steps,
                          int max_batch_tokens) {
  auto gpu = make_model(true, file);
  auto cpu = make_model(false, file);
  REQUIRE(gpu->backend().can_sample());
  const int vocab = gpu->config().vocab_size;
  std::vector<GenerationRequest> reqs;
  for (size_t i = 0; i < lens.size(); ++i) reqs.push_back(greedy(lens[i], static_cast<int>(i) + 1, vocab, steps));
  const auto g = run(*gpu, reqs, max_batch_tokens);
  const auto c = run(*cpu, reqs, max_batch_tokens);
  int compared = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const auto& gt = g[i][0];
    const auto& ct = c[i][0];
    REQUIRE(gt.size() == static_cast<size_t>(steps));
    REQUIRE(ct.size() == static_cast<size_t>(steps));
    for (int k = 0; k < steps; ++k) {
      if (gt[static_cast<size_t>(k)] == ct[static_cast<size_t>(k)]) {
        ++compared;
        continue;
      }
      // Allowed only where the CPU itself hesitates; afterwards the contexts differ.
      std::vector<int32_t> ctx = reqs[i].prompt;
      ctx.insert(ctx.end(), ct.begin(), ct.begin() + k);
      INFO("request " << i << " differs at token " << k << ": gpu " << gt[static_cast<size_t>(k)] << " cpu "
                      << ct[static_cast<size_t>(k)]);
      CHECK(gputest::near_tie(cpu_next_logits(ctx, file)));
      break;
    }
  }
  INFO(compared << " of " << steps * reqs.size() << " tokens equal before any near-tie");
  CHECK(compared * 2 >= steps * static_cast<int>(reqs.size()));
}

}  // namespace

TEST_CASE("cuda engine: batched greedy requests sampled on the GPU give the CPU engine's tokens", "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  check_batched_greedy(gputest::tiny_bf16_model(), {12, 20, 7}, 8, 64);
}

// The scheduler's chunked prefills (a 16-token budget splits the 20- and 30-token prompts) and
// the GPU's sampling over the windowed, soft-capped, fused-weight and MoE architectures.
TEST_CASE("cuda engine: gemma2, gemma3, phi3, qwen3 and MoE greedy batches give the CPU engine's tokens", "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  for (Arch arch : {Arch::Gemma2, Arch::Gemma3, Arch::Phi3, Arch::Qwen3, Arch::Qwen2Moe}) {
    const ModelSpec spec = gputest::tiny_arch_spec(arch, GgmlType::BF16);
    const auto file = gguf::GgufFile::from_bytes(build_model(spec).to_bytes(), spec.name);
    INFO(spec.name);
    check_batched_greedy(file, {12, 20, 30}, 24, 16);
  }
}

TEST_CASE("cuda engine: seeded GPU sampling is reproducible and independent of batch mates", "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  auto gpu = make_model(true);
  const int vocab = gpu->config().vocab_size;
  const int steps = 6;
  const GenerationRequest a = seeded(10, 4, vocab, steps);
  GenerationRequest b = seeded(15, 5, vocab, steps);
  b.n = 2;
  const GenerationRequest g = greedy(9, 6, vocab, steps);

  const auto alone = run(*gpu, {a});
  const auto again = run(*gpu, {a});
  const auto mixed = run(*gpu, {g, a, b});
  REQUIRE(alone[0][0].size() == static_cast<size_t>(steps));
  CHECK(again[0][0] == alone[0][0]);
  CHECK(mixed[1][0] == alone[0][0]);
  CHECK(std::set<int32_t>(alone[0][0].begin(), alone[0][0].end()).size() >= 2);
  CHECK(mixed[2][0] != mixed[2][1]);  // the choices have their own seeds
  // Choice 0 of the n = 2 request is the n = 1 request with the same seed.
  GenerationRequest b1 = b;
  b1.n = 1;
  CHECK(run(*gpu, {b1})[0][0] == mixed[2][0]);
}

// With batch_invariant the scheduler's chunking of a prompt changes no bit: greedy requests
// with 3 top logprobs and 33-token prompts (three of them, one at a time: a given prompt may
// happen to get the same bits from the decode kernel) alone under a 64-token budget (the prompt
// in one step), alone under 32 (32 + a one-token last chunk), first beside two requests under
// 32 (its last token beside their prompts) and after a 31-token one under 32 (1 + 31 + 1
// tokens, the last beside its decode) give the same tokens and logprobs, bit for bit.
TEST_CASE("cuda engine: with batch_invariant a prompt's chunking, one-token chunks too, changes no bit",
          "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  auto gpu = invariant_q8_model();
  const int vocab = gpu->config().vocab_size;
  for (int salt : {9, 4, 7}) {
    GenerationRequest x = greedy(33, salt, vocab, 6);
    x.sampling.logprobs = 3;
    struct Mix {
      const char* name;
      std::vector<GenerationRequest> reqs;
      size_t at;  // x's index
      int budget;
    };
    const Mix mixes[] = {{"alone, 32 tokens a step", {x}, 0, 32},
                         {"first of three, 32 tokens a step", {x, greedy(20, 1, vocab, 6), greedy(9, 2, vocab, 6)}, 0, 32},
                         {"after a 31-token prompt, 32 tokens a step", {greedy(31, 3, vocab, 6), x}, 1, 32}};
    std::vector<std::vector<TokenLogprob>> want;
    const auto alone = run(*gpu, {x}, 64, &want);
    REQUIRE(want[0].size() == 6);
    for (const Mix& mix : mixes) {
      INFO("prompt " << salt << ", " << mix.name);
      std::vector<std::vector<TokenLogprob>> got;
      const auto out = run(*gpu, mix.reqs, mix.budget, &got);
      CHECK(out[mix.at][0] == alone[0][0]);
      check_same_logprobs(got[mix.at], want[0]);
    }
  }
}

// With batch_invariant a preempted request's recompute changes no bit either: four greedy
// requests with 3 top logprobs (20-token prompts, 28 tokens out: 3 blocks each) in a 7-block
// cache preempt one another, and each gives the tokens and logprobs it gives alone. The
// scheduler recomputes a preempted sequence's prompt as prompt chunks and its generated tokens
// as decode rows (SeqInStep::prefill), as they were computed the first time.
TEST_CASE("cuda engine: with batch_invariant a preempted and recomputed request changes no bit",
          "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  auto gpu = invariant_q8_model();
  const int vocab = gpu->config().vocab_size;
  std::vector<GenerationRequest> reqs;
  for (int salt : {3, 5, 8, 13}) {
    reqs.push_back(greedy(20, salt, vocab, 28));
    reqs.back().sampling.logprobs = 3;
  }
  std::vector<std::vector<int32_t>> alone_tokens;
  std::vector<std::vector<TokenLogprob>> alone_logprobs;
  for (const auto& r : reqs) {
    std::vector<std::vector<TokenLogprob>> lp;
    alone_tokens.push_back(run(*gpu, {r}, 64, &lp)[0][0]);
    alone_logprobs.push_back(lp[0]);
  }
  EngineStats st;
  std::vector<std::vector<TokenLogprob>> got;
  const auto out = run(*gpu, reqs, 64, &got, 7, &st);
  CHECK(st.preemptions > 0);
  for (size_t i = 0; i < reqs.size(); ++i) {
    INFO("request " << i);
    CHECK(out[i][0] == alone_tokens[i]);
    check_same_logprobs(got[i], alone_logprobs[i]);
  }
}

// A speculating request draws on the GPU too: one draw per node of its token tree, whose counter
// and penalties count the drafted tokens above the node as generated, so the walk keeps the
// tokens the request draws without speculation. Two seeded requests (temperature 0.2, 2 top
// logprobs; the second with a repetition penalty) whose prompts repeat a phrase (the n-gram
// drafter proposes continuations from the prompt and the output) give the same tokens and
// logprobs, bit for bit, with speculation on and off (batch_invariant, q8_0 weights: a row's
// bits do not depend on the rows beside it), and drafts were accepted.
TEST_CASE("cuda engine: a speculating request draws on the GPU the tokens it draws without speculation",
          "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  auto gpu = invariant_q8_model();
  const int vocab = gpu->config().vocab_size;
  std::vector<GenerationRequest> reqs(2);
  for (int i = 0; i < 2; ++i) {
    GenerationRequest& r = reqs[static_cast<size_t>(i)];
    const std::vector<int32_t> phrase = prompt(10 + 3 * i, i + 1, vocab);
    for (int rep = 0; rep < 3; ++rep) r.prompt.insert(r.prompt.end(), phrase.begin(), phrase.end());
    r.stop.max_tokens = 24;
    r.stop.ignore_eos = true;
    r.sampling.temperature = 0.2f;
    if (i == 1) r.sampling.repetition_penalty = 1.05f;
    r.sampling.seed = 4100 + static_cast<uint64_t>(i);
    r.sampling.logprobs = 2;
  }
  std::vector<std::vector<TokenLogprob>> plain_lp, spec_lp;
  EngineStats plain_st, spec_st;
  const auto plain = run(*gpu, reqs, 64, &plain_lp, 32, &plain_st);
  const auto spec = run(*gpu, reqs, 64, &spec_lp, 32, &spec_st, true);
  INFO("drafted " << spec_st.spec_drafted << ", accepted " << spec_st.spec_accepted << ", verify steps "
                  << spec_st.spec_verifications);
  CHECK(plain_st.spec_verifications == 0);
  CHECK(spec_st.spec_accepted > 0);
  for (size_t i = 0; i < reqs.size(); ++i) {
    INFO("request " << i);
    REQUIRE(plain[i][0].size() == 24);
    CHECK(spec[i][0] == plain[i][0]);
    check_same_logprobs(spec_lp[i], plain_lp[i]);
  }
}

// Structured output, penalties and logprobs sampled on the GPU: the grammar's mask goes up with
// the draw, and a greedy constrained request (with a penalty, a bias and logprobs) gives the CPU
// engine's tokens and, within the bf16 activations' error, its logprobs.
TEST_CASE("cuda engine: a constrained greedy request with penalties and logprobs gives the CPU engine's output", "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  const auto& file = gputest::tiny_bf16_model();
  const auto tok = Tokenizer::from_gguf(file);
  OutputConstraint c;
  c.kind = OutputConstraint::Kind::JsonSchema;
  c.source = R"({"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 99}, "ok": {"type": "boolean"}},
                 "required": ["n", "ok"], "additionalProperties": false})";
  auto run_constrained = [&](Model& model) {
    EngineConfig cfg;
    cfg.block_size = kBlock;
    cfg.max_batch_tokens = 64;
    cfg.max_seqs = 4;
    cfg.kv_cache_memory = 32 * model.kv_block_bytes(kBlock);
    LlmEngine engine(model, tok.get(), cfg);
    GenerationRequest r = greedy(10, 3, 120, 40);
    r.stop.ignore_eos = false;
    r.sampling.grammar = engine.compile_constraint(c);
    r.sampling.frequency_penalty = 0.5f;
    r.sampling.logit_bias[static_cast<int32_t>('1')] = 1.0f;
    r.sampling.logprobs = 3;
    SubmitError err;
    auto stream = engine.submit(r, &err);
    REQUIRE(stream);
    std::vector<int32_t> tokens;
    std::vector<float> lps;
    FinishReason finish = FinishReason::None;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(600);
    while (!stream->done() && std::chrono::steady_clock::now() < until) {
      auto d = stream->next(std::chrono::milliseconds(100));
      if (!d) continue;
      tokens.insert(tokens.end(), d->tokens.begin(), d->tokens.end());
      for (const auto& lp : d->logprobs) lps.push_back(lp.logprob);
      if (d->finish != FinishReason::None) finish = d->finish;
    }
    CHECK(finish == FinishReason::Stop);
    return std::make_pair(tokens, lps);
  };
  auto gpu = make_model(true, file);
  auto cpu = make_model(false, file);
  const auto g = run_constrained(*gpu);
  const auto h = run_constrained(*cpu);
  CHECK(g.first == h.first);
  REQUIRE(g.second.size() == h.second.size());
  for (size_t i = 0; i < g.second.size(); ++i) CHECK(std::fabs(g.second[i] - h.second[i]) <= 2e-2f);
  CHECK(g.first.size() >= 8);  // {"n":..,"ok":..}
}
