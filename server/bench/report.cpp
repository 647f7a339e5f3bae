#include "server/bench/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace pagoda::bench {

Distribution distribution_of(std::vector<double> v) {
  Distribution d;
  d.count = static_cast<int>(v.size());
  if (v.empty()) return d;
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  d.mean = sum / v.size();
  auto pct = [&](double p) {
    const double pos = p * (v.size() - 1);
    const size_t lo = static_cast<size_t>(std::floor(pos));
    const size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (pos - lo);
  };
  d.p50 = pct(0.50);
  d.p90 = pct(0.90);
  d.p99 = pct(0.99);
  d.max = v.back();
  return d;
}

Summary summarize(const RunResult& run) {
  Summary s;
  s.users = run.users;
  s.rate = run.rate;
  s.wall_s = run.wall_s;
  std::vector<double> ttft, itl, tpot, e2e;
  for (const auto& r : run.requests) {
    ++s.requests;
    if (r.error != ErrorKind::None) {
      ++s.failed;
      ++s.errors_by_kind[error_kind_name(r.error)];
      continue;
    }
    ++s.succeeded;
    s.prompt_tokens += r.prompt_tokens;
    s.completion_tokens += r.completion_tokens;
    e2e.push_back(r.e2e_s);
    if (r.ttft_s >= 0) ttft.push_back(r.ttft_s);
    for (size_t i = 1; i < r.chunk_times_s.size(); ++i)
      itl.push_back(r.chunk_times_s[i] - r.chunk_times_s[i - 1]);
    if (r.completion_tokens > 1 && r.ttft_s >= 0)
      tpot.push_back((r.e2e_s - r.ttft_s) / (r.completion_tokens - 1));
  }
  if (s.wall_s > 0) {
    s.request_throughput = s.succeeded / s.wall_s;
    s.output_throughput = s.completion_tokens / s.wall_s;
  }
  s.ttft_s = distribution_of(ttft);
  s.itl_s = distribution_of(itl);
  s.tpot_s = distribution_of(tpot);
  s.e2e_s = distribution_of(e2e);
  return s;
}

