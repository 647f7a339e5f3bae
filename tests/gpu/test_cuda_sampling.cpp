// The CUDA backend's sampler (begin_sampling / sample / finish_sampling, kernels/cuda/sample.cu)
// against the host sampler on the same logits, over the parameter combinations the host sampler
// tests use (tests/unit/sampling/test_sampling.cpp): temperatures, top_k / top_p / min_p,
// logit_bias, presence / frequency / repetition penalties, grammar masks and logprobs.
// - Greedy draws equal sample_token's token (the host sampler itself), with its logprobs.
// - Sampled draws equal the host reference of the GPU rule on the row the host sampler's
//   steps 0-3 make (tests/support/draw_reference.h), with token_logprob's logprobs (1e-4).
// - Every drawn token is one its mask allows; rows drawn by several draws are edited once.
// Skips (CTest: Skipped) without a CUDA device. Kept small for the CPU emulation.
#include <catch2/catch.hpp>

#include <cmath>
#include <memory>
#include <random>

#include "engine/backend/cuda/backend_cuda.h"
#include "engine/sampling/sampling.h"
#include "tests/gpu/cuda_test_util.h"
#include "tests/support/draw_reference.h"

using namespace pagoda;
using namespace pagoda::gputest;
using namespace pagoda::test;

namespace {

constexpr int kVocab = 777;  // not a multiple of 32: the masks' last word is partial

// One draw as the engine makes it, with the host sampler's inputs kept beside it.
struct Case {
  SamplingParams sp;
  std::vector<int32_t> prompt, output;
  std::vector<uint32_t> mask;  // empty: none
  int row = 0;
  uint64_t seed = 0;
};

SampleRequest to_draw(const Case& c) {
  SampleRequest d;
  d.row = c.row;
  d.temperature = c.sp.temperature;
  d.top_k = c.sp.top_k;
  d.top_p = c.sp.top_p;
  d.min_p = c.sp.min_p;
  d.seed = c.seed;
  d.counter = c.output.size();
  d.repetition_penalty = c.sp.repetition_penalty;
  d.presence_penalty = c.sp.presence_penalty;
  d.frequency_penalty = c.sp.frequency_penalty;
  d.logprobs = c.sp.logprobs;
  d.token_edits = token_edits(c.sp, kVocab, c.prompt, c.output);
  if (!c.mask.empty()) {
    d.mask = c.mask.data();
    d.mask_words = c.mask.size();
  }
  return d;
}

std::vector<int32_t> tokens(int n, std::mt19937& rng, int range) {
  std::uniform_int_distribution<int> pick(0, range - 1);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = pick(rng);
  return t;
}

// A mask allowing about one token in `keep` (always the row's token 5, so never empty).
std::vector<uint32_t> sparse_mask(std::mt19937& rng, int keep) {
  std::vector<uint32_t> m((kVocab + 31) / 32, 0u);
  std::uniform_int_distribution<int> pick(0, keep - 1);
  for (int j = 0; j < kVocab; ++j)
    if (j == 5 || pick(rng) == 0) m[static_cast<size_t>(j / 32)] |= 1u << (j % 32);
  return m;
}

bool allowed(const std::vector<uint32_t>& m, int t) {
  return m.empty() || ((m[static_cast<size_t>(t / 32)] >> (t % 32)) & 1u);
}

// The combinations: filters of the host sampler tests crossed with edit variants.
std::vector<Case> make_cases() {
  std::mt19937 rng(17);
  std::vector<Case> cases;
  int variant = 0;
  for (float temperature : {0.0f, 0.3f, 0.8f, 2.5f})
    for (int top_k : {0, 3, 200})
      for (float top_p : {1.0f, 0.45f, 0.95f})
        for (float min_p : {0.0f, 0.25f}) {
          Case c;
          c.sp.temperature = temperature;
          c.sp.top_k = top_k;
          c.sp.top_p = top_p;
          c.sp.min_p = min_p;
          c.prompt = tokens(40, rng, 60);  // a small range: repeats, and edits that matter
          c.output = tokens(variant % 7, rng, 60);
          switch (variant++ % 5) {
            case 0: break;  // filters alone
            case 1:         // the host test's penalties and bias (99: ignored when out of range)
              c.sp.presence_penalty = 0.5f;
              c.sp.frequency_penalty = 0.25f;
              c.sp.logit_bias = {{4, 3.0f}, {9999, 1.0f}, {11, -100.0f}};
              break;
            case 2: c.sp.repetition_penalty = 2.0f; break;
            case 3: c.mask = sparse_mask(rng, 9); break;
            case 4:
              c.mask = sparse_mask(rng, 3);
              c.sp.repetition_penalty = 1.3f;
              c.sp.frequency_penalty = 0.6f;
              c.sp.logit_bias = {{5, 2.0f}, {6, 40.0f}};  // 6 is masked unless allowed: bias keeps -inf
              break;
          }
          c.sp.logprobs = variant % 3 == 0 ? 2 : variant % 3 == 1 ? -1 : kMaxDrawTopLogprobs;
          c.seed = 100 + static_cast<uint64_t>(variant);
          cases.push_back(std::move(c));
        }
  return cases;
}

}  // namespace

