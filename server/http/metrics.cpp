#include "server/http/metrics.h"

#include "server/http/connection_loop.h"

#include <chrono>
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

void metric(std::string& out, const char* name, const char* type, const char* help, const std::string& labels,
            double v) {
  out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  out += std::string(name) + "{" + labels + "} " + num(v) + "\n";
}

// A label value as the exposition format spells it (backslash, quote and newline escaped).
std::string label_value(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

// Bounds of the per-request token histograms (vLLM's 1-2-5 series up to a long context).
std::vector<double> token_bounds() {
  std::vector<double> b;
  for (double decade = 1; decade <= 1e5; decade *= 10)
    for (double m : {1.0, 2.0, 5.0}) b.push_back(m * decade);
  return b;
}

// Bounds of the per-request phase histograms, seconds.
std::vector<double> phase_bounds() {
  return {0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680};
}

// Adapter names as one label value: comma-separated, as vLLM writes them.
std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ",") + n;
  return label_value(out);
}

// The model-server protocol of the Kubernetes Gateway API Inference Extension, under vLLM's
// names so its endpoint picker reads pagoda with no per-server mapping: queue length, running
// count and KV use (gauges, the same values as pagoda's own series above), the cache layout
// (an info gauge of value 1) and the LoRA adapters (an info gauge whose value is the time of the
// update, seconds since the epoch, so a reader can pick the newest).
void gateway_protocol(std::string& out, const EngineStats& s, double waiting, double kv_usage,
                      const std::string& labels) {
  metric(out, "vllm:num_requests_waiting", "gauge", "Requests waiting to be scheduled (as pagoda_requests_waiting).",
         labels, waiting);
  metric(out, "vllm:num_requests_running", "gauge", "Requests being processed (as pagoda_requests_running).",
         labels, s.running);
  metric(out, "vllm:kv_cache_usage_perc", "gauge", "KV cache usage, 0 to 1 (as pagoda_kv_cache_usage_ratio).",
         labels, kv_usage);
  metric(out, "vllm:gpu_cache_usage_perc", "gauge", "KV cache usage, 0 to 1 (the older name).", labels, kv_usage);
  metric(out, "vllm:cache_config_info", "gauge", "The KV cache's layout, in labels.",
         labels + ",block_size=\"" + std::to_string(s.kv_block_size) + "\",num_gpu_blocks=\"" +
             std::to_string(s.kv_blocks_total) + "\"",
         1);
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  metric(out, "vllm:lora_requests_info", "gauge", "LoRA adapters, in labels; the value is the update time.",
         labels + ",max_lora=\"" + std::to_string(s.max_loras) + "\",running_lora_adapters=\"" +
             joined(s.running_lora_adapters) + "\",waiting_lora_adapters=\"" + joined(s.waiting_lora_adapters) +
             "\"",
         now);
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

void Histogram::render(const std::string& name, const std::string& help, const std::string& labels,
                       std::string& out) const {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
  const std::string lead = labels.empty() ? "" : labels + ",";
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    out += name + "_bucket{" + lead + "le=\"" + num(bounds_[i]) + "\"} " + std::to_string(cum) + "\n";
  }
  cum += counts_.back();
  out += name + "_bucket{" + lead + "le=\"+Inf\"} " + std::to_string(cum) + "\n";
  out += name + "_sum{" + labels + "} " + num(sum_) + "\n";
  out += name + "_count{" + labels + "} " + std::to_string(count_) + "\n";
}

Metrics::Metrics()
    : ttft_({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10,
             20, 40, 80}),
      itl_({0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5,
            5, 10}),
      e2e_({0.1, 0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480}),
      queue_(phase_bounds()),
      prefill_(phase_bounds()),
      decode_(phase_bounds()),
      prompt_tokens_(token_bounds()),
      generation_tokens_(token_bounds()) {}

void Metrics::set_model_name(const std::string& name) {
  std::lock_guard<std::mutex> lk(mu_);
  labels_ = "model_name=\"" + label_value(name) + "\"";
}

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
void Metrics::record_finished(const Usage& u, const std::string& finished_reason) {
  std::lock_guard<std::mutex> lk(mu_);
  ++finished_[finished_reason];
  prompt_tokens_.observe(u.prompt_tokens);
  generation_tokens_.observe(u.completion_tokens);
  if (u.queue_seconds >= 0) queue_.observe(u.queue_seconds);
  if (u.prefill_seconds >= 0) prefill_.observe(u.prefill_seconds);
  if (u.decode_seconds >= 0) decode_.observe(u.decode_seconds);
}
void Metrics::record_aborted() {
  std::lock_guard<std::mutex> lk(mu_);
  ++aborted_;
}

