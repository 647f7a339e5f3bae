// The /metrics exposition: every series labelled with the model's name (escaped), the success
// counter by finished_reason, the per-request histograms vLLM's dashboards read (queue, prefill,
// decode time; prompt and generation tokens), the gateway protocol's gauges under vLLM's names,
// and `promtool check metrics` accepting the text (that case skips, as CTest's "Skipped", where
// Debian's `prometheus` package is not installed).
#include <catch2/catch.hpp>

#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "server/http/metrics.h"
#include "tests/support/run_command.h"
#include "tests/support/testdata.h"

using namespace pagoda;
using namespace pagoda::server;

namespace {

// A Metrics that has seen a bit of everything, rendered.
std::string sample_exposition() {
  Metrics m;
  m.set_model_name("org/model \"q8\"");
  m.record_status(200);
  m.record_status(404);
  m.record_ttft(0.02);
  m.record_inter_token(0.01);
  m.record_e2e(0.3);
  Usage u;
  u.prompt_tokens = 12;
  u.completion_tokens = 30;
  u.queue_seconds = 0.001;
  u.prefill_seconds = 0.4;
  u.decode_seconds = 2.5;
  m.record_finished(u, "length");
  m.record_finished(u, "stop");
  m.record_finished(u, "stop");
  m.record_aborted();
  EngineStats s;
  s.alive = true;
  s.kv_blocks_total = 10;
  s.kv_blocks_used = 3;
  s.kv_block_size = 16;
  s.running = 2;
  s.waiting = 5;
  s.speculative = "ngram";
  s.spec_drafted = 40;
  s.spec_accepted = 25;
  s.spec_verifications = 11;
  s.spec_cost_skips = 2;
  return m.render(s);
}

}  // namespace

TEST_CASE("every series carries model_name; success by finished_reason; request histograms") {
  const std::string text = sample_exposition();
  std::istringstream in(text);
  std::string line;
  int series = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    ++series;
    INFO(line);
    CHECK(line.find("{model_name=\"org/model \\\"q8\\\"\"") != std::string::npos);
  }
  CHECK(series > 40);
  const std::string label = "model_name=\"org/model \\\"q8\\\"\"";
  CHECK(text.find("pagoda_request_success_total{" + label + ",finished_reason=\"stop\"} 2\n") != std::string::npos);
  CHECK(text.find("pagoda_request_success_total{" + label + ",finished_reason=\"length\"} 1\n") != std::string::npos);
  for (const char* h : {"pagoda_request_queue_time_seconds", "pagoda_request_prefill_time_seconds",
                        "pagoda_request_decode_time_seconds", "pagoda_request_prompt_tokens",
                        "pagoda_request_generation_tokens", "pagoda_time_to_first_token_seconds"}) {
    INFO(h);
    CHECK(text.find(std::string("# TYPE ") + h + " histogram\n") != std::string::npos);
    const bool per_request = std::string(h) != "pagoda_time_to_first_token_seconds";  // TTFT: one observation
    CHECK((text.find(std::string(h) + "_count{" + label + "} " + (per_request ? "3" : "1") + "\n") !=
           std::string::npos));
  }
  CHECK(text.find("pagoda_request_decode_time_seconds_sum{" + label + "} 7.5\n") != std::string::npos);
  // Speculative decoding's counters, by drafter.
  const std::string spec = "{" + label + ",drafter=\"ngram\"} ";
  CHECK(text.find("pagoda_spec_draft_tokens_total" + spec + "40\n") != std::string::npos);
  CHECK(text.find("pagoda_spec_accepted_tokens_total" + spec + "25\n") != std::string::npos);
  CHECK(text.find("pagoda_spec_verify_steps_total" + spec + "11\n") != std::string::npos);
  CHECK(text.find("pagoda_spec_cost_skips_total" + spec + "2\n") != std::string::npos);
  CHECK(text.find("pagoda_request_prompt_tokens_bucket{" + label + ",le=\"20\"} 3\n") != std::string::npos);
  CHECK(text.find("pagoda_request_prompt_tokens_bucket{" + label + ",le=\"10\"} 0\n") != std::string::npos);
}

TEST_CASE("the gateway protocol's gauges under vLLM's names, from the engine's stats") {
  const std::string text = sample_exposition();
  const std::string label = "model_name=\"org/model \\\"q8\\\"\"";
  for (const char* g : {"vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc",
                        "vllm:gpu_cache_usage_perc", "vllm:cache_config_info", "vllm:lora_requests_info"}) {
    INFO(g);
    CHECK(text.find(std::string("# TYPE ") + g + " gauge\n") != std::string::npos);
  }
  CHECK(text.find("vllm:num_requests_waiting{" + label + "} 5\n") != std::string::npos);
  CHECK(text.find("vllm:num_requests_running{" + label + "} 2\n") != std::string::npos);
  CHECK(text.find("vllm:kv_cache_usage_perc{" + label + "} 0.3\n") != std::string::npos);
  CHECK(text.find("vllm:gpu_cache_usage_perc{" + label + "} 0.3\n") != std::string::npos);
  CHECK(text.find("vllm:cache_config_info{" + label + ",block_size=\"16\",num_gpu_blocks=\"10\"} 1\n") !=
        std::string::npos);
  const std::string lora =
      "vllm:lora_requests_info{" + label + ",max_lora=\"0\",running_lora_adapters=\"\",waiting_lora_adapters=\"\"} ";
  const size_t at = text.find(lora);
  REQUIRE(at != std::string::npos);
  const double stamp = std::stod(text.substr(at + lora.size()));
  const double now = (double)std::time(nullptr);
  CHECK(stamp > now - 60);
  CHECK(stamp < now + 60);
}

TEST_CASE("vllm:lora_requests_info lists adapters comma-separated, escaped") {
  Metrics m;
  EngineStats s;
  s.max_loras = 4;
  s.running_lora_adapters = {"sql", "chat\"v2"};
  s.waiting_lora_adapters = {"math"};
  const std::string text = m.render(s);
  CHECK(text.find(",max_lora=\"4\",running_lora_adapters=\"sql,chat\\\"v2\",waiting_lora_adapters=\"math\"} ") !=
        std::string::npos);
}

TEST_CASE("promtool check metrics accepts the exposition", "[testdata]") {
  if (!pagoda::testing::requirement_met(pagoda::testing::run_command("command -v promtool").status == 0,
                                        "promtool missing (Debian: apt-get install prometheus)"))
    return;
  const std::string path = "/tmp/pagoda_metrics_" + std::to_string(getpid()) + ".txt";
  std::ofstream(path) << sample_exposition();
  const auto r = pagoda::testing::run_command("promtool check metrics < " + path + " 2>&1");
  std::remove(path.c_str());
  INFO(r.out);
  // promtool exits 1 on a parse error and 3 on lint findings. Its linter reserves ':' for
  // recording rules, so vLLM's own names (which the gateway's endpoint picker reads) draw that
  // one finding each, and nothing else may: pagoda's series lint clean.
  CHECK((r.status == 0 || r.status == 3));
  std::istringstream lines(r.out);
  std::string line;
  int colon_findings = 0;
  while (std::getline(lines, line)) {
    INFO(line);
    CHECK(line.rfind("vllm:", 0) == 0);
    CHECK(line.find(" metric names should not contain ':'") != std::string::npos);
    ++colon_findings;
  }
  CHECK(colon_findings == 6);
}
