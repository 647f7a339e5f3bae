// Sampler: exact kept sets for top_k / top_p / min_p, penalties on the right logits, seeded
// reproducibility and sampled frequencies, logprobs.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "engine/sampling/sampling.h"

using namespace pagoda;

namespace {
std::set<int32_t> kept(const std::vector<Candidate>& c) {
  std::set<int32_t> s;
  for (const auto& x : c) s.insert(x.token);
  return s;
}
// Logits whose softmax is exactly these probabilities.
std::vector<float> from_probs(const std::vector<double>& p) {
  std::vector<float> l;
  for (double v : p) l.push_back(static_cast<float>(std::log(v)));
  return l;
}
}  // namespace

TEST_CASE("greedy takes the argmax, lowest id on ties, and draws nothing") {
  SamplingParams sp;
  sp.temperature = 0;
  const std::vector<float> l = {1, 5, 3, 5, 2};
  Rng rng(1), untouched(1);
  CHECK(sample_token(l.data(), 5, sp, {}, {}, rng).token == 1);
  CHECK(rng.next() == untouched.next());
}

TEST_CASE("top_k keeps exactly the k most likely (ties by id)") {
  SamplingParams sp;
  sp.top_k = 2;
  const std::vector<float> l = {1, 5, 3, 5, 2};
  auto c = truncated_distribution(l.data(), 5, sp);
  CHECK(kept(c) == std::set<int32_t>{1, 3});
  CHECK(c[0].token == 1);
  CHECK(c[0].p == Approx(0.5));
  sp.top_k = 3;
  CHECK(kept(truncated_distribution(l.data(), 5, sp)) == std::set<int32_t>{1, 2, 3});
}

TEST_CASE("top_p keeps the smallest most-likely set reaching p; min_p keeps p >= min_p * p_max") {
  const auto l = from_probs({0.05, 0.5, 0.15, 0.2, 0.1});
  SamplingParams sp;
  sp.top_p = 0.45f;
  CHECK(kept(truncated_distribution(l.data(), 5, sp)) == std::set<int32_t>{1});
  sp.top_p = 0.6f;
  CHECK(kept(truncated_distribution(l.data(), 5, sp)) == std::set<int32_t>{1, 3});
  sp.top_p = 0.8f;
  auto c = truncated_distribution(l.data(), 5, sp);
  CHECK(kept(c) == std::set<int32_t>{1, 2, 3});
  CHECK(c[0].p == Approx(0.5 / 0.85));
  sp.top_p = 1.0f;

  sp.min_p = 0.25f;  // threshold 0.125
  CHECK(kept(truncated_distribution(l.data(), 5, sp)) == std::set<int32_t>{1, 2, 3});
  sp.min_p = 0.35f;  // threshold 0.175
  CHECK(kept(truncated_distribution(l.data(), 5, sp)) == std::set<int32_t>{1, 3});

  // Temperature applies before the filters: at T=2 the probabilities flatten.
  sp.min_p = 0.5f;
  sp.temperature = 2.0f;  // p ~ sqrt(p): max sqrt(.5)=.707, threshold .354 -> sqrt(.2)=.447 and sqrt(.15)=.387 pass
  CHECK(kept(truncated_distribution(l.data(), 5, sp)) == std::set<int32_t>{1, 2, 3});
}

TEST_CASE("penalties and logit_bias change exactly the right logits") {
  SamplingParams sp;
  sp.presence_penalty = 0.5f;
  sp.frequency_penalty = 0.25f;
  sp.logit_bias = {{4, 3.0f}, {99, 1.0f}};  // out-of-range ids are ignored
  std::vector<float> l = {1, 1, 1, 1, 1};
  apply_penalties(l.data(), 5, sp, {0}, {1, 1, 2});
  CHECK(l[0] == 1.0f);                 // prompt only: presence/frequency count generated tokens
  CHECK(l[1] == Approx(1 - 0.5 - 0.5));
  CHECK(l[2] == Approx(1 - 0.5 - 0.25));
  CHECK(l[3] == 1.0f);
  CHECK(l[4] == 4.0f);

  SamplingParams rp;
  rp.repetition_penalty = 2.0f;
  std::vector<float> m = {2, -2, 2, -2, 2};
  apply_penalties(m.data(), 5, rp, {0, 1}, {1, 3});
  CHECK(m == std::vector<float>{1, -4, 2, -4, 2});
}

