// Service-level objectives and goodput. `--slo ttft=500ms,itl:p99=50ms` is a list of
// METRIC[:pNN]=LIMIT (metrics ttft, itl, tpot, e2e; LIMIT with a unit: us, ms or s; pNN defaults
// to p90). A load point meets the SLO when, for every objective, the pNN of that figure over the
// point (the figure its table shows) is within the limit. A request meets it when its own
// figures are within every limit (its ITL: the pNN of its own inter-token gaps); goodput is the
// share of such requests and the output tokens/s they delivered. A failed request misses every
// limit (it counts as an infinite figure in each pNN).
#pragma once

#include <string>
#include <vector>

#include "server/bench/load_runner.h"

namespace pagoda::bench {

enum class SloMetric { Ttft, Itl, Tpot, E2e };
const char* slo_metric_name(SloMetric m);

struct SloObjective {
  SloMetric metric = SloMetric::Ttft;
  double percentile = 90;  // 0..100
  double limit_s = 0;
};

// Throws std::invalid_argument naming the bad part, e.g. "--slo: 'ttft=500' needs a unit".
std::vector<SloObjective> parse_slo(const std::string& spec);
// "TTFT p90 <= 500 ms", for reports.
std::string describe(const SloObjective& o);

struct Goodput {
  int requests = 0;               // every request of the point, failed ones included
  int requests_met = 0;           // succeeded and within every limit
  double share = 0;               // requests_met / requests
  double tokens_per_s = 0;        // completion tokens of the requests that met it / wall time
  bool point_met = false;         // every objective's pNN within its limit
  std::vector<double> observed_s; // per objective: the point's pNN of that figure
};

Goodput evaluate_slo(const std::vector<SloObjective>& slo, const RunResult& run);

}  // namespace pagoda::bench
