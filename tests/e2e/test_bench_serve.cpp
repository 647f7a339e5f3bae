// `pagoda bench` against a real `pagoda serve`: in closed and open loop every request succeeds,
// and the report's request and token counts equal what the server counted (usage and /metrics).
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <catch2/catch.hpp>

#include "tests/e2e/e2e_fixture.h"
#include "tests/support/test_files.h"

using namespace pagoda::testing;

namespace {

struct Counters {
  double prompt, generation, success;
};

Counters server_counters(int port) {
  const std::string m = http_get(port, "/metrics").body;
  return {metric_value(m, "pagoda_request_prompt_tokens_sum"),
          metric_value(m, "pagoda_request_generation_tokens_sum"),
          metric_value(m, "pagoda_request_success_total")};
}

// Runs bench with `load_args`; returns the first point of its JSON report.
json run_bench(int port, const std::string& load_args, const std::string& tag) {
  const std::string dir = e2e_dir();
  const std::string cmd = std::string("timeout 240 ") + PAGODA_BINARY + " bench --url http://127.0.0.1:" +
                          std::to_string(port) + " " + load_args + " --input-len 24 --output-len 12" +
                          " --no-progress --json " + dir + "/" + tag + ".json --html " + dir + "/" + tag +
                          ".html > " + dir + "/" + tag + ".out 2>&1";
  const int rc = std::system(cmd.c_str());
  INFO(read_file(dir + "/" + tag + ".out"));
  REQUIRE(WIFEXITED(rc));
  REQUIRE(WEXITSTATUS(rc) == 0);
  const std::string html = read_file(dir + "/" + tag + ".html");
  CHECK(html.find("<svg") != std::string::npos);
  for (const char* external : {"src=", "href=", "<link", "<script", "url(", "@import"})
    CHECK(html.find(external) == std::string::npos);
  return json::parse(read_file(dir + "/" + tag + ".json"))["points"][0];
}

void check_counts(const json& p, const Counters& before, const Counters& after, int requests) {
  CHECK(p["requests"] == requests);
  CHECK(p["succeeded"] == requests);
  CHECK(p["failed"] == 0);
  // ignore_eos and no length spread: every request generates exactly --output-len tokens.
  CHECK(p["completion_tokens"] == requests * 12);
  CHECK(p["completion_tokens"].get<double>() == after.generation - before.generation);
  CHECK(p["prompt_tokens"].get<double>() == after.prompt - before.prompt);
  CHECK(after.success - before.success == requests);
  CHECK(p["ttft_s"]["count"] == requests);
  CHECK(p["output_throughput"].get<double>() > 0);
}

}  // namespace

TEST_CASE("bench closed and open loop against pagoda serve", "[bench][e2e]") {
  auto server = start_server();
  const int port = server->port();

  SECTION("closed loop, chat") {
    const Counters before = server_counters(port);
    const json p = run_bench(port, "--users 4 --requests 12", "closed");
    check_counts(p, before, server_counters(port), 12);
    CHECK(p["users"] == 4);
  }
  SECTION("open loop, completions") {
    const Counters before = server_counters(port);
    const json p = run_bench(port, "--rate 20 --requests 10 --endpoint completions", "open");
    check_counts(p, before, server_counters(port), 10);
    CHECK(p["rate"] == 20.0);
  }
}
