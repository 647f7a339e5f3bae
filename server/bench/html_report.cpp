#include "server/bench/html_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "server/bench/svg_plot.h"

namespace pagoda::bench {
namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string ms(double s) { return fmt("%.1f", s * 1000.0); }

const char* color_of(size_t target) { return kSeriesColors[target % 4]; }

// "A", "B": how the page names the targets when there are two.
std::string tag(const BenchReport& r, size_t t) {
  if (r.targets.size() < 2) return "";
  return t == 0 ? "A" : "B";
}

std::string legend_name(const BenchReport& r, size_t t) {
  if (r.targets.size() < 2) return "";
  return tag(r, t) + ": " + r.targets[t].url;
}

// A latency figure of every successful request of a run, in ms.
std::vector<double> figure_ms(const RunResult& run, const std::string& which) {
  std::vector<double> v;
  for (const auto& r : run.requests) {
    if (r.error != ErrorKind::None) continue;
    const RequestFigures f = figures_of(r);
    if (which == "ttft" && f.ttft_s >= 0) v.push_back(f.ttft_s * 1e3);
    if (which == "tpot" && f.tpot_s >= 0) v.push_back(f.tpot_s * 1e3);
    if (which == "e2e") v.push_back(f.e2e_s * 1e3);
    if (which == "itl")
      for (double g : f.itl_s) v.push_back(g * 1e3);
  }
  return v;
}

struct MetricInfo {
  const char* key;
  const char* name;
};
const MetricInfo kMetrics[] = {{"ttft", "Time to first token"},
                               {"itl", "Inter-token latency"},
                               {"tpot", "Time per output token"},
                               {"e2e", "End-to-end latency"}};

std::string cdf_chart(const BenchReport& r, size_t point, const MetricInfo& m) {
  const bool itl = std::string(m.key) == "itl";
  SvgPlot plot(std::string(m.name) + " - CDF", itl ? "gap between tokens (ms)" : std::string(m.name) + " (ms)",
               itl ? "gaps at or below (%)" : "requests at or below (%)");
  plot.x_from_zero(false);
  plot.y_range(0, 100);
  for (size_t t = 0; t < r.targets.size(); ++t) {
    if (point >= r.targets[t].runs.size()) continue;
    std::vector<double> v = figure_ms(r.targets[t].runs[point], m.key);
    std::sort(v.begin(), v.end());
    PlotSeries s;
    s.name = legend_name(r, t);
    s.color = color_of(t);
    // A step per value; thinned to at most ~400 steps so big runs stay light.
    const size_t stride = std::max<size_t>(1, v.size() / 400);
    for (size_t i = 0; i < v.size(); i += stride) {
      s.xy.push_back({v[i], 100.0 * i / v.size()});
      s.xy.push_back({v[i], 100.0 * std::min(v.size(), i + stride) / v.size()});
    }
    if (!v.empty()) s.xy.push_back({v.back(), 100.0});
    plot.add(std::move(s));
  }
  return plot.render();
}

std::string histogram_chart(const BenchReport& r, size_t point, const MetricInfo& m) {
  const bool itl = std::string(m.key) == "itl";
  SvgPlot plot(std::string(m.name) + " - histogram", itl ? "gap between tokens (ms)" : std::string(m.name) + " (ms)",
               itl ? "gaps" : "requests");
  plot.x_from_zero(false);
  std::vector<std::vector<double>> data;
  double lo = INFINITY, hi = -INFINITY;
  for (size_t t = 0; t < r.targets.size(); ++t) {
    data.push_back(point < r.targets[t].runs.size() ? figure_ms(r.targets[t].runs[point], m.key) : std::vector<double>{});
    for (double x : data.back()) lo = std::min(lo, x), hi = std::max(hi, x);
  }
  if (lo <= hi) {
    // Bins on nice boundaries shared by both targets, about 30 of them.
    const double w = nice_step(std::max(hi - lo, 1e-3), 30);
    const double start = std::floor(lo / w) * w;
    const size_t n = static_cast<size_t>(std::floor((hi - start) / w)) + 1;
    for (size_t t = 0; t < data.size(); ++t) {
      std::vector<double> counts(n, 0);
      for (double x : data[t]) counts[std::min(n - 1, static_cast<size_t>((x - start) / w))] += 1;
      PlotSeries s;
      s.kind = PlotSeries::Kind::Bars;
      s.name = legend_name(r, t);
      s.color = color_of(t);
      s.bar_width = w;
      for (size_t i = 0; i < n; ++i) s.xy.push_back({start + i * w, counts[i]});
      plot.add(std::move(s));
    }
  }
  return plot.render();
}

std::string over_time_chart(const BenchReport& r, size_t point, bool tokens) {
  SvgPlot plot(tokens ? "Output tokens/s over time" : "Requests in flight over time", "time since the start (s)",
               tokens ? "output tokens/s" : "requests in flight");
  for (size_t t = 0; t < r.targets.size(); ++t) {
    if (point >= r.targets[t].runs.size()) continue;
    const TimeSeries ts = time_series(r.targets[t].runs[point]);
    const auto& v = tokens ? ts.tokens_per_s : ts.in_flight;
    PlotSeries s;
    s.name = legend_name(r, t) + (legend_name(r, t).empty() ? "" : " ") + fmt("(bins of %g s)", ts.bin_s);
    s.color = color_of(t);
    for (size_t i = 0; i < v.size(); ++i) {  // a step line: flat across each bin
      s.xy.push_back({i * ts.bin_s, v[i]});
      s.xy.push_back({(i + 1) * ts.bin_s, v[i]});
    }
    plot.add(std::move(s));
  }
  return plot.render();
}

// Sweep: output tokens/s (x) against a latency figure (y, ms), one curve per target and
// percentile, each point labelled with its load.
std::string sweep_chart(const BenchReport& r, const char* name, Distribution Summary::*field) {
  SvgPlot plot(std::string("Throughput vs ") + name, "output throughput (tokens/s)", std::string(name) + " (ms)");
  for (size_t t = 0; t < r.targets.size(); ++t) {
    for (bool p99 : {false, true}) {
      PlotSeries s;
      s.name = (r.targets.size() > 1 ? tag(r, t) + " " : "") + (p99 ? "p99" : "p50");
      s.color = color_of(t);
      s.markers = true;
      s.dashed = p99;
      for (const auto& p : r.targets[t].points) {
        s.xy.push_back({p.output_throughput, ((p.*field).*(p99 ? &Distribution::p99 : &Distribution::p50)) * 1e3});
        s.point_labels.push_back(p99 ? "" : load_label(p));
      }
      plot.add(std::move(s));
    }
  }
  return plot.render();
}

std::string goodput_chart(const BenchReport& r) {
  const bool rate = r.sweep_key == "rate";
  SvgPlot plot("Goodput under the SLO", rate ? "offered load (requests/s)" : "concurrent users", "output tokens/s");
  for (size_t t = 0; t < r.targets.size(); ++t) {
    PlotSeries all, good;
    all.name = (r.targets.size() > 1 ? tag(r, t) + " " : "") + "all output";
    good.name = (r.targets.size() > 1 ? tag(r, t) + " " : "") + "within the SLO";
    all.color = good.color = color_of(t);
    all.dashed = true;
    all.markers = good.markers = true;
    const auto& tr = r.targets[t];
    for (size_t i = 0; i < tr.points.size() && i < tr.goodput.size(); ++i) {
      const double x = rate ? tr.points[i].rate : tr.points[i].users;
      all.xy.push_back({x, tr.points[i].output_throughput});
      good.xy.push_back({x, tr.goodput[i].tokens_per_s});
    }
    plot.add(std::move(all));
    plot.add(std::move(good));
  }
  return plot.render();
}

std::string ratio_cell(double b, double a) { return a > 0 ? fmt("%.2fx", b / a) : "-"; }

std::string summary_table(const BenchReport& r) {
  std::ostringstream o;
  const bool slo = !r.slo.empty(), two = r.targets.size() > 1;
  o << "<table class='summary'><tr>" << (two ? "<th>server</th>" : "")
    << "<th>load</th><th>ok</th><th>failed</th><th>req/s</th><th>output tok/s</th><th>TTFT p50 ms</th>"
       "<th>TTFT p99 ms</th><th>ITL p50 ms</th><th>ITL p99 ms</th><th>TPOT p50 ms</th><th>E2E p50 ms</th>"
       "<th>E2E p99 ms</th>"
    << (slo ? "<th>met SLO</th><th>goodput tok/s</th>" : "") << "</tr>";
  const size_t npoints = r.targets[0].points.size();
  for (size_t i = 0; i < npoints; ++i) {
    for (size_t t = 0; t < r.targets.size(); ++t) {
      const TargetReport& tr = r.targets[t];
      if (i >= tr.points.size()) continue;
      const Summary& s = tr.points[i];
      o << "<tr" << (t > 0 ? "" : " class='first'") << ">";
      if (two) o << "<td class='tag' style='color:" << color_of(t) << "'>" << tag(r, t) << "</td>";
      o << "<td>" << load_label(s) << "</td><td>" << s.succeeded << "</td><td>" << s.failed << "</td><td>"
        << fmt("%.2f", s.request_throughput) << "</td><td>" << fmt("%.1f", s.output_throughput) << "</td><td>"
        << ms(s.ttft_s.p50) << "</td><td>" << ms(s.ttft_s.p99) << "</td><td>" << ms(s.itl_s.p50) << "</td><td>"
        << ms(s.itl_s.p99) << "</td><td>" << ms(s.tpot_s.p50) << "</td><td>" << ms(s.e2e_s.p50) << "</td><td>"
        << ms(s.e2e_s.p99) << "</td>";
      if (slo && i < tr.goodput.size())
        o << "<td>" << fmt("%.1f%%", 100 * tr.goodput[i].share) << (tr.goodput[i].point_met ? " &#10003;" : " &#10007;")
          << "</td><td>" << fmt("%.1f", tr.goodput[i].tokens_per_s) << "</td>";
      o << "</tr>";
      if (t > 0 && i < r.targets[0].points.size()) {
        const Summary& a = r.targets[0].points[i];
        o << "<tr class='ratio'><td>B/A</td><td></td><td></td><td></td><td>"
          << ratio_cell(s.request_throughput, a.request_throughput) << "</td><td>"
          << ratio_cell(s.output_throughput, a.output_throughput) << "</td><td>" << ratio_cell(s.ttft_s.p50, a.ttft_s.p50)
          << "</td><td>" << ratio_cell(s.ttft_s.p99, a.ttft_s.p99) << "</td><td>" << ratio_cell(s.itl_s.p50, a.itl_s.p50)
          << "</td><td>" << ratio_cell(s.itl_s.p99, a.itl_s.p99) << "</td><td>" << ratio_cell(s.tpot_s.p50, a.tpot_s.p50)
          << "</td><td>" << ratio_cell(s.e2e_s.p50, a.e2e_s.p50) << "</td><td>" << ratio_cell(s.e2e_s.p99, a.e2e_s.p99)
          << "</td>";
        if (slo && i < tr.goodput.size() && i < r.targets[0].goodput.size())
          o << "<td></td><td>" << ratio_cell(tr.goodput[i].tokens_per_s, r.targets[0].goodput[i].tokens_per_s) << "</td>";
        o << "</tr>";
      }
    }
  }
  o << "</table><p class='note'>Latencies in milliseconds; p50/p99 over the successful requests of each load"
    << " point (ITL: over every gap between streamed chunks)."
    << (two ? " B/A: server B's figure divided by server A's (throughput: higher is better for B; latency: lower)." : "")
    << "</p>";
  return o.str();
}

// A value of the metadata as text: strings as they are, the rest as compact JSON.
std::string meta_text(const nlohmann::json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

std::string metadata_table(const BenchReport& r) {
  std::ostringstream o;
  o << "<table class='meta'>";
  auto row = [&](const std::string& k, const std::string& v, bool code = false) {
    o << "<tr><th>" << html_escape(k) << "</th><td>" << (code ? "<code>" : "") << html_escape(v) << (code ? "</code>" : "")
      << "</td></tr>";
  };
  for (const auto& [k, v] : r.meta.items()) row(k, meta_text(v), k == "command line");
  for (size_t t = 0; t < r.targets.size(); ++t) {
    const TargetReport& tr = r.targets[t];
    const std::string p = r.targets.size() > 1 ? "server " + tag(r, t) + ": " : "server: ";
    row(p + "URL", tr.url);
    row(p + "model", tr.model);
    for (const auto& [k, v] : tr.server.items()) row(p + k, meta_text(v), !v.is_string());
  }
  o << "</table>";
  return o.str();
}

const char* kStyle =
    "body{font-family:sans-serif;margin:24px;color:#222;max-width:1240px}"
    "h1{font-size:22px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ddd}"
    "table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;padding:3px 6px;text-align:right;white-space:nowrap;font-size:13px}th{white-space:normal}"
    "th{background:#f2f2f2}tr.ratio td{color:#555;font-style:italic;background:#fafafa}"
    "table.meta th,table.meta td{text-align:left;vertical-align:top;white-space:normal}table.meta th{white-space:nowrap}table.meta code{white-space:pre-wrap;"
    "word-break:break-all}td.tag{font-weight:bold;text-align:center}"
    ".charts{display:flex;flex-wrap:wrap;gap:8px}figure{margin:4px}figcaption{font-weight:bold;font-size:13px;"
    "margin-bottom:2px}.note{font-size:12px;color:#555}.nodata{color:#888;width:540px}"
    "pre{background:#f4f4f4;padding:8px;font-size:11px;overflow:auto}@media print{h2{break-before:auto}"
    "figure{break-inside:avoid}}";

}  // namespace

std::string render_html(const BenchReport& r) {
  std::ostringstream o;
  std::string title = "pagoda bench: ";
  for (size_t t = 0; t < r.targets.size(); ++t)
    title += (t ? " vs " : "") + r.targets[t].model + " at " + r.targets[t].url;
  o << "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>" << html_escape(title)
    << "</title><style>" << kStyle << "</style></head><body><h1>" << html_escape(title) << "</h1>";
  if (r.meta.contains("date")) o << "<p class='note'>" << html_escape(meta_text(r.meta["date"])) << "</p>";
  if (r.targets.size() > 1) {
    o << "<p>";
    for (size_t t = 0; t < r.targets.size(); ++t)
      o << "<b style='color:" << color_of(t) << "'>" << tag(r, t) << "</b>: " << html_escape(r.targets[t].url) << " ("
        << html_escape(r.targets[t].model) << ")" << (t + 1 < r.targets.size() ? "; " : "");
    o << ". The load points ran alternately on A and B, with the same requests.</p>";
  }
  o << "<h2 id='summary'>Summary</h2>" << summary_table(r);
  if (!r.slo.empty()) {
    o << "<h2>Goodput</h2><p>Objectives: ";
    for (size_t i = 0; i < r.slo.size(); ++i) o << (i ? ", " : "") << html_escape(describe(r.slo[i]));
    o << ". A load point meets the SLO when every objective's percentile over the point is within its limit; "
         "goodput counts the requests (and their output tokens/s) whose own figures are within every limit.</p><ul>";
    for (size_t t = 0; t < r.targets.size(); ++t) {
      const int best = highest_load_meeting_slo(r.targets[t]);
      o << "<li>" << (r.targets.size() > 1 ? tag(r, t) + ": " : "") << "highest load meeting the SLO: <b>"
        << (best < 0 ? std::string("none of the points") : load_label(r.targets[t].points[best])) << "</b></li>";
    }
    o << "</ul>";
    if (r.targets[0].points.size() > 1) o << "<div class='charts'>" << goodput_chart(r) << "</div>";
  }
  if (r.targets[0].points.size() > 1)
    o << "<h2 id='sweep'>Sweep</h2><div class='charts'>" << sweep_chart(r, "TTFT", &Summary::ttft_s)
      << sweep_chart(r, "TPOT", &Summary::tpot_s) << sweep_chart(r, "ITL", &Summary::itl_s)
      << sweep_chart(r, "end-to-end latency", &Summary::e2e_s) << "</div>";
  for (size_t i = 0; i < r.targets[0].points.size(); ++i) {
    o << "<h2>" << load_label(r.targets[0].points[i]) << "</h2><div class='charts'>" << over_time_chart(r, i, true)
      << over_time_chart(r, i, false);
    for (const auto& m : kMetrics) o << cdf_chart(r, i, m) << histogram_chart(r, i, m);
    o << "</div>";
  }
  // The summaries as JSON; the raw per-request timings stay in --json's file, where
  // `pagoda bench report` reads them.
  o << "<h2 id='run'>Run</h2>" << metadata_table(r) << "<details><summary>The report's summaries as JSON</summary><pre>"
    << html_escape(report_to_json(r, false).dump(2)) << "</pre></details></body></html>\n";
  return o.str();
}

}  // namespace pagoda::bench