TEST_CASE("add_output_tokens gives token_edits of the output with the tokens appended") {
  // Every mix of the penalties that read the output, with a bias (also on a token of `more`)
  // and ids outside the vocabulary, over random prompts, outputs and appended tokens.
  std::mt19937 rng(17);
  std::uniform_int_distribution<int32_t> tok(-2, 21);  // vocab 20: -2, -1, 20 and 21 are outside
  int checked = 0;
  for (float rep : {1.0f, 1.3f})
    for (float presence : {0.0f, 0.5f})
      for (float frequency : {0.0f, 0.25f})
        for (int round = 0; round < 20; ++round) {
          SamplingParams sp;
          sp.repetition_penalty = rep;
          sp.presence_penalty = presence;
          sp.frequency_penalty = frequency;
          sp.logit_bias = {{3, 2.0f}, {tok(rng), -1.0f}};
          std::vector<int32_t> prompt(static_cast<size_t>(round % 7)), output(static_cast<size_t>(round % 5)),
              more(static_cast<size_t>(1 + round % 4));
          for (auto* v : {&prompt, &output, &more})
            for (int32_t& t : *v) t = tok(rng);
          std::vector<TokenEdit> got = token_edits(sp, 20, prompt, output);
          add_output_tokens(got, sp, 20, more);
          std::vector<int32_t> all = output;
          all.insert(all.end(), more.begin(), more.end());
          const std::vector<TokenEdit> want = token_edits(sp, 20, prompt, all);
          INFO("repetition " << rep << ", presence " << presence << ", frequency " << frequency << ", round " << round);
          REQUIRE(got.size() == want.size());
          for (size_t i = 0; i < want.size(); ++i) {
            CHECK(got[i].token == want[i].token);
            CHECK(got[i].flags == want[i].flags);
            CHECK(got[i].bias == want[i].bias);
            CHECK(got[i].count == want[i].count);
          }
          ++checked;
        }
  CHECK(checked == 160);
}

TEST_CASE("seeded sampling is reproducible and matches the distribution") {
  const auto l = from_probs({0.1, 0.6, 0.05, 0.25});
  SamplingParams sp;
  sp.top_k = 3;  // drops token 2
  Rng a(1234), b(1234), c(99);
  std::vector<int32_t> sa, sb, sc;
  for (int i = 0; i < 200; ++i) {
    sa.push_back(sample_token(l.data(), 4, sp, {}, {}, a).token);
    sb.push_back(sample_token(l.data(), 4, sp, {}, {}, b).token);
    sc.push_back(sample_token(l.data(), 4, sp, {}, {}, c).token);
  }
  CHECK(sa == sb);
  CHECK(sa != sc);

  Rng r(7);
  std::map<int32_t, int> counts;
  const int N = 40000;
  for (int i = 0; i < N; ++i) ++counts[sample_token(l.data(), 4, sp, {}, {}, r).token];
  CHECK(counts[2] == 0);
  // Renormalised over {0, 1, 3}: 0.1/0.95, 0.6/0.95, 0.25/0.95; 4 sigma is below 0.01.
  CHECK(counts[0] / double(N) == Approx(0.1 / 0.95).margin(0.01));
  CHECK(counts[1] / double(N) == Approx(0.6 / 0.95).margin(0.01));
  CHECK(counts[3] / double(N) == Approx(0.25 / 0.95).margin(0.01));

  // No filter: the whole vocabulary, same frequencies.
  SamplingParams plain;
  counts.clear();
  for (int i = 0; i < N; ++i) ++counts[sample_token(l.data(), 4, plain, {}, {}, r).token];
  CHECK(counts[2] / double(N) == Approx(0.05).margin(0.01));
  CHECK(counts[1] / double(N) == Approx(0.6).margin(0.01));
}

TEST_CASE("unfiltered draws take the same token as the scan over truncated_distribution") {
  // sample_token draws an unfiltered distribution without building it; the token must be the
  // one the cumulative scan over truncated_distribution's candidates picks with the same u.
  std::mt19937 gen(5);
  std::normal_distribution<float> nd(0.0f, 4.0f);
  int draws = 0;
  for (int vocab : {1, 2, 5, 1000, 32000}) {
    std::vector<float> l(static_cast<size_t>(vocab));
    for (auto& v : l) v = nd(gen);
    if (vocab > 2) l[1] = -std::numeric_limits<float>::infinity();  // a token a bias removed
    for (float temperature : {0.3f, 1.0f, 2.5f}) {
      SamplingParams sp;
      sp.temperature = temperature;
      if (vocab == 1000) sp.top_k = 1000;  // a top_k of the whole vocabulary filters nothing
      Rng a(static_cast<uint64_t>(vocab) * 31 + static_cast<uint64_t>(temperature * 10)), b = a;
      const std::vector<Candidate> dist = truncated_distribution(l.data(), vocab, sp);
      for (int i = 0; i < 300; ++i, ++draws) {
        const double u = b.uniform();
        int32_t want = dist.front().token;
        double cum = 0;
        for (const Candidate& c : dist) {
          if (c.p > 0) want = c.token;
          cum += c.p;
          if (u < cum) {
            want = c.token;
            break;
          }
        }
        INFO("vocab " << vocab << " temperature " << temperature << " draw " << i);
        REQUIRE(sample_token(l.data(), vocab, sp, {}, {}, a).token == want);
      }
    }
  }
  CHECK(draws == 5 * 3 * 300);
}

