// Saved bench reports read back: every request's timings survive the JSON, the figures recomputed
// from them equal the run's, and two single-server reports merge into a comparison.
#include <catch2/catch.hpp>

#include "server/bench/html_report.h"
#include "server/bench/report_json.h"
#include "tests/unit/bench/bench_fixtures.h"

using namespace pagoda::bench;
using namespace pagoda::bench::fixtures;

namespace {

// A one-server report of a users=1,4 sweep; `slow` scales every latency.
BenchReport sweep_report(const std::string& url, double slow, const std::string& slo) {
  BenchReport r;
  r.sweep_key = "users";
  if (!slo.empty()) r.slo = parse_slo(slo);
  r.meta = {{"workload", "synthetic: 8 prompt words"}, {"workload seed", 1}, {"date", url}};
  TargetReport t;
  t.url = url;
  t.model = "m";
  for (int users : {1, 4}) {
    RunResult run;
    run.users = users;
    run.wall_s = 2 * slow;
    for (int i = 0; i < 3 * users; ++i) run.requests.push_back(request(0.1 * i, 0.05 * slow * (i + 1), 0.01 * slow, 5));
    run.requests.push_back(failed(0.3, 0.2));
    run.requests.back().http_status = 503;
    run.requests.back().error_message = "overloaded";
    t.runs.push_back(run);
    t.points.push_back(summarize(run));
    if (!r.slo.empty()) t.goodput.push_back(evaluate_slo(r.slo, run));
  }
  r.targets.push_back(t);
  return r;
}

}  // namespace

TEST_CASE("a saved report reads back to the same figures", "[bench]") {
  const BenchReport original = sweep_report("http://a", 1, "ttft:p50=120ms,itl=20ms");
  const nlohmann::json j = report_to_json(original);
  // Through text, as a file would carry it.
  const BenchReport back = report_from_json(nlohmann::json::parse(j.dump()));
  REQUIRE(back.targets.size() == 1);
  CHECK(back.sweep_key == "users");
  REQUIRE(back.slo.size() == 2);
  CHECK(describe(back.slo[0]) == describe(original.slo[0]));
  CHECK(describe(back.slo[1]) == describe(original.slo[1]));
  const auto& a = original.targets[0];
  const auto& b = back.targets[0];
  REQUIRE(b.runs.size() == 2);
  for (size_t i = 0; i < 2; ++i) {
    CHECK(summary_to_json(b.points[i]) == summary_to_json(a.points[i]));
    CHECK(b.goodput[i].requests_met == a.goodput[i].requests_met);
    CHECK(b.goodput[i].point_met == a.goodput[i].point_met);
    CHECK(b.runs[i].requests.back().http_status == 503);
    CHECK(b.runs[i].requests.back().error_message == "overloaded");
  }
  // Written again, it is the same file.
  CHECK(report_to_json(back) == j);

  // A new SLO recomputes goodput from the raw timings.
  const auto strict = parse_slo("ttft:p50=1ms");
  const BenchReport rescored = report_from_json(j, &strict);
  CHECK(rescored.targets[0].goodput[0].requests_met == 0);
  CHECK_FALSE(rescored.targets[0].goodput[0].point_met);
}

TEST_CASE("a report without raw timings or of another shape is refused with the reason", "[bench]") {
  nlohmann::json j = report_to_json(sweep_report("http://a", 1, ""));
  j["targets"][0]["points"][0].erase("run");
  CHECK_THROWS_WITH(report_from_json(j), Catch::Contains("older pagoda bench"));
  CHECK_THROWS_WITH(report_from_json(nlohmann::json{{"x", 1}}), Catch::Contains("not a pagoda bench JSON report"));
  j = report_to_json(sweep_report("http://a", 1, ""));
  j["targets"][0]["points"][1]["run"]["requests"][0].erase("e2e_s");
  CHECK_THROWS_WITH(report_from_json(j), Catch::Contains("'e2e_s'"));
  j = report_to_json(sweep_report("http://a", 1, ""));
  j["targets"][0]["points"][0]["run"]["requests"][0]["error"] = "gremlins";
  CHECK_THROWS_WITH(report_from_json(j), Catch::Contains("gremlins"));
}

TEST_CASE("two reports merge into a comparison drawn as --compare draws one", "[bench]") {
  const BenchReport a = report_from_json(report_to_json(sweep_report("http://a", 1, "ttft=200ms")));
  const BenchReport b = report_from_json(report_to_json(sweep_report("http://b", 2, "")));
  const BenchReport m = merge_reports(a, "a.json", b, "b.json");
  REQUIRE(m.targets.size() == 2);
  CHECK(m.targets[0].url == "http://a");
  CHECK(m.targets[1].url == "http://b");
  // B is scored under A's objectives although its own file had none.
  REQUIRE(m.targets[1].goodput.size() == 2);
  CHECK(m.targets[1].goodput[0].requests == 4);
  // Metadata: shared keys once, differing ones with both values, no warning for one workload.
  CHECK(m.meta["workload"] == "synthetic: 8 prompt words");
  CHECK(m.meta["date"] == "A: http://a / B: http://b");
  CHECK_FALSE(m.meta.contains("warning"));
  // The table carries B/A ratios: B is twice as slow at every latency.
  const std::string table = format_table(m);
  CHECK(table.find("B/A") != std::string::npos);
  CHECK(table.find("2.00x") != std::string::npos);
  const std::string html = render_html(m);
  CHECK(html.find("http://b") != std::string::npos);

  BenchReport other = b;
  other.meta["workload seed"] = 2;
  CHECK(merge_reports(a, "a.json", other, "c.json").meta.contains("warning"));
  other.sweep_key = "rate";
  CHECK_THROWS_WITH(merge_reports(a, "a.json", other, "c.json"), Catch::Contains("sweep different"));
  CHECK_THROWS_WITH(merge_reports(m, "m.json", b, "b.json"), Catch::Contains("one server"));
}
