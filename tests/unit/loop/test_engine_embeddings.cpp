// Embedding requests (GenerationRequest::embed) through LlmEngine on a tiny random-weight model
// (CPU backend): the pooled vector against the final-norm hidden states of one Model::forward
// over the whole prompt, pooled here (mean, CLS, last); the same vector whatever the request's
// surroundings (chunked prefill, generation batch mates, a warm prefix cache, preemption); the
// GGUF pooling_type winning over the request's; the context limit.
#include <catch2/catch.hpp>

#include <cmath>

#include "engine/loop/engine.h"
#include "engine_test_util.h"

using namespace pagoda;
using namespace pagoda::test;

namespace {

GenerationRequest embed_request(int prompt_len, uint64_t seed, Pooling pooling) {
  GenerationRequest r;
  r.prompt = random_tokens(prompt_len, seed);
  r.embed = true;
  r.pooling = pooling;
  return r;
}

GenerationRequest generate_request(int prompt_len, uint64_t seed, int max_tokens) {
  GenerationRequest r;
  r.prompt = random_tokens(prompt_len, seed);
  r.stop.max_tokens = max_tokens;
  r.stop.ignore_eos = true;
  r.sampling.temperature = 0;
  return r;
}

struct Embedded {
  std::vector<float> vec;
  FinishReason finish = FinishReason::None;
  int deltas = 0;
  Usage usage;
};

Embedded drain(RequestStream& s) {
  Embedded e;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!s.done()) {
    if (std::chrono::steady_clock::now() > deadline) throw std::runtime_error("request did not finish in time");
    auto d = s.next(std::chrono::milliseconds(100));
    if (!d) continue;
    ++e.deltas;
    if (!d->embedding.empty()) e.vec = d->embedding;
    if (d->finish != FinishReason::None) e.finish = d->finish;
  }
  e.usage = s.usage();
  return e;
}

// The pooled, L2-normalized final-norm hidden state of `prompt`, from one forward pass over a
// fresh cache (every position's hidden row asked for).
std::vector<float> direct_embedding(const gguf::GgufFile& file, const std::vector<int32_t>& prompt, Pooling pooling) {
  const int B = 16;
  const int n = static_cast<int>(prompt.size());
  const int n_blocks = (n + B - 1) / B;
  auto model = load_model(file, n);
  model->init_kv_cache(n_blocks, B);
  const StepPlan plan = whole_prompt_plan(prompt, B, /*logits=*/false);
  StepLogits out;
  model->forward(plan, {}, out);
  const size_t dim = static_cast<size_t>(model->config().dim);
  std::vector<double> acc(dim, 0.0);
  const int first = pooling == Pooling::Last ? n - 1 : 0;
  const int last = pooling == Pooling::Mean ? n : first + 1;
  for (int i = first; i < last; ++i) {
    const auto row = out.hidden_row(i);
    REQUIRE(row.size() == dim);
    for (size_t k = 0; k < dim; ++k) acc[k] += row[k];
  }
  double ss = 0;
  for (double& v : acc) {
    v /= last - first;
    ss += v * v;
  }
  std::vector<float> vec(dim);
  for (size_t k = 0; k < dim; ++k) vec[k] = static_cast<float>(acc[k] / std::sqrt(ss));
  return vec;
}

void check_close(const std::vector<float>& got, const std::vector<float>& want, double tol) {
  REQUIRE(got.size() == want.size());
  double norm = 0;
  for (size_t k = 0; k < got.size(); ++k) {
    INFO("component " << k);
    CHECK(std::fabs(got[k] - want[k]) <= tol);
    norm += static_cast<double>(got[k]) * got[k];
  }
  CHECK(std::sqrt(norm) == Approx(1.0).margin(1e-5));
}

}  // namespace

TEST_CASE("embeddings equal the pooled final-norm hidden states of Model::forward") {
  // 70 tokens: three chunks of a 32-token step budget; 33: the last chunk is one token, which
  // the scheduler takes for a decode.
  for (const int len : {70, 33})
  for (Pooling pooling : {Pooling::Mean, Pooling::Cls, Pooling::Last}) {
    INFO("pooling " << static_cast<int>(pooling) << ", " << len << " tokens");
    const GenerationRequest r = embed_request(len, 5, pooling);
    const std::vector<float> want = direct_embedding(tiny_model(), r.prompt, pooling);
    auto model = load_model(tiny_model(), 32);
    LlmEngine engine(*model, nullptr, tiny_engine_config(64, 32));
    const Embedded e = drain(*submit_or_throw(engine, r));
    CHECK(e.finish == FinishReason::Stop);
    CHECK(e.deltas == 1);
    CHECK(e.usage.prompt_tokens == len);
    CHECK(e.usage.completion_tokens == 0);
    check_close(e.vec, want, 1e-5);
    const EngineStats st = wait_idle(engine);
    CHECK(st.kv_blocks_used == 0);
    CHECK(st.generation_tokens == 0);
  }
}

