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

namespace {

size_t count_of(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("bench --compare sweeps two servers alternately, with goodput and metadata", "[bench][e2e]") {
  auto a = start_server();
  auto b = start_server({"--max-seqs", "2"});
  const std::string dir = e2e_dir();
  const std::string cmd = std::string("timeout 300 ") + PAGODA_BINARY + " bench --url http://127.0.0.1:" +
                          std::to_string(a->port()) + " --compare http://127.0.0.1:" + std::to_string(b->port()) +
                          " --sweep users=1,4 --requests 8 --warmup 2 --input-len 16 --output-len 8 --seed 5" +
                          " --slo ttft=30s,itl:p99=30s --no-progress --json " + dir + "/cmp.json --html " + dir +
                          "/cmp.html > " + dir + "/cmp.out 2>&1";
  const int rc = std::system(cmd.c_str());
  const std::string out = read_file(dir + "/cmp.out");
  INFO(out);
  REQUIRE(WIFEXITED(rc));
  REQUIRE(WEXITSTATUS(rc) == 0);
  CHECK(out.find("B/A") != std::string::npos);
  CHECK(out.find("highest load meeting it: 4 users") != std::string::npos);

  const json r = json::parse(read_file(dir + "/cmp.json"));
  REQUIRE(r["targets"].size() == 2);
  for (const auto& t : r["targets"]) {
    REQUIRE(t["points"].size() == 2);
    CHECK(t["points"][0]["users"] == 1);
    CHECK(t["points"][1]["users"] == 4);
    // Warm-up requests are not counted.
    for (const auto& p : t["points"]) {
      CHECK(p["requests"] == 8);
      CHECK(p["goodput"]["share"].get<double>() == 1.0);  // limits of 30 s: every request meets them
      CHECK(p["goodput"]["point_met"] == true);
    }
    CHECK(t["highest_load_meeting_slo"] == "4 users");
    CHECK(t["server"]["server name"] == "pagoda");
    CHECK(t["server"]["/v1/models entry"]["id"] == t["model"]);
  }
  CHECK(r["targets"][1]["server"]["server flags"].get<std::string>().find("--max-seqs 2") != std::string::npos);
  CHECK(r["meta"]["workload seed"] == 5);
  CHECK(r["meta"]["warm-up requests (not counted)"] == 2);
  CHECK(r["meta"]["command line"].get<std::string>().find("--compare") != std::string::npos);
  CHECK(!r["meta"]["date"].get<std::string>().empty());

  const std::string html = read_file(dir + "/cmp.html");
  for (const char* external : {"src=", "href=", "<link", "<script", "url(", "@import"})
    CHECK(html.find(external) == std::string::npos);
  // Every chart has both axis titles and tick labels.
  const size_t charts = count_of(html, "<svg ");
  CHECK(charts >= 4 + 2 * 10);  // 4 sweep curves + goodput, then 10 charts per load point
  CHECK(count_of(html, "class='xlabel'") == charts);
  CHECK(count_of(html, "class='ylabel'") == charts);
  CHECK(count_of(html, "class='tick'") >= 4 * charts);
  CHECK(html.find("1 users") == std::string::npos);
  CHECK(html.find("1 user") != std::string::npos);
  CHECK(html.find("B/A") != std::string::npos);
  CHECK(html.find("<details>") != std::string::npos);

  // Rendered by a browser when one is installed (Debian's chromium): the page loads offline and
  // gives a screenshot of some substance.
  if (std::system("command -v chromium > /dev/null 2>&1") != 0) {
    WARN("chromium not installed: the HTML was checked as text only");
    return;
  }
  const std::string shot = dir + "/cmp.png";
  const std::string browse = "timeout 120 chromium --headless --no-sandbox --disable-gpu --screenshot=" + shot +
                             " --window-size=1280,2400 file://" + dir + "/cmp.html > " + dir +
                             "/chromium.out 2>&1";
  CHECK(std::system(browse.c_str()) == 0);
  INFO(read_file(dir + "/chromium.out"));
  CHECK(read_file(dir + "/chromium.out").find("Uncaught") == std::string::npos);
  CHECK(read_file(shot).size() > 50000);
}
