// Requests with chosen timings, for the load tester's tests.
#pragma once

#include "server/bench/load_runner.h"

namespace pagoda::bench::fixtures {

// A successful request: starts at `start`, first chunk at `ttft`, one token a chunk every `gap`.
inline RequestResult request(double start, double ttft, double gap, int tokens) {
  RequestResult r;
  r.start_s = start;
  r.ttft_s = ttft;
  for (int i = 0; i < tokens; ++i) r.chunk_times_s.push_back(ttft + i * gap);
  r.e2e_s = r.chunk_times_s.back();
  r.completion_tokens = tokens;
  r.prompt_tokens = 10;
  return r;
}

inline RequestResult failed(double start, double e2e) {
  RequestResult r;
  r.start_s = start;
  r.e2e_s = e2e;
  r.error = ErrorKind::Http5xx;
  return r;
}

}  // namespace pagoda::bench::fixtures
