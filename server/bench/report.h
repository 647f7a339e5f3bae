// Turns raw request timings into the numbers people compare servers by (percentiles, throughput,
// goodput), and writes them as a terminal table or JSON; html_report.h draws the HTML page.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/bench/load_runner.h"
#include "server/bench/slo.h"

namespace pagoda::bench {

// The q-quantile (0..1) by linear interpolation between order statistics; 0 for no values.
double percentile(std::vector<double> values, double q);

// One request's latency figures: TTFT (-1 when no chunk came), TPOT (-1 under two tokens), e2e,
// and its inter-token gaps.
struct RequestFigures {
  double ttft_s = -1, tpot_s = -1, e2e_s = 0;
  std::vector<double> itl_s;
};
RequestFigures figures_of(const RequestResult& r);

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
// Output tokens/s and requests in flight over a run, in bins of a nice width (1, 2 or 5 x 10^k s)
// that cut the run into 20-50 of them, whatever its length. In flight: the time-weighted mean.
struct TimeSeries {
  double bin_s = 1;
  std::vector<double> tokens_per_s, in_flight;  // one value per bin
};
TimeSeries time_series(const RunResult& run);

// "1 user", "16 users", "2.5 req/s".
std::string load_label(const Summary& s);

// One server's part of a run: its points in sweep order.
struct TargetReport {
  std::string url, model;
  nlohmann::json server = nlohmann::json::object();  // what it says of itself (server_info.h)
  std::vector<RunResult> runs;
  std::vector<Summary> points;
  std::vector<Goodput> goodput;                      // per point; empty without --slo
};

struct BenchReport {
  std::string sweep_key;                             // "users", "rate" or empty
  std::vector<SloObjective> slo;
  nlohmann::json meta = nlohmann::json::object();    // client host, date, command line, seed, ...
  std::vector<TargetReport> targets;                 // one, or two when comparing
};

// The highest load point (index) that met the SLO, or -1.
int highest_load_meeting_slo(const TargetReport& t);

nlohmann::json summary_to_json(const Summary& s);
// With raw_timings, each point also carries its requests' timings ("run"), which
// `pagoda bench report` reads back; the HTML page's fold shows the summaries only.
nlohmann::json report_to_json(const BenchReport& r, bool raw_timings = true);
// One table per target: one row per point; with two targets, the second's rows carry the ratio
// second / first of each figure.
std::string format_table(const BenchReport& r);

}  // namespace pagoda::bench
