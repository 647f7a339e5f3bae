#include "engine/core/prompt_logprobs.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

namespace pagoda {

TokenLogprob logprob_of(const float* logits, int vocab, int32_t token, int top_n) {
  if (token < 0 || token >= vocab)
    throw std::invalid_argument("prompt logprobs: token " + std::to_string(token) + " is outside the vocabulary");
  // The same arithmetic as sample_token's logprobs, so that a generated token and the same
  // token read back as part of a prompt get the same value from the same logits.
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
    std::partial_sort(c.begin(), c.begin() + n, c.end(), [](const auto& a, const auto& b) {
      return a.first > b.first || (a.first == b.first && a.second < b.second);
    });
    out.top.reserve(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) out.top.push_back({c[static_cast<size_t>(i)].second, c[static_cast<size_t>(i)].first - log_z});
  }
  return out;
}

void append_prompt_logprobs(const PromptLogprobRows& rows, const float* logits,
                            const std::vector<int32_t>& host_row, int vocab,
                            std::vector<TokenLogprob>& out) {
  const Sequence& seq = *rows.seq;
  const std::vector<int32_t>& prompt = seq.request->prompt;
  const int top_n = seq.request->prompt_logprobs;
  for (int k = 0; k < rows.n; ++k) {
    const size_t r = static_cast<size_t>(rows.first_row + k);
    if (r >= host_row.size()) throw std::out_of_range("prompt logprobs: logit row outside the step");
    const size_t next = static_cast<size_t>(rows.first_position + k + 1);  // the token it scores
    if (next >= prompt.size()) throw std::out_of_range("prompt logprobs: position outside the prompt");
    const float* row = logits + static_cast<size_t>(host_row[r]) * static_cast<size_t>(vocab);
    out.push_back(logprob_of(row, vocab, prompt[next], top_n));
  }
}

}  // namespace pagoda
