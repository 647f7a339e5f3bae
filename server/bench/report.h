// Turns raw request timings into the numbers people compare servers by, and writes them as a
// terminal table, JSON, or a self-contained HTML page with plots.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/bench/load_runner.h"

namespace pagoda::bench {

struct Distribution {
  int count = 0;
  double mean = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;
};
// Percentiles by linear interpolation between order statistics.
Distribution distribution_of(std::vector<double> values);

struct Summary {
  int users = 0;
  double rate = 0;
  int requests = 0, succeeded = 0, failed = 0;
  std::map<std::string, int> errors_by_kind;
  double wall_s = 0;
  long prompt_tokens = 0, completion_tokens = 0;  // succeeded requests, from usage
  double request_throughput = 0;                  // succeeded requests / s
  double output_throughput = 0;                   // completion tokens / s
  Distribution ttft_s, itl_s, tpot_s, e2e_s;
};

Summary summarize(const RunResult& run);

nlohmann::json summary_to_json(const Summary& s);
// One table for a single run, or one row per point for a sweep.
std::string format_table(const std::vector<Summary>& points, const std::string& sweep_key);
// A complete HTML page (inline CSS and SVG, no external resources).
std::string render_html(const std::vector<Summary>& points, const std::vector<RunResult>& runs,
                        const std::string& title);

}  // namespace pagoda::bench