namespace {

nlohmann::json dist_json(const Distribution& d) {
  return {{"count", d.count}, {"mean", d.mean}, {"p50", d.p50}, {"p90", d.p90}, {"p99", d.p99}, {"max", d.max}};
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string ms(double s) { return fmt("%.1f", s * 1000.0); }

std::string html_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '&': o += "&amp;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

// A histogram of `values` (seconds, shown in ms) as an inline SVG.
std::string svg_histogram(const std::vector<double>& values, const std::string& title) {
  const int W = 460, H = 220, L = 50, B = 30, bins = 30;
  std::ostringstream o;
  o << "<figure><figcaption>" << html_escape(title) << "</figcaption><svg width='" << W
    << "' height='" << H << "' viewBox='0 0 " << W << ' ' << H << "'>";
  if (values.empty()) {
    o << "<text x='20' y='40'>no data</text></svg></figure>";
    return o.str();
  }
  const double lo = *std::min_element(values.begin(), values.end());
  double hi = *std::max_element(values.begin(), values.end());
  if (hi <= lo) hi = lo + 1e-6;
  std::vector<int> counts(bins, 0);
  for (double v : values) counts[std::min(bins - 1, static_cast<int>((v - lo) / (hi - lo) * bins))]++;
  const int cmax = *std::max_element(counts.begin(), counts.end());
  const double bw = double(W - L - 10) / bins;
  for (int i = 0; i < bins; ++i) {
    const double h = double(H - B - 10) * counts[i] / cmax;
    o << "<rect x='" << L + i * bw << "' y='" << H - B - h << "' width='" << bw - 1 << "' height='" << h
      << "' fill='#3b7dd8'><title>" << counts[i] << "</title></rect>";
  }
  o << "<line x1='" << L << "' y1='" << H - B << "' x2='" << W - 10 << "' y2='" << H - B << "' stroke='#333'/>"
    << "<text x='" << L << "' y='" << H - 10 << "' font-size='11'>" << ms(lo) << " ms</text>"
    << "<text x='" << W - 10 << "' y='" << H - 10 << "' font-size='11' text-anchor='end'>" << ms(hi)
    << " ms</text><text x='4' y='16' font-size='11'>" << cmax << "</text></svg></figure>";
  return o.str();
}

// Output tokens per second over the run, in one-second buckets, as a polyline.
std::string svg_throughput(const RunResult& run) {
  const int W = 460, H = 220, L = 50, B = 30;
  const int secs = std::max(1, static_cast<int>(std::ceil(run.wall_s)));
  std::vector<double> tok(secs, 0);
  for (const auto& r : run.requests) {
    if (r.error != ErrorKind::None) continue;
    // Spread the request's tokens over its chunk arrivals.
    const double per_chunk = r.chunk_times_s.empty() ? 0 : double(r.completion_tokens) / r.chunk_times_s.size();
    for (double t : r.chunk_times_s) {
      const int b = std::min(secs - 1, static_cast<int>(r.start_s + t));
      tok[b] += per_chunk;
    }
  }
  const double ymax = std::max(1.0, *std::max_element(tok.begin(), tok.end()));
  std::ostringstream o;
  o << "<figure><figcaption>output tokens/s over time</figcaption><svg width='" << W << "' height='" << H
    << "' viewBox='0 0 " << W << ' ' << H << "'><polyline fill='none' stroke='#d83b3b' stroke-width='2' points='";
  for (int i = 0; i < secs; ++i)
    o << L + (W - L - 10) * (secs == 1 ? 0.5 : double(i) / (secs - 1)) << ',' << H - B - (H - B - 10) * tok[i] / ymax << ' ';
  o << "'/><line x1='" << L << "' y1='" << H - B << "' x2='" << W - 10 << "' y2='" << H - B
    << "' stroke='#333'/><text x='4' y='16' font-size='11'>" << fmt("%.0f", ymax)
    << "</text><text x='" << W - 10 << "' y='" << H - 10 << "' font-size='11' text-anchor='end'>" << secs
    << " s</text></svg></figure>";
  return o.str();
}

// Sweep: output throughput (x) against p50 TPOT and p50 TTFT (y), one point per run.
std::string svg_sweep(const std::vector<Summary>& pts) {
  const int W = 460, H = 220, L = 50, B = 30;
  double xmax = 1, ymax = 1e-3;
  for (const auto& p : pts) {
    xmax = std::max(xmax, p.output_throughput);
    ymax = std::max({ymax, p.ttft_s.p50, p.tpot_s.p50});
  }
  std::ostringstream o;
  o << "<figure><figcaption>throughput vs latency (blue: TTFT p50, red: TPOT p50)</figcaption><svg width='" << W
    << "' height='" << H << "' viewBox='0 0 " << W << ' ' << H << "'>";
  auto px = [&](const Summary& p) { return L + (W - L - 20) * p.output_throughput / xmax; };
  auto py = [&](double v) { return H - B - (H - B - 10) * v / ymax; };
  // Lines join the points in sweep order; each TTFT point is labelled with its load.
  for (auto [color, field] : {std::pair{"#3b7dd8", &Summary::ttft_s}, std::pair{"#d83b3b", &Summary::tpot_s}}) {
    o << "<polyline fill='none' stroke='" << color << "' stroke-opacity='0.5' points='";
    for (const auto& p : pts) o << px(p) << ',' << py((p.*field).p50) << ' ';
    o << "'/>";
    for (const auto& p : pts)
      o << "<circle cx='" << px(p) << "' cy='" << py((p.*field).p50) << "' r='4' fill='" << color << "'/>";
  }
  for (const auto& p : pts) {
    const bool right_half = px(p) > W / 2;  // keep labels inside the plot
    o << "<text x='" << px(p) + (right_half ? -6 : 6) << "' y='" << std::max(12.0, py(p.ttft_s.p50) - 6)
      << "' font-size='11' text-anchor='" << (right_half ? "end" : "start") << "'>"
      << (p.rate > 0 ? fmt("%.2g/s", p.rate) : std::to_string(p.users) + (p.users == 1 ? " user" : " users"))
      << "</text>";
  }
  o << "<line x1='" << L << "' y1='" << H - B << "' x2='" << W - 10 << "' y2='" << H - B << "' stroke='#333'/>"
    << "<text x='4' y='16' font-size='11'>" << ms(ymax) << " ms</text><text x='4' y='" << H - B
    << "' font-size='11'>0</text><text x='" << W - 10 << "' y='" << H - 10
    << "' font-size='11' text-anchor='end'>" << fmt("%.0f", xmax) << " output tok/s</text></svg></figure>";
  return o.str();
}

}  // namespace

nlohmann::json summary_to_json(const Summary& s) {
  nlohmann::json errors = nlohmann::json::object();
  for (const auto& [k, v] : s.errors_by_kind) errors[k] = v;
  return {{"users", s.users},
          {"rate", s.rate},
          {"requests", s.requests},
          {"succeeded", s.succeeded},
          {"failed", s.failed},
          {"errors", errors},
          {"wall_s", s.wall_s},
          {"prompt_tokens", s.prompt_tokens},
          {"completion_tokens", s.completion_tokens},
          {"request_throughput", s.request_throughput},
          {"output_throughput", s.output_throughput},
          {"ttft_s", dist_json(s.ttft_s)},
          {"itl_s", dist_json(s.itl_s)},
          {"tpot_s", dist_json(s.tpot_s)},
          {"e2e_s", dist_json(s.e2e_s)}};
}

std::string format_table(const std::vector<Summary>& pts, const std::string& sweep_key) {
  std::ostringstream o;
  char line[512];
  std::snprintf(line, sizeof line, "%-8s %6s %6s %8s %9s %9s %9s %9s %9s %9s %9s\n",
                sweep_key.empty() ? "load" : sweep_key.c_str(), "ok", "fail", "req/s", "out tok/s",
                "TTFT p50", "TTFT p99", "ITL p50", "ITL p99", "TPOT p50", "E2E p50");
  o << line;
  for (const auto& s : pts) {
    const std::string load = s.rate > 0 ? fmt("%.2f/s", s.rate) : std::to_string(s.users) + "u";
    std::snprintf(line, sizeof line, "%-8s %6d %6d %8.2f %9.1f %9s %9s %9s %9s %9s %9s\n", load.c_str(),
                  s.succeeded, s.failed, s.request_throughput, s.output_throughput, ms(s.ttft_s.p50).c_str(),
                  ms(s.ttft_s.p99).c_str(), ms(s.itl_s.p50).c_str(), ms(s.itl_s.p99).c_str(),
                  ms(s.tpot_s.p50).c_str(), ms(s.e2e_s.p50).c_str());
    o << line;
  }
  o << "(latencies in ms)\n";
  for (const auto& s : pts)
    for (const auto& [k, v] : s.errors_by_kind) o << "errors " << k << ": " << v << "\n";
  return o.str();
}

std::string render_html(const std::vector<Summary>& pts, const std::vector<RunResult>& runs,
                        const std::string& title) {
  std::ostringstream o;
  o << "<!DOCTYPE html><html><head><meta charset='utf-8'><title>" << html_escape(title)
    << "</title><style>body{font-family:sans-serif;margin:24px;color:#222}table{border-collapse:collapse}"
       "td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}figure{display:inline-block;margin:8px}"
       "figcaption{font-weight:bold;font-size:13px}pre{background:#f4f4f4;padding:8px}</style></head><body><h1>"
    << html_escape(title) << "</h1><table><tr><th>load</th><th>ok</th><th>failed</th><th>req/s</th><th>out tok/s</th>"
    << "<th>TTFT p50 ms</th><th>TTFT p99 ms</th><th>ITL p50 ms</th><th>ITL p99 ms</th><th>TPOT p50 ms</th>"
    << "<th>E2E p50 ms</th><th>E2E p99 ms</th></tr>";
  for (const auto& s : pts) {
    o << "<tr><td>" << (s.rate > 0 ? fmt("%.2f req/s", s.rate) : std::to_string(s.users) + " users") << "</td><td>"
      << s.succeeded << "</td><td>" << s.failed << "</td><td>" << fmt("%.2f", s.request_throughput) << "</td><td>"
      << fmt("%.1f", s.output_throughput) << "</td><td>" << ms(s.ttft_s.p50) << "</td><td>" << ms(s.ttft_s.p99)
      << "</td><td>" << ms(s.itl_s.p50) << "</td><td>" << ms(s.itl_s.p99) << "</td><td>" << ms(s.tpot_s.p50)
      << "</td><td>" << ms(s.e2e_s.p50) << "</td><td>" << ms(s.e2e_s.p99) << "</td></tr>";
  }
  o << "</table>";
  if (pts.size() > 1) o << "<h2>Sweep</h2>" << svg_sweep(pts);
  for (size_t i = 0; i < runs.size(); ++i) {
    const auto& run = runs[i];
    std::vector<double> ttft, itl, e2e;
    for (const auto& r : run.requests) {
      if (r.error != ErrorKind::None) continue;
      if (r.ttft_s >= 0) ttft.push_back(r.ttft_s);
      e2e.push_back(r.e2e_s);
      for (size_t k = 1; k < r.chunk_times_s.size(); ++k) itl.push_back(r.chunk_times_s[k] - r.chunk_times_s[k - 1]);
    }
    const auto& s = pts[i];
    o << "<h2>" << (s.rate > 0 ? fmt("%.2f req/s", s.rate) : std::to_string(s.users) + " users") << "</h2>"
      << svg_histogram(ttft, "time to first token") << svg_histogram(itl, "inter-token latency")
      << svg_histogram(e2e, "end-to-end latency") << svg_throughput(run);
  }
  o << "<h2>Raw summary</h2><pre>";
  nlohmann::json all = nlohmann::json::array();
  for (const auto& s : pts) all.push_back(summary_to_json(s));
  o << html_escape(all.dump(2)) << "</pre></body></html>\n";
  return o.str();
}

}  // namespace pagoda::bench
