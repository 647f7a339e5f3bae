// Axis ticks ("nice" steps of 1, 2 or 5 x 10^k), their labels, and the chart's axes on the page.
#include <catch2/catch.hpp>

#include "server/bench/svg_plot.h"

using namespace pagoda::bench;

TEST_CASE("nice_step picks 1, 2 or 5 times a power of ten", "[bench]") {
  CHECK(nice_step(10, 5) == Approx(2));
  CHECK(nice_step(10, 10) == Approx(1));
  CHECK(nice_step(100, 4) == Approx(50));
  CHECK(nice_step(7, 5) == Approx(2));
  CHECK(nice_step(0.3, 3) == Approx(0.1));
  CHECK(nice_step(0.37, 6) == Approx(0.1));
  CHECK(nice_step(1234, 6) == Approx(500));
  CHECK(nice_step(0.0042, 40) == Approx(0.0002));
  CHECK(nice_step(0, 5) == 1);   // no span: a step all the same
  CHECK(nice_step(-3, 5) == 1);
}

TEST_CASE("nice_ticks cover the range on multiples of the step", "[bench]") {
  auto t = nice_ticks(0, 97, 5);
  REQUIRE(t.size() == 6);
  CHECK(t.front() == 0);
  CHECK(t.back() == Approx(100));
  CHECK(t[1] == Approx(20));

  t = nice_ticks(13.2, 47.9, 6);  // step 10: 10 .. 50
  CHECK(t.front() == Approx(10));
  CHECK(t.back() == Approx(50));
  for (size_t i = 1; i < t.size(); ++i) CHECK(t[i] - t[i - 1] == Approx(10));

  t = nice_ticks(0, 0.35, 6);  // no 0.30000000000000004 at the top
  CHECK(t.back() == Approx(0.4));
  CHECK(tick_label(t[3], t[1] - t[0]) == "0.3");

  t = nice_ticks(5, 5, 6);  // a single value still gets an axis around it
  CHECK(t.front() <= 5);
  CHECK(t.back() >= 5);
  CHECK(t.size() >= 2);
  t = nice_ticks(0, 0, 6);
  CHECK(t.front() == 0);
  CHECK(t.back() >= 1);
}

TEST_CASE("tick labels carry the decimals the step needs", "[bench]") {
  CHECK(tick_label(0.25, 0.05) == "0.25");
  CHECK(tick_label(0.2, 0.1) == "0.2");
  CHECK(tick_label(40, 20) == "40");
  CHECK(tick_label(0, 0.5) == "0.0");
  CHECK(tick_label(12000, 2000) == "12,000");
  CHECK(tick_label(1500000, 500000) == "1,500,000");
  CHECK(tick_label(-0.0, 1) == "0");
}

TEST_CASE("a chart has ticks, axis titles, a grid and a legend", "[bench]") {
  SvgPlot p("Latency", "time (ms)", "requests (%)");
  PlotSeries a;
  a.name = "A: http://x";
  a.color = "#123456";
  a.xy = {{0, 0}, {40, 50}, {83, 100}};
  p.add(a);
  const std::string svg = p.render();
  CHECK(svg.find("<figcaption>Latency</figcaption>") != std::string::npos);
  CHECK(svg.find(">time (ms)</text>") != std::string::npos);
  CHECK(svg.find(">requests (%)</text>") != std::string::npos);
  CHECK(svg.find("class='grid'") != std::string::npos);
  for (const char* tick : {">0</text>", ">20</text>", ">80</text>", ">100</text>"})
    CHECK(svg.find(tick) != std::string::npos);
  CHECK(svg.find(">A: http://x</text>") != std::string::npos);
  CHECK(svg.find("<script") == std::string::npos);

  SvgPlot empty("Nothing", "x", "y");
  CHECK(empty.render().find("no data") != std::string::npos);
}

TEST_CASE("html_escape quotes markup", "[bench]") {
  CHECK(html_escape("<a href=\"x\">'&'</a>") == "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;");
}
