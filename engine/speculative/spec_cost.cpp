// Speculation's cost gate (spec_cost.h).
#include "engine/speculative/spec_cost.h"

#include <algorithm>

namespace pagoda {

int drafts_worth_cost(const DraftCostInputs& in, const std::function<double(int)>& extra_ms) {
  const double p = std::clamp(in.acceptance, 0.0, 1.0);
  double worth = 0, chance = 1, best_net = 0;
  int best = 0;
  for (int k = 1; k <= in.max_draft; ++k) {
    chance *= p;
    worth += chance * in.token_share_ms;
    const double net = worth - extra_ms(k);
    if (net > best_net) best_net = net, best = k;
    if (chance * in.token_share_ms <= 0) break;  // nothing more to gain, only cost
  }
  return best;
}

}  // namespace pagoda