TEST_CASE("an embedding is the same alone and batched with generation traffic, cached or preempted") {
  const GenerationRequest mean = embed_request(90, 21, Pooling::Mean);
  const GenerationRequest last = embed_request(90, 22, Pooling::Last);
  std::vector<float> alone_mean, alone_last;
  {
    auto model = load_model(tiny_model(), 512);
    LlmEngine engine(*model, nullptr, tiny_engine_config(64));
    alone_mean = drain(*submit_or_throw(engine, mean)).vec;
    alone_last = drain(*submit_or_throw(engine, last)).vec;
  }
  check_close(alone_mean, direct_embedding(tiny_model(), mean.prompt, Pooling::Mean), 1e-5);
  check_close(alone_last, direct_embedding(tiny_model(), last.prompt, Pooling::Last), 1e-5);

  for (int kv_blocks : {256, 24}) {  // 24 blocks: the batch does not fit; sequences are preempted
    INFO("KV blocks " << kv_blocks);
    auto model = load_model(tiny_model(), 64);
    EngineConfig config = tiny_engine_config(kv_blocks, 64);
    // Whole chunks beside decodes when preemption is the point (timed chunks may not preempt).
    // There the traffic outgrows the cache and LRU eviction would drop `last`'s warm blocks
    // before it is admitted, or not, by how its arrival falls between steps: its first four
    // blocks are pinned as the system prompt instead, so it finds them whatever the timing.
    if (kv_blocks == 24) {
      config.max_step_ms = -1;
      config.system_prompt.assign(last.prompt.begin(), last.prompt.begin() + 64);
    }
    LlmEngine engine(*model, nullptr, config);
    REQUIRE((config.system_prompt.empty() || engine.wait_system_prompt()));
    // Warm the prefix cache with `last`'s prompt: the batched one takes its blocks.
    drain(*submit_or_throw(engine, last));
    std::vector<GenerationRequest> reqs;
    for (int i = 0; i < 6; ++i) reqs.push_back(generate_request(40 + 13 * i, 300 + i, 24));
    reqs.insert(reqs.begin() + 2, mean);
    reqs.insert(reqs.begin() + 5, last);
    reqs.push_back(mean);
    // On 24 blocks, generation whose choices outgrow the cache together: preemption whatever
    // the timing (the batch above may not overlap, the engine runs while it arrives).
    const GenerationRequest pressure = preempting_request(24, 4242);
    const auto streams = submit_all(engine, reqs);
    const auto pressure_stream = submit_or_throw(engine, pressure);  // last: `last` finds its prefix
    std::vector<Embedded> got;
    for (const auto& s : streams) got.push_back(drain(*s));
    for (const ChoiceResult& c : collect(*pressure_stream, pressure.n).choices) {
      CHECK(c.finish == FinishReason::Length);
      CHECK(c.tokens.size() == (size_t)pressure.stop.max_tokens);
    }
    for (size_t i = 0; i < reqs.size(); ++i) {
      INFO("request " << i);
      // Usage's phase timings: every request was queued and prefilled; only generation decodes.
      CHECK(got[i].usage.queue_seconds >= 0);
      CHECK(got[i].usage.prefill_seconds >= 0);
      if (!reqs[i].embed) {
        CHECK(got[i].finish == FinishReason::Length);
        CHECK(got[i].vec.empty());
        CHECK(got[i].usage.decode_seconds > 0);
        continue;
      }
      CHECK(got[i].usage.decode_seconds == -1);
      CHECK(got[i].finish == FinishReason::Stop);
      check_close(got[i].vec, reqs[i].pooling == Pooling::Mean ? alone_mean : alone_last, 1e-6);
    }
    CHECK(got[5].usage.cached_prompt_tokens > 0);  // `last` reused the warm prefix
    const EngineStats st = wait_idle(engine);
    if (kv_blocks == 24) CHECK(st.preemptions > 0);
    if (kv_blocks == 256) CHECK(st.preemptions == 0);
    CHECK(st.kv_blocks_used == static_cast<int>(config.system_prompt.size()) / 16);  // the pinned blocks only
  }
}

TEST_CASE("the model's GGUF pooling_type wins over the request's; inputs over the context are refused") {
  ModelSpec spec;
  spec.n_layers = 2;
  spec.dim = 64;
  spec.ff_dim = 128;
  spec.n_heads = 4;
  spec.n_kv_heads = 2;
  spec.ctx = 128;
  spec.type = GgmlType::F32;
  spec.seed = 1;
  spec.pooling_type = 3;  // last token
  const gguf::GgufFile file = gguf::GgufFile::from_bytes(build_model(spec, {}, 1).to_bytes(), "last.gguf");
  auto model = load_model(file, 512);
  CHECK(model->config().pooling_type == 3);
  EngineConfig cfg = tiny_engine_config(64);
  LlmEngine engine(*model, nullptr, cfg);
  const GenerationRequest r = embed_request(40, 9, Pooling::Mean);
  check_close(drain(*submit_or_throw(engine, r)).vec, direct_embedding(file, r.prompt, Pooling::Last), 1e-5);

  // The whole context may be embedded (nothing is generated), one token more may not.
  CHECK(drain(*submit_or_throw(engine, embed_request(128, 3, Pooling::Mean))).finish == FinishReason::Stop);
  SubmitError err;
  CHECK(engine.submit(embed_request(129, 3, Pooling::Mean), &err) == nullptr);
  CHECK(err.code == "context_length_exceeded");
  GenerationRequest two = embed_request(8, 3, Pooling::Mean);
  two.n = 2;
  CHECK(engine.submit(two, &err) == nullptr);
}
