// Prometheus text exposition (format 0.0.4) of the engine's counters and the HTTP layer's own:
// status counts and latency histograms. Thread-safe: HTTP workers record, /metrics renders.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine_api.h"

namespace pagoda::server {

struct ConnectionStats;  // connection_loop.h

// A cumulative histogram with fixed upper bounds (seconds), as Prometheus expects.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double v);
  // Appends the _bucket/_sum/_count lines for `name`.
  void render(const std::string& name, const std::string& help, std::string& out) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; last = +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

class Metrics {
 public:
  Metrics();
  void record_status(int http_status);
  void record_ttft(double seconds);           // request arrival -> first generated token
  void record_inter_token(double seconds);    // between two generated tokens of one choice
  void record_e2e(double seconds);            // request arrival -> last byte of the answer
  void record_finished(const Usage& u);       // one finished generation request
  void record_aborted();                      // a generation request cut short (client left)

  // The whole exposition: engine gauges/counters from `stats` plus the HTTP metrics; with
  // `conn`, the connection loop's too, and its requests waiting for a worker or for body memory
  // count in pagoda_requests_waiting.
  std::string render(const EngineStats& stats, const ConnectionStats* conn = nullptr) const;

 private:
  mutable std::mutex mu_;
  std::map<int, uint64_t> status_counts_;
  Histogram ttft_, itl_, e2e_;
  uint64_t finished_ = 0, aborted_ = 0;
  uint64_t req_prompt_tokens_ = 0, req_completion_tokens_ = 0;
};

}  // namespace pagoda::server