namespace {

// truncated_distribution written plainly: the whole vocabulary sorted, every filter on it.
std::vector<Candidate> full_sort_distribution(const float* logits, int vocab, const SamplingParams& sp) {
  std::vector<std::pair<float, int32_t>> c(static_cast<size_t>(vocab));
  for (int i = 0; i < vocab; ++i) c[static_cast<size_t>(i)] = {logits[i] / sp.temperature, i};
  std::sort(c.begin(), c.end(), [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
  if (sp.top_k > 0 && sp.top_k < vocab) c.resize(static_cast<size_t>(sp.top_k));
  std::vector<double> p(c.size());
  double sum = 0;
  for (size_t i = 0; i < c.size(); ++i) sum += (p[i] = std::isinf(c[i].first) ? 0.0 : std::exp(double(c[i].first) - c[0].first));
  size_t keep = c.size();
  if (sp.top_p < 1.0f) {
    double cum = 0;
    for (keep = 0; keep < c.size();)
      if ((cum += p[keep++] / sum) >= sp.top_p) break;
  }
  if (sp.min_p > 0.0f) {
    size_t n = 0;
    while (n < keep && p[n] >= sp.min_p * p[0]) ++n;
    keep = std::max<size_t>(n, 1);
  }
  if (sp.top_p < 1.0f || sp.min_p > 0.0f)
    while (keep > 1 && p[keep - 1] <= 0.0) --keep;
  double kept = 0;
  for (size_t i = 0; i < keep; ++i) kept += p[i];
  std::vector<Candidate> out(keep);
  for (size_t i = 0; i < keep; ++i) out[i] = {c[i].second, static_cast<float>(p[i] / kept)};
  return out;
}

}  // namespace

TEST_CASE("top-p / min-p / top-k keep what a full sort of the vocabulary keeps") {
  // truncated_distribution sorts only as far as the filters read; the kept tokens, their order
  // and their probabilities must be those of the plain full-sort definition.
  std::mt19937 gen(11);
  int cases = 0;
  for (int vocab : {3, 100, 5000}) {
    for (float spread : {0.5f, 3.0f, 12.0f}) {  // flat to peaked
      std::normal_distribution<float> nd(0.0f, spread);
      std::vector<float> l(static_cast<size_t>(vocab));
      for (auto& v : l) v = std::round(nd(gen) * 8) / 8;  // ties on purpose
      l[0] = -std::numeric_limits<float>::infinity();
      for (float top_p : {0.1f, 0.5f, 0.95f, 0.999f, 1.0f})
        for (float min_p : {0.0f, 0.02f, 0.3f})
          for (int top_k : {0, 7, 200}) {
            if (top_p >= 1.0f && min_p <= 0.0f && !(top_k > 0 && top_k < vocab)) continue;  // token-id order
            SamplingParams sp;
            sp.temperature = 0.8f;
            sp.top_p = top_p, sp.min_p = min_p, sp.top_k = top_k;
            const auto got = truncated_distribution(l.data(), vocab, sp);
            const auto want = full_sort_distribution(l.data(), vocab, sp);
            INFO("vocab " << vocab << " spread " << spread << " top_p " << top_p << " min_p " << min_p << " top_k " << top_k);
            REQUIRE(got.size() == want.size());
            for (size_t i = 0; i < got.size(); ++i) {
              REQUIRE(got[i].token == want[i].token);
              REQUIRE(got[i].p == Approx(want[i].p).epsilon(1e-6));
            }
            ++cases;
          }
    }
  }
  CHECK(cases == 3 * (42 + 43 + 44));  // 45 combinations, less those that filter nothing
}

TEST_CASE("logprobs: log-softmax of the processed logits, with the top alternatives") {
  const auto l = from_probs({0.1, 0.6, 0.05, 0.25});
  SamplingParams sp;
  sp.temperature = 0;
  sp.logprobs = 2;
  Rng r(1);
  auto res = sample_token(l.data(), 4, sp, {}, {}, r);
  CHECK(res.token == 1);
  CHECK(res.logprob == Approx(std::log(0.6)));
  REQUIRE(res.top.size() == 2);
  CHECK(res.top[0].token == 1);
  CHECK(res.top[1].token == 3);
  CHECK(res.top[1].logprob == Approx(std::log(0.25)));

  // A bias shows in the logprobs (they describe the processed distribution).
  sp.logit_bias = {{2, std::log(0.6f / 0.05f)}};  // token 2 now as likely as token 1
  res = sample_token(l.data(), 4, sp, {}, {}, r);
  CHECK((res.token == 1 || res.token == 2));  // (near) tie
  CHECK(res.logprob == Approx(std::log(0.6 / 1.55)).epsilon(1e-4));
  CHECK(std::set<int32_t>{res.top[0].token, res.top[1].token} == std::set<int32_t>{1, 2});

  sp.logprobs = -1;
  CHECK(sample_token(l.data(), 4, sp, {}, {}, r).top.empty());
}
