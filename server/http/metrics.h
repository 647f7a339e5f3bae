// Prometheus text exposition (format 0.0.4) of the engine's counters and the HTTP layer's own:
// status counts and latency histograms. Every series carries `model_name` (vLLM's dashboards
// select on it); `promtool check metrics` accepts the output (a ctest runs it). Beside them, the
// gauges the Kubernetes Gateway API Inference Extension's endpoint picker reads, under vLLM's
// names (vllm:num_requests_waiting, ...), from the same values. Thread-safe: HTTP workers
// record, /metrics renders.
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
  // Appends the _bucket/_sum/_count lines for `name`; `labels` (`k="v",...`, may be empty)
  // go on every series.
  void render(const std::string& name, const std::string& help, const std::string& labels,
              std::string& out) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; last = +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

class Metrics {
 public:
  Metrics();
  // The served model's name, the `model_name` label of every series.
  void set_model_name(const std::string& name);
  void record_status(int http_status);
  void record_ttft(double seconds);           // request arrival -> first generated token
  void record_inter_token(double seconds);    // between two generated tokens of one choice
  void record_e2e(double seconds);            // request arrival -> last byte of the answer
  // One request answered in full: counted by `finished_reason` (stop, length, ...); its tokens
  // and the engine's phase timings (Usage's queue/prefill/decode seconds) go to histograms.
  void record_finished(const Usage& u, const std::string& finished_reason = "stop");
  void record_aborted();                      // a generation request cut short (client left)

  // The whole exposition: engine gauges/counters from `stats` plus the HTTP metrics; with
  // `conn`, the connection loop's too, and its requests waiting for a worker or for body memory
  // count in pagoda_requests_waiting.
  std::string render(const EngineStats& stats, const ConnectionStats* conn = nullptr) const;

 private:
  mutable std::mutex mu_;
  std::map<int, uint64_t> status_counts_;
  std::string labels_ = "model_name=\"\"";  // `model_name="..."`, escaped
  Histogram ttft_, itl_, e2e_;
  Histogram queue_, prefill_, decode_;        // seconds per request phase
  Histogram prompt_tokens_, generation_tokens_;  // per request
  std::map<std::string, uint64_t> finished_;  // by finished_reason
  uint64_t aborted_ = 0;
};

}  // namespace pagoda::server