TEST_CASE("cuda sampling: masks, bias, penalties, filters and logprobs follow the host sampler", "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  std::vector<Case> cases = make_cases();
  // Each case its own row, but the last three share one row (the n choices of a prompt: the same
  // prompt, output, mask and edits; their own seeds).
  const int n_rows = static_cast<int>(cases.size()) - 2;
  for (size_t i = 0; i < cases.size(); ++i) cases[i].row = std::min(static_cast<int>(i), n_rows - 1);
  for (size_t i = cases.size() - 2; i < cases.size(); ++i) {
    const uint64_t seed = cases[i].seed;
    cases[i] = cases[cases.size() - 3];
    cases[i].seed = seed;
  }
  const std::vector<float> logits = bf16_values(static_cast<size_t>(n_rows) * kVocab, 5, 6.0f);  // bf16: ties
  std::vector<SampleRequest> draws;
  for (const Case& c : cases) draws.push_back(to_draw(c));

  auto gpu = make_cuda_backend();
  auto run = [&] {
    Tensor t = gpu->upload_weight_f32(logits.data(), n_rows, kVocab);  // edited in place: fresh each run
    gpu->begin_sampling(draws);
    gpu->sample(t, 0, 0, static_cast<int64_t>(draws.size()));
    std::vector<int32_t> ids(draws.size(), -1);
    std::vector<DrawLogprobs> lps(draws.size());
    gpu->finish_sampling(ids.data(), lps.data());
    return std::make_pair(ids, lps);
  };
  const auto [ids, lps] = run();
  CHECK(run().first == ids);  // deterministic

  int ambiguous = 0, edited_differs = 0, greedy = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const float* raw = logits.data() + static_cast<size_t>(c.row) * kVocab;
    INFO("case " << i << ": T " << c.sp.temperature << " top_k " << c.sp.top_k << " top_p " << c.sp.top_p << " min_p "
                 << c.sp.min_p << " rep " << c.sp.repetition_penalty << " presence " << c.sp.presence_penalty
                 << " freq " << c.sp.frequency_penalty << " bias " << c.sp.logit_bias.size() << " mask "
                 << !c.mask.empty() << " logprobs " << c.sp.logprobs);
    const int got = ids[i];
    REQUIRE(got >= 0);
    REQUIRE(got < kVocab);
    CHECK(allowed(c.mask, got));
    const ReferenceDraw want = reference_draw(raw, kVocab, draws[i]);
    if (c.sp.temperature <= 0.0f) {  // the host sampler itself
      Rng rng(1);
      const SampleResult host = sample_token(raw, kVocab, c.sp, c.prompt, c.output, rng,
                                             c.mask.empty() ? nullptr : c.mask.data());
      CHECK(got == host.token);
      ++greedy;
    } else if (want.ambiguous) {
      ++ambiguous;
      continue;
    } else {
      CHECK(got == want.token);
    }
    SampleRequest bare = draws[i];  // what the row would give without its edits
    bare.mask = nullptr;
    bare.token_edits.clear();
    edited_differs += reference_draw(raw, kVocab, bare).token != want.token;
    if (c.sp.logprobs < 0) continue;
    const TokenLogprob host_lp = token_logprob(edited_row(raw, kVocab, draws[i]).data(), kVocab, got, c.sp.logprobs);
    const DrawLogprobs& lp = lps[i];
    CHECK(std::fabs(lp.logprob - host_lp.logprob) <= 1e-4f);
    REQUIRE(lp.n_top == static_cast<int>(host_lp.top.size()));
    for (int k = 0; k < lp.n_top; ++k) {
      CHECK(lp.top_id[k] == host_lp.top[static_cast<size_t>(k)].token);
      CHECK(std::fabs(lp.top_logprob[k] - host_lp.top[static_cast<size_t>(k)].logprob) <= 1e-4f);
    }
  }
  INFO(ambiguous << " of " << cases.size() << " draws too close to a rounding boundary to compare");
  CHECK(ambiguous * 10 < static_cast<int>(cases.size()));
  CHECK(greedy == 18);
  CHECK(edited_differs >= 10);  // the edits change the outcome often enough to be tested
}

