// The load tester's statistics on fixed data: percentiles, per-request figures, the SLO syntax
// and goodput, and the time bins of throughput and requests in flight.
#include <limits>

#include <catch2/catch.hpp>

#include "server/bench/report.h"
#include "server/bench/slo.h"
#include "tests/unit/bench/bench_fixtures.h"

using namespace pagoda::bench;
using namespace pagoda::bench::fixtures;

TEST_CASE("percentiles interpolate between order statistics", "[bench]") {
  CHECK(percentile({}, 0.5) == 0);
  CHECK(percentile({3}, 0.99) == 3);
  CHECK(percentile({4, 1, 3, 2}, 0.5) == Approx(2.5));
  CHECK(percentile({10, 20, 30, 40, 50}, 0.9) == Approx(46));
  CHECK(percentile({1, 2, 3}, 0) == 1);
  CHECK(percentile({1, 2, 3}, 1) == 3);
  const double inf = std::numeric_limits<double>::infinity();
  CHECK(percentile({1, 2, inf}, 0.5) == 2);  // no NaN from inf - inf
  CHECK(percentile({1, 2, inf}, 0.9) == inf);
  const Distribution d = distribution_of({1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  CHECK(d.count == 10);
  CHECK(d.mean == Approx(5.5));
  CHECK(d.p50 == Approx(5.5));
  CHECK(d.p90 == Approx(9.1));
  CHECK(d.max == 10);
}

TEST_CASE("a request's figures", "[bench]") {
  const RequestFigures f = figures_of(request(0, 0.2, 0.05, 5));
  CHECK(f.ttft_s == Approx(0.2));
  CHECK(f.e2e_s == Approx(0.4));
  CHECK(f.tpot_s == Approx(0.05));
  REQUIRE(f.itl_s.size() == 4);
  CHECK(f.itl_s[2] == Approx(0.05));
  CHECK(figures_of(request(0, 0.2, 0.05, 1)).tpot_s == -1);  // one token: no TPOT
}

TEST_CASE("--slo syntax and its errors", "[bench]") {
  auto s = parse_slo("ttft=500ms,itl:p99=50ms,e2e:p50=2s,tpot=800us");
  REQUIRE(s.size() == 4);
  CHECK(s[0].metric == SloMetric::Ttft);
  CHECK(s[0].percentile == 90);
  CHECK(s[0].limit_s == Approx(0.5));
  CHECK(s[1].metric == SloMetric::Itl);
  CHECK(s[1].percentile == 99);
  CHECK(s[1].limit_s == Approx(0.05));
  CHECK(s[2].limit_s == Approx(2));
  CHECK(s[3].limit_s == Approx(0.0008));
  CHECK(parse_slo("ttft:p99.9=1s")[0].percentile == Approx(99.9));
  CHECK(describe(s[1]) == "ITL p99 <= 50 ms");

  auto error_of = [](const std::string& spec) {
    try {
      parse_slo(spec);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(error_of("ttft=500").find("needs a unit") != std::string::npos);
  CHECK(error_of("ttft=500min").find("unknown unit 'min'") != std::string::npos);
  CHECK(error_of("latency=5ms").find("unknown metric 'latency'") != std::string::npos);
  CHECK(error_of("ttft:90=5ms").find("percentile") != std::string::npos);
  CHECK(error_of("ttft:p0=5ms").find("percentile") != std::string::npos);
  CHECK(error_of("ttft:p101=5ms").find("percentile") != std::string::npos);
  CHECK(error_of("ttft").find("METRIC[:pNN]=LIMIT") != std::string::npos);
  CHECK(error_of("ttft=-5ms").find("positive") != std::string::npos);
  CHECK(error_of("ttft=fast").find("number with a unit") != std::string::npos);
  CHECK(error_of("ttft=5ms,").find("empty objective") != std::string::npos);
}

TEST_CASE("goodput counts the requests within every limit", "[bench]") {
  RunResult run;
  run.wall_s = 2;
  // TTFTs of 0.1 .. 1.0 s, 10 tokens each at 20 ms a token.
  for (int i = 1; i <= 10; ++i) run.requests.push_back(request(0, 0.1 * i, 0.02, 10));

  Goodput g = evaluate_slo(parse_slo("ttft=550ms"), run);
  CHECK(g.requests == 10);
  CHECK(g.requests_met == 5);
  CHECK(g.share == Approx(0.5));
  CHECK(g.tokens_per_s == Approx(50.0 / 2));
  REQUIRE(g.observed_s.size() == 1);
  CHECK(g.observed_s[0] == Approx(0.91));  // p90 of 0.1..1.0
  CHECK_FALSE(g.point_met);

  g = evaluate_slo(parse_slo("ttft:p50=550ms"), run);  // the median, 0.55 s, is within
  CHECK(g.point_met);

  g = evaluate_slo(parse_slo("ttft=2s,itl=10ms"), run);  // every gap is 20 ms
  CHECK(g.requests_met == 0);
  CHECK_FALSE(g.point_met);
  g = evaluate_slo(parse_slo("ttft=2s,itl=25ms,tpot=25ms"), run);
  CHECK(g.requests_met == 10);
  CHECK(g.point_met);

  // A failed request misses every objective, and counts in the point's percentile.
  run.requests.push_back(failed(0, 0.1));
  g = evaluate_slo(parse_slo("e2e:p99=5s"), run);
  CHECK(g.requests == 11);
  CHECK(g.requests_met == 10);
  CHECK_FALSE(g.point_met);
  g = evaluate_slo(parse_slo("e2e:p50=5s"), run);
  CHECK(g.point_met);
}

TEST_CASE("the highest load meeting the SLO", "[bench]") {
  TargetReport t;
  for (int users : {1, 4, 16}) {
    Summary s;
    s.users = users;
    t.points.push_back(s);
  }
  t.goodput.resize(3);
  t.goodput[0].point_met = true;
  t.goodput[1].point_met = true;
  CHECK(highest_load_meeting_slo(t) == 1);
  t.goodput[0].point_met = t.goodput[1].point_met = false;
  CHECK(highest_load_meeting_slo(t) == -1);
  CHECK(load_label(t.points[0]) == "1 user");
  CHECK(load_label(t.points[2]) == "16 users");
}

TEST_CASE("time bins adapt to the run's length", "[bench]") {
  // A sub-second run: 4 requests of 10 tokens, 0.4 s in all.
  RunResult run;
  run.wall_s = 0.4;
  for (int i = 0; i < 4; ++i) run.requests.push_back(request(0.1 * i, 0.0, 0.0, 10));
  // each request: all 10 tokens at its start, done at once; give them a duration.
  for (auto& r : run.requests) r.e2e_s = 0.05;
  TimeSeries ts = time_series(run);
  CHECK(ts.bin_s == Approx(0.01));
  CHECK(ts.tokens_per_s.size() == 40);
  double tokens = 0, busy = 0;
  for (size_t i = 0; i < ts.tokens_per_s.size(); ++i) {
    tokens += ts.tokens_per_s[i] * ts.bin_s;
    busy += ts.in_flight[i] * ts.bin_s;
  }
  CHECK(tokens == Approx(40));   // every token lands in some bin
  CHECK(busy == Approx(0.2));    // 4 requests x 0.05 s in flight
  CHECK(ts.tokens_per_s[0] == Approx(10 / 0.01));
  CHECK(ts.in_flight[2] == Approx(1));
  CHECK(ts.in_flight[7] == Approx(0));

  // A long run: 2-second bins over 60 s.
  RunResult longer;
  longer.wall_s = 60;
  longer.requests.push_back(request(0, 1, 0.5, 100));
  longer.requests.back().e2e_s = 51;
  ts = time_series(longer);
  CHECK(ts.bin_s == Approx(2));
  CHECK(ts.tokens_per_s.size() == 30);
  CHECK(ts.in_flight[10] == Approx(1));
  CHECK(ts.in_flight[29] == Approx(0));
}