std::string Metrics::render(const EngineStats& s, const ConnectionStats* conn) const {
  std::string out;
  out.reserve(16384);
  std::unique_lock<std::mutex> lk(mu_);
  const std::string labels = labels_;
  lk.unlock();
  metric(out, "pagoda_requests_running", "gauge", "Sequences being processed by the engine.", labels,
         s.running);
  const double waiting = s.waiting + (conn ? conn->waiting : 0);
  const double kv_usage = s.kv_blocks_total ? (double)s.kv_blocks_used / s.kv_blocks_total : 0.0;
  metric(out, "pagoda_requests_waiting", "gauge",
         "Sequences waiting to be scheduled, plus requests received and waiting for an HTTP worker.", labels,
         waiting);
  metric(out, "pagoda_kv_blocks_capacity", "gauge", "KV cache blocks in the pool.", labels, s.kv_blocks_total);
  metric(out, "pagoda_kv_blocks_used", "gauge", "KV cache blocks held by sequences.", labels,
         s.kv_blocks_used);
  metric(out, "pagoda_kv_blocks_cached", "gauge",
         "Free KV cache blocks still holding reusable prefix data.", labels, s.kv_blocks_cached);
  metric(out, "pagoda_kv_cache_usage_ratio", "gauge", "Fraction of KV blocks in use.", labels, kv_usage);
  metric(out, "pagoda_prompt_tokens_total", "counter", "Prompt tokens processed (computed + cached).", labels,
         (double)s.prompt_tokens);
  metric(out, "pagoda_prefix_cache_hit_tokens_total", "counter",
         "Prompt tokens served from the prefix cache.", labels, (double)s.prompt_tokens_cached);
  metric(out, "pagoda_kv_host_tier_blocks", "gauge", "Evicted prefix blocks held in host memory (--kv-host-memory).",
         labels, (double)s.kv_host_blocks);
  metric(out, "pagoda_kv_host_tier_bytes", "gauge", "Host memory taken by those blocks.", labels,
         (double)s.kv_host_bytes);
  metric(out, "pagoda_kv_host_tier_spilled_blocks_total", "counter",
         "Evicted prefix blocks copied to host memory.", labels, (double)s.kv_host_spilled);
  metric(out, "pagoda_kv_host_tier_restored_blocks_total", "counter",
         "Prefix blocks copied back from host memory instead of recomputed.", labels, (double)s.kv_host_restored);
  metric(out, "pagoda_kv_disk_loaded_blocks_total", "counter",
         "Prefix blocks restored from the --kv-cache-dir file at start.", labels, (double)s.kv_disk_blocks_loaded);
  metric(out, "pagoda_kv_disk_hit_blocks_total", "counter",
         "Prefix-cache hits on blocks restored from the --kv-cache-dir file.", labels, (double)s.kv_disk_hits);
  metric(out, "pagoda_kv_disk_saved_blocks_total", "counter", "Prefix blocks written to the --kv-cache-dir file.",
         labels, (double)s.kv_disk_blocks_saved);
  metric(out, "pagoda_kv_disk_saves_total", "counter", "Saves of the prefix cache to the --kv-cache-dir file.",
         labels, (double)s.kv_disk_saves);
  metric(out, "pagoda_generation_tokens_total", "counter", "Tokens generated.", labels,
         (double)s.generation_tokens);
  metric(out, "pagoda_preemptions_total", "counter", "Sequences preempted for lack of KV blocks.", labels,
         (double)s.preemptions);
  metric(out, "pagoda_engine_steps_total", "counter", "Forward passes run by the engine.", labels,
         (double)s.steps);
  metric(out, "pagoda_forced_tokens_total", "counter",
         "Structured output: tokens the grammar forced, appended without a decode step each.", labels,
         (double)s.forced_tokens);
  const std::string spec_labels = labels + ",drafter=\"" + (s.speculative ? s.speculative : "none") + "\"";
  metric(out, "pagoda_spec_draft_tokens_total", "counter",
         "Speculative decoding: drafted tokens verified by the model, by drafter (--speculative).", spec_labels,
         (double)s.spec_drafted);
  metric(out, "pagoda_spec_accepted_tokens_total", "counter", "Speculative decoding: drafted tokens accepted.",
         spec_labels, (double)s.spec_accepted);
  metric(out, "pagoda_spec_verify_steps_total", "counter",
         "Speculative decoding: decode steps of a sequence that verified a draft tree.", spec_labels,
         (double)s.spec_verifications);
  metric(out, "pagoda_spec_cost_skips_total", "counter",
         "Speculative decoding: decodes not drafted because the step-cost model said it would not pay.",
         spec_labels, (double)s.spec_cost_skips);
  metric(out, "pagoda_spec_draft_kv_blocks_used", "gauge",
         "Speculative decoding: blocks of the draft model's own KV cache held by sequences.", labels,
         s.spec_draft_blocks_used);
  metric(out, "pagoda_engine_alive", "gauge", "1 while the engine thread runs.", labels, s.alive ? 1 : 0);
  gateway_protocol(out, s, waiting, kv_usage, labels);

  lk.lock();
  out += "# HELP pagoda_request_success_total Requests answered in full, by finished_reason.\n"
         "# TYPE pagoda_request_success_total counter\n";
  for (const char* reason : {"stop", "length"})  // always present, so rates start at zero
    if (!finished_.count(reason))
      out += "pagoda_request_success_total{" + labels + ",finished_reason=\"" + reason + "\"} 0\n";
  for (const auto& [reason, n] : finished_)
    out += "pagoda_request_success_total{" + labels + ",finished_reason=\"" + label_value(reason) + "\"} " +
           std::to_string(n) + "\n";
  metric(out, "pagoda_request_aborted_total", "counter",
         "Generation requests cut short (client gone, timeout, shutdown).", labels, (double)aborted_);
  prompt_tokens_.render("pagoda_request_prompt_tokens", "Prompt tokens per finished request.", labels, out);
  generation_tokens_.render("pagoda_request_generation_tokens", "Generated tokens per finished request.", labels,
                            out);
  queue_.render("pagoda_request_queue_time_seconds", "Time a request waited before its first step.", labels, out);
  prefill_.render("pagoda_request_prefill_time_seconds", "Time from a request's first step to its first token.",
                  labels, out);
  decode_.render("pagoda_request_decode_time_seconds", "Time from a request's first token to its last.", labels,
                 out);
  ttft_.render("pagoda_time_to_first_token_seconds", "Time to first token.", labels, out);
  itl_.render("pagoda_inter_token_latency_seconds", "Time between generated tokens.", labels, out);
  e2e_.render("pagoda_e2e_request_latency_seconds", "Request latency, arrival to last byte.", labels, out);
  if (conn) {
    metric(out, "pagoda_http_connections_open", "gauge", "Client connections open.", labels, conn->open);
    metric(out, "pagoda_http_requests_queued", "gauge",
           "Requests received in full, waiting for a worker or for body memory.", labels, conn->waiting);
    metric(out, "pagoda_http_body_bytes_held", "gauge", "Request body bytes held in memory.", labels,
           (double)conn->body_bytes_held);
    metric(out, "pagoda_http_connections_rejected_total", "counter",
           "Connections refused with 503: too many open.", labels, (double)conn->rejected);
    metric(out, "pagoda_http_connections_evicted_total", "counter",
           "Idle keep-alive connections closed to make room for new ones.", labels, (double)conn->evicted);
    out += "# HELP pagoda_http_slow_clients_total Connections cut for sending too slowly.\n"
           "# TYPE pagoda_http_slow_clients_total counter\n"
           "pagoda_http_slow_clients_total{" + labels + ",phase=\"headers\"} " + std::to_string(conn->slow_headers) +
           "\npagoda_http_slow_clients_total{" + labels + ",phase=\"body\"} " + std::to_string(conn->slow_bodies) + "\n";
  }
  out += "# HELP pagoda_http_requests_total HTTP responses by status code.\n"
         "# TYPE pagoda_http_requests_total counter\n";
  for (const auto& [status, n] : status_counts_)
    out += "pagoda_http_requests_total{" + labels + ",status=\"" + std::to_string(status) + "\"} " +
           std::to_string(n) + "\n";
  return out;
}

}  // namespace pagoda::server
