// Drives a workload against a server: a closed loop of simulated users or an open loop of
// Poisson arrivals, with live progress on stderr.
#pragma once

#include <string>
#include <vector>

#include "server/bench/bench_options.h"
#include "server/bench/sse_client.h"
#include "server/bench/workload.h"

namespace pagoda::bench {

struct RunResult {
  std::vector<RequestResult> requests;  // in completion order
  double wall_s = 0;                    // first request sent to last reply received
  int users = 0;                        // closed loop
  double rate = 0;                      // open loop (requests/s)
};

// Runs one load point. `model` is the model name to put in the requests.
RunResult run_load(const BenchOptions& opt, const Workload& workload, const std::string& model);

}  // namespace pagoda::bench
