// The self-contained HTML report of `pagoda bench`: summary tables (with the ratio of each figure
// when two servers are compared), goodput under the SLO, sweep curves, latency CDFs and
// histograms, throughput and requests in flight over time, and the run's metadata as a table.
// Inline CSS and SVG only: no scripts, fonts or other files, so it opens offline and prints.
#pragma once

#include <string>

#include "server/bench/report.h"

namespace pagoda::bench {

std::string render_html(const BenchReport& report);

}  // namespace pagoda::bench
