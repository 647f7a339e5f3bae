#include "engine/loop/prompt_logprobs.h"

#include <stdexcept>

#include "engine/sampling/sampling.h"
#include "engine/model/model.h"

namespace pagoda {

void append_prompt_logprobs(const PromptLogprobRows& rows, const StepLogits& logits,
                            std::vector<TokenLogprob>& out) {
  const Sequence& seq = *rows.seq;
  const std::vector<int32_t>& prompt = seq.request->prompt;
  const int top_n = seq.request->prompt_logprobs;
  for (int k = 0; k < rows.n; ++k) {
    const size_t next = static_cast<size_t>(rows.first_position + k + 1);  // the token it scores
    if (next >= prompt.size()) throw std::out_of_range("prompt logprobs: position outside the prompt");
    const std::span<const float> row = logits.host_row(rows.first_row + k);
    out.push_back(token_logprob(row.data(), static_cast<int>(row.size()), prompt[next], top_n));
  }
}

}  // namespace pagoda
