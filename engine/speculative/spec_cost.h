// Speculation's cost gate: how many tokens a decoding sequence should draft this step, given
// what the step-cost model (step_cost.h) predicts the extra tree tokens cost and what they are
// expected to earn. The scheduler calls it per speculating decode (scheduler_spec.cpp).
//
// The worth of one more token for a sequence is its share of the decodes' step: the predicted
// time of the step's decodes alone divided by the sequences decoding in it (for one stream,
// the whole decode step). That is the throughput break-even: a step of N decodes that took
// t ms yields N tokens; drafting is worth it while the extra tokens it accepts (E) cost less
// than E x t / N. Drafted token k (on the main chain) is accepted only when tokens 1..k-1 were,
// so its expected worth is acceptance^k x share; its cost is what the model predicts it adds
// to the step. The answer is the k that maximises the expected worth minus the cost (0: do not
// draft). A single stream on a bandwidth-bound host (a large fixed cost per step, a small one
// per token) drafts deep; a batch large enough that the per-token cost dominates the step
// (compute-bound) drafts little or nothing, and drafts again as it shrinks.
#pragma once

#include <functional>

namespace pagoda {

struct DraftCostInputs {
  double acceptance = 0;      // chance a drafted token is accepted once its parent was (0..1)
  double token_share_ms = 0;  // the decodes' predicted step time / sequences decoding
  int max_draft = 0;          // what the other limits allow
};

// extra_ms(k), k >= 1: the predicted extra step time of drafting k tokens (non-decreasing).
// Returns the number of tokens to draft, 0..max_draft.
int drafts_worth_cost(const DraftCostInputs& in, const std::function<double(int)>& extra_ms);

}  // namespace pagoda
