#include "server/http/metrics.h"

#include "server/http/connection_loop.h"

#include <cstdio>
#include <cstdlib>

namespace pagoda::server {

namespace {

// The shortest text that reads back as exactly `v` ("0.005", not "0.0050000000000000001").
std::string num(double v) {
  char buf[64];
  for (int precision = 6; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

void metric(std::string& out, const char* name, const char* type, const char* help, double v) {
  out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  out += std::string(name) + " " + num(v) + "\n";
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++count_;
}

void Histogram::render(const std::string& name, const std::string& help, std::string& out) const {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    out += name + "_bucket{le=\"" + num(bounds_[i]) + "\"} " + std::to_string(cum) + "\n";
  }
  cum += counts_.back();
  out += name + "_bucket{le=\"+Inf\"} " + std::to_string(cum) + "\n";
  out += name + "_sum " + num(sum_) + "\n";
  out += name + "_count " + std::to_string(count_) + "\n";
}

Metrics::Metrics()
    : ttft_({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10,
             20, 40, 80}),
      itl_({0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5,
            5, 10}),
      e2e_({0.1, 0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480}) {}

void Metrics::record_status(int http_status) {
  std::lock_guard<std::mutex> lk(mu_);
  ++status_counts_[http_status];
}
void Metrics::record_ttft(double s) {
  std::lock_guard<std::mutex> lk(mu_);
  ttft_.observe(s);
}
void Metrics::record_inter_token(double s) {
  std::lock_guard<std::mutex> lk(mu_);
  itl_.observe(s);
}
void Metrics::record_e2e(double s) {
  std::lock_guard<std::mutex> lk(mu_);
  e2e_.observe(s);
}
void Metrics::record_finished(const Usage& u) {
  std::lock_guard<std::mutex> lk(mu_);
  ++finished_;
  req_prompt_tokens_ += (uint64_t)u.prompt_tokens;
  req_completion_tokens_ += (uint64_t)u.completion_tokens;
}
void Metrics::record_aborted() {
  std::lock_guard<std::mutex> lk(mu_);
  ++aborted_;
}

std::string Metrics::render(const EngineStats& s, const ConnectionStats* conn) const {
  std::string out;
  out.reserve(8192);
  metric(out, "pagoda_requests_running", "gauge", "Sequences being processed by the engine.",
         s.running);
  metric(out, "pagoda_requests_waiting", "gauge",
         "Sequences waiting to be scheduled, plus requests received and waiting for an HTTP worker.",
         s.waiting + (conn ? conn->waiting : 0));
  metric(out, "pagoda_kv_blocks_total", "gauge", "KV cache blocks in the pool.", s.kv_blocks_total);
  metric(out, "pagoda_kv_blocks_used", "gauge", "KV cache blocks held by sequences.",
         s.kv_blocks_used);
  metric(out, "pagoda_kv_blocks_cached", "gauge",
         "Free KV cache blocks still holding reusable prefix data.", s.kv_blocks_cached);
  metric(out, "pagoda_kv_cache_usage_ratio", "gauge", "Fraction of KV blocks in use.",
         s.kv_blocks_total ? (double)s.kv_blocks_used / s.kv_blocks_total : 0.0);
  metric(out, "pagoda_prompt_tokens_total", "counter", "Prompt tokens processed (computed + cached).",
         (double)s.prompt_tokens);
  metric(out, "pagoda_prefix_cache_hit_tokens_total", "counter",
         "Prompt tokens served from the prefix cache.", (double)s.prompt_tokens_cached);
  metric(out, "pagoda_generation_tokens_total", "counter", "Tokens generated.",
         (double)s.generation_tokens);
  metric(out, "pagoda_preemptions_total", "counter", "Sequences preempted for lack of KV blocks.",
         (double)s.preemptions);
  metric(out, "pagoda_engine_steps_total", "counter", "Forward passes run by the engine.",
         (double)s.steps);
  metric(out, "pagoda_engine_alive", "gauge", "1 while the engine thread runs.", s.alive ? 1 : 0);

  std::lock_guard<std::mutex> lk(mu_);
  metric(out, "pagoda_request_success_total", "counter", "Generation requests answered in full.",
         (double)finished_);
  metric(out, "pagoda_request_aborted_total", "counter",
         "Generation requests cut short (client gone, timeout, shutdown).", (double)aborted_);
  metric(out, "pagoda_request_prompt_tokens_total", "counter",
         "Prompt tokens of finished requests.", (double)req_prompt_tokens_);
  metric(out, "pagoda_request_generation_tokens_total", "counter",
         "Completion tokens of finished requests.", (double)req_completion_tokens_);
  ttft_.render("pagoda_time_to_first_token_seconds", "Time to first token.", out);
  itl_.render("pagoda_inter_token_latency_seconds", "Time between generated tokens.", out);
  e2e_.render("pagoda_e2e_request_latency_seconds", "Request latency, arrival to last byte.", out);
  if (conn) {
    metric(out, "pagoda_http_connections_open", "gauge", "Client connections open.", conn->open);
    metric(out, "pagoda_http_requests_queued", "gauge",
           "Requests received in full, waiting for a worker or for body memory.", conn->waiting);
    metric(out, "pagoda_http_body_bytes_held", "gauge", "Request body bytes held in memory.",
           (double)conn->body_bytes_held);
    metric(out, "pagoda_http_connections_rejected_total", "counter",
           "Connections refused with 503: too many open.", (double)conn->rejected);
    metric(out, "pagoda_http_connections_evicted_total", "counter",
           "Idle keep-alive connections closed to make room for new ones.", (double)conn->evicted);
    out += "# HELP pagoda_http_slow_clients_total Connections cut for sending too slowly.\n"
           "# TYPE pagoda_http_slow_clients_total counter\n"
           "pagoda_http_slow_clients_total{phase=\"headers\"} " + std::to_string(conn->slow_headers) +
           "\npagoda_http_slow_clients_total{phase=\"body\"} " + std::to_string(conn->slow_bodies) + "\n";
  }
  out += "# HELP pagoda_http_requests_total HTTP responses by status code.\n"
         "# TYPE pagoda_http_requests_total counter\n";
  for (const auto& [status, n] : status_counts_)
    out += "pagoda_http_requests_total{status=\"" + std::to_string(status) + "\"} " +
           std::to_string(n) + "\n";
  return out;
}

}  // namespace pagoda::server
