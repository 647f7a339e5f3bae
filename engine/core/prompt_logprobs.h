// Prompt logprobs (OpenAI legacy `echo` + `logprobs`, vLLM's prompt_logprobs): the scheduler
// asks for the logits of every prompt position (Scheduler::prompt_logprob_rows); this turns the
// logits at position i - 1 into the logprob of prompt token i and the top alternatives there.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/engine_api.h"
#include "engine/core/scheduler.h"

namespace pagoda {

// The logprob of `token` under one row of raw logits (log-softmax, computed as the sampler
// computes its logprobs: float max, double sum of exponentials) and the `top_n` most likely
// tokens, most likely first (ties: lower id first). Throws std::invalid_argument for a token
// outside [0, vocab).
TokenLogprob logprob_of(const float* logits, int vocab, int32_t token, int top_n);

// Appends to `out` the logprobs of prompt tokens rows.first_position + 1 .. + rows.n of
// rows.seq. `logits` holds [rows x vocab] floats; logit row r of the step is at
// logits + host_row[r] * vocab (the engine's mapping of logit rows to host rows).
void append_prompt_logprobs(const PromptLogprobRows& rows, const float* logits,
                            const std::vector<int32_t>& host_row, int vocab,
                            std::vector<TokenLogprob>& out);

}  // namespace pagoda
