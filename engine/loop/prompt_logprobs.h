// Prompt logprobs (OpenAI legacy `echo` + `logprobs`, vLLM's prompt_logprobs): the scheduler
// asks for the logits of every prompt position (Scheduler::prompt_logprob_rows); this turns the
// logits at position i - 1 into the logprob of prompt token i and the top alternatives there
// (token_logprob in sampling.h: the sampler's own arithmetic).
#pragma once

#include <vector>

#include "engine/engine_api.h"
#include "engine/scheduler/scheduler.h"

namespace pagoda {

class StepLogits;

// Appends to `out` the logprobs of prompt tokens rows.first_position + 1 .. + rows.n of
// rows.seq, read from the host logits of logit rows rows.first_row .. + rows.n of the step.
void append_prompt_logprobs(const PromptLogprobRows& rows, const StepLogits& logits,
                            std::vector<TokenLogprob>& out);

}  // namespace pagoda
