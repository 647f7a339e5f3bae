#include "engine/sampling/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "engine/sampling/grammar_masks.h"

namespace pagoda {

// ---- Rng ------------------------------------------------------------------------------------

void Rng::reseed(uint64_t seed) {
  uint64_t x = seed;
  for (auto& s : s_) {  // splitmix64
    x += 0x9e3779b97f4a7c15ull;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    s = z ^ (z >> 31);
  }
}

uint64_t Rng::next() {
  auto rotl = [](uint64_t v, int k) { return (v << k) | (v >> (64 - k)); };
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Rng::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

// ---- logit processing -----------------------------------------------------------------------

namespace {

// What one output token contributes to its edit (none when no penalty reads the output).
struct OutputEdit {
  bool any;
  uint32_t flags;
  int32_t count;
};
OutputEdit output_edit(const SamplingParams& params) {
  const bool repetition = repetition_on(params.repetition_penalty);
  const bool counted = params.presence_penalty != 0.0f || params.frequency_penalty != 0.0f;
  return {repetition || counted, repetition ? kEditSeen : 0u, counted ? 1 : 0};
}

// Folds e into m, an edit of the same token.
void merge_edit(TokenEdit& m, const TokenEdit& e) {
  if (e.flags & kEditBias) m.bias = e.bias;
  m.flags |= e.flags;
  m.count += e.count;
}

}  // namespace

std::vector<TokenEdit> token_edits(const SamplingParams& params, int vocab, const std::vector<int32_t>& prompt,
                                   const std::vector<int32_t>& output) {
  const OutputEdit oe = output_edit(params);
  // Every (token, what applies) pair, then one entry per token: sort and merge.
  std::vector<TokenEdit> raw;
  auto add = [&](int32_t tok, uint32_t flags, float bias, int32_t count) {
    if (tok >= 0 && tok < vocab) raw.push_back({tok, flags, bias, count});
  };
  for (const auto& [tok, bias] : params.logit_bias) add(tok, kEditBias, bias, 0);
  if (repetition_on(params.repetition_penalty))
    for (int32_t tok : prompt) add(tok, kEditSeen, 0.0f, 0);
  if (oe.any)
    for (int32_t tok : output) add(tok, oe.flags, 0.0f, oe.count);
  std::sort(raw.begin(), raw.end(), [](const TokenEdit& a, const TokenEdit& b) { return a.token < b.token; });
  std::vector<TokenEdit> out;
  for (const TokenEdit& e : raw) {
    if (out.empty() || out.back().token != e.token) out.push_back(e);
    else merge_edit(out.back(), e);
  }
  return out;
}

void add_output_tokens(std::vector<TokenEdit>& edits, const SamplingParams& params, int vocab,
                       const std::vector<int32_t>& more) {
  const OutputEdit oe = output_edit(params);
  if (!oe.any) return;
  for (int32_t tok : more) {
    if (tok < 0 || tok >= vocab) continue;
    const TokenEdit e{tok, oe.flags, 0.0f, oe.count};
    auto it = std::lower_bound(edits.begin(), edits.end(), tok, [](const TokenEdit& a, int32_t t) { return a.token < t; });
    if (it != edits.end() && it->token == tok) merge_edit(*it, e);
    else edits.insert(it, e);
  }
}

void apply_penalties(float* logits, int vocab, const SamplingParams& params,
                     const std::vector<int32_t>& prompt, const std::vector<int32_t>& output) {
  for (const TokenEdit& e : token_edits(params, vocab, prompt, output))
    logits[e.token] = edited_logit(logits[e.token], e, params.repetition_penalty, params.presence_penalty,
                                   params.frequency_penalty);
}

namespace {

// Most likely first; equal logits: lower token id first.
bool more_likely(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

int32_t argmax(const float* logits, int vocab) {
  int32_t best = 0;
  for (int i = 1; i < vocab; ++i)
    if (logits[i] > logits[best]) best = i;
  return best;
}

// A token's weight before normalisation: e^(c - max_l) for its scaled logit c, 0 for a -inf
// logit (a bias or a mask removed it).
double token_weight(float c, float max_l) {
  return std::isinf(c) && c < 0 ? 0.0 : std::exp(static_cast<double>(c - max_l));
}

// The draw's cumulative scan over n candidates, at(i) = {token, p} in order: the first whose
// running sum passes u, or the last one with p > 0 when rounding leaves u past the total.
template <class At>
int32_t scan_draw(size_t n, double u, At&& at) {
  int32_t token = at(0).token;
  double cum = 0;
  for (size_t i = 0; i < n; ++i) {
    const Candidate cand = at(i);
    if (cand.p > 0) token = cand.token;
    cum += cand.p;
    if (u < cum) return cand.token;
  }
  return token;
}

// True when no top_k / top_p / min_p filter applies: truncated_distribution then keeps the
// whole vocabulary in token-id order.
bool unfiltered(const SamplingParams& params, int vocab) {
  return !(params.top_k > 0 && params.top_k < vocab) && params.top_p >= 1.0f && params.min_p <= 0.0f;
}

// The token the cumulative scan in sample_token draws with `u` from the unfiltered distribution,
// with the same arithmetic as truncated_distribution (so the same token for the same u) but
// without its three vocabulary-long arrays: at 32,000 tokens those made a draw cost 0.93 ms,
// as much as a matmul layer of a small model, mostly in page faults and copies around the
// 0.3 ms of exponentials. The probabilities live in a per-thread buffer kept between calls (its
// first touch was the page-fault cost).
int32_t draw_unfiltered(const float* logits, int vocab, float inv_t, double u) {
  thread_local std::vector<double> p;
  p.resize(static_cast<size_t>(vocab));
  float max_l = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < vocab; ++i) max_l = std::max(max_l, logits[i] * inv_t);
  double sum = 0;
  for (int i = 0; i < vocab; ++i) sum += (p[i] = token_weight(logits[i] * inv_t, max_l));
  double kept_sum = 0;
  for (int i = 0; i < vocab; ++i) kept_sum += (p[i] /= sum);
  return scan_draw(p.size(), u, [&](size_t i) {
    return Candidate{static_cast<int32_t>(i), static_cast<float>(p[i] / kept_sum)};
  });
}

}  // namespace

std::vector<Candidate> truncated_distribution(const float* logits, int vocab, const SamplingParams& params) {
  const float inv_t = 1.0f / params.temperature;
  std::vector<std::pair<float, int32_t>> c(vocab);
  for (int i = 0; i < vocab; ++i) c[i] = {logits[i] * inv_t, i};

  // c[0, sorted) holds the `sorted` most likely tokens, most likely first. top_k sorts its k;
  // top_p and min_p read the order only as far as their cut, so the prefix grows on demand
  // (nth_element, then a sort of the new part: a full sort of the vocabulary per token cost
  // 3.8 ms at 32,000 tokens for top_p 0.95, where the cut is usually a few dozen tokens in).
  size_t sorted = 0;
  if (params.top_k > 0 && static_cast<size_t>(params.top_k) < c.size()) {
    std::partial_sort(c.begin(), c.begin() + params.top_k, c.end(), more_likely);
    c.resize(params.top_k);
    sorted = c.size();
  }
  auto ensure_sorted = [&](size_t n) {  // at least c[0, n] in order
    if (n < sorted) return;
    const size_t want = std::min(c.size(), std::max<size_t>({n + 1, 64, 4 * sorted}));
    if (want < c.size()) std::nth_element(c.begin() + sorted, c.begin() + want, c.end(), more_likely);
    std::sort(c.begin() + sorted, c.begin() + want, more_likely);
    sorted = want;
  };
  // With no filter the full vocabulary stays in token-id order.

  float max_l = -std::numeric_limits<float>::infinity();
  for (const auto& e : c) max_l = std::max(max_l, e.first);
  auto weight = [&](size_t i) { return token_weight(c[i].first, max_l); };
  double sum = 0;
  for (size_t i = 0; i < c.size(); ++i) sum += weight(i);
  auto prob = [&](size_t i) { return weight(i) / sum; };

  size_t keep = c.size();
  if (params.top_p < 1.0f) {
    double cum = 0;
    size_t n = 0;
    while (n < c.size()) {
      ensure_sorted(n);
      cum += prob(n++);
      if (cum >= params.top_p) break;
    }
    keep = n;
  }
  if (params.min_p > 0.0f) {
    ensure_sorted(0);
    const double threshold = params.min_p * prob(0);
    size_t n = 0;
    while (n < keep) {
      ensure_sorted(n);
      if (!(prob(n) >= threshold)) break;
      ++n;
    }
    keep = std::max<size_t>(n, 1);
  }
  if (params.top_p < 1.0f || params.min_p > 0.0f) {
    // Sorted: tokens with zero probability (a -inf bias) sit at the end and are never kept.
    while (keep > 1 && prob(keep - 1) <= 0.0) --keep;
  }

  std::vector<double> p(keep);
  double kept_sum = 0;
  for (size_t i = 0; i < keep; ++i) kept_sum += (p[i] = prob(i));
  std::vector<Candidate> out(keep);
  for (size_t i = 0; i < keep; ++i) out[i] = {c[i].second, static_cast<float>(p[i] / kept_sum)};
  return out;
}

TokenLogprob token_logprob(const float* logits, int vocab, int32_t token, int top_n) {
  if (token < 0 || token >= vocab)
    throw std::invalid_argument("logprobs: token " + std::to_string(token) + " is outside the vocabulary");
  float max_l = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < vocab; ++i) max_l = std::max(max_l, logits[i]);
  double sum = 0;
  for (int i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(logits[i] - max_l));
  const float log_z = max_l + static_cast<float>(std::log(sum));

  TokenLogprob out;
  out.token = token;
  out.logprob = logits[token] - log_z;
  const int n = std::min(std::max(top_n, 0), vocab);
  if (n > 0) {
    std::vector<std::pair<float, int32_t>> c(static_cast<size_t>(vocab));
    for (int i = 0; i < vocab; ++i) c[static_cast<size_t>(i)] = {logits[i], i};
    std::partial_sort(c.begin(), c.begin() + n, c.end(), more_likely);
    out.top.reserve(static_cast<size_t>(n));
    // A token with no probability at all (a structured-output mask sent it to -inf) is never
    // an alternative: the list is shorter when fewer than n tokens are possible.
    for (int i = 0; i < n && std::isfinite(c[static_cast<size_t>(i)].first); ++i)
      out.top.push_back({c[static_cast<size_t>(i)].second, c[static_cast<size_t>(i)].first - log_z});
  }
  return out;
}

SampleResult sample_token(const float* raw_logits, int vocab, const SamplingParams& params,
                          const std::vector<int32_t>& prompt, const std::vector<int32_t>& output,
                          Rng& rng, const uint32_t* allowed) {
  std::vector<float> logits(raw_logits, raw_logits + vocab);
  if (allowed) apply_token_mask(logits.data(), vocab, allowed);
  apply_penalties(logits.data(), vocab, params, prompt, output);

  SampleResult r;
  if (params.temperature <= 0.0f) {
    r.token = argmax(logits.data(), vocab);
  } else if (unfiltered(params, vocab)) {
    r.token = draw_unfiltered(logits.data(), vocab, 1.0f / params.temperature, rng.uniform());
  } else {
    const std::vector<Candidate> dist = truncated_distribution(logits.data(), vocab, params);
    r.token = scan_draw(dist.size(), rng.uniform(), [&](size_t i) { return dist[i]; });
  }

  if (params.logprobs >= 0) {
    TokenLogprob lp = token_logprob(logits.data(), vocab, r.token, params.logprobs);
    r.logprob = lp.logprob;
    r.top = std::move(lp.top);
  }
  return r;
}

}  // namespace pagoda