TEST_CASE("cuda sampling: a one-token mask draws that token, an empty one draws 0; bad draws are refused", "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  const std::vector<float> logits = bf16_values(3 * static_cast<size_t>(kVocab), 8, 4.0f);
  std::vector<uint32_t> one((kVocab + 31) / 32, 0u), none((kVocab + 31) / 32, 0u);
  one[kVocab / 32] |= 1u << ((kVocab - 1) % 32);  // only the last token
  std::vector<SampleRequest> draws(3);
  for (int i = 0; i < 3; ++i) {
    draws[static_cast<size_t>(i)].row = i;
    draws[static_cast<size_t>(i)].temperature = i == 0 ? 0.0f : 1.5f;
    draws[static_cast<size_t>(i)].seed = 3;
    draws[static_cast<size_t>(i)].logprobs = 3;
    draws[static_cast<size_t>(i)].mask = i < 2 ? one.data() : none.data();
    draws[static_cast<size_t>(i)].mask_words = one.size();
  }
  auto gpu = make_cuda_backend();
  Tensor t = gpu->upload_weight_f32(logits.data(), 3, kVocab);
  gpu->begin_sampling(draws);
  gpu->sample(t, 0, 0, 3);
  std::vector<int32_t> ids(3, -1);
  std::vector<DrawLogprobs> lps(3);
  gpu->finish_sampling(ids.data(), lps.data());
  CHECK(ids[0] == kVocab - 1);
  CHECK(ids[1] == kVocab - 1);
  CHECK(ids[2] == 0);
  for (int i = 0; i < 2; ++i) {
    CHECK(lps[static_cast<size_t>(i)].logprob == 0.0f);  // the only possible token
    REQUIRE(lps[static_cast<size_t>(i)].n_top == 1);     // no masked token is an alternative
    CHECK(lps[static_cast<size_t>(i)].top_id[0] == kVocab - 1);
  }
  // Draws of one row with different edits are refused (the row is edited once, in place).
  std::vector<SampleRequest> shared(2, draws[0]);
  shared[1].token_edits.push_back({4, kEditBias, 1.0f, 0});
  CHECK_THROWS_AS(gpu->begin_sampling(shared), std::invalid_argument);
  // A mask shorter than the vocabulary is refused.
  draws[0].mask_words = 3;
  gpu->begin_sampling(draws);
  CHECK_THROWS_AS(gpu->sample(t, 0, 0, 3), std::invalid_argument);
  gpu->finish_sampling(ids.data(), lps.data());
}
