#include "server/bench/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "server/bench/report_json.h"
#include "server/bench/svg_plot.h"

namespace pagoda::bench {

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = std::clamp(q, 0.0, 1.0) * (v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  const double frac = pos - lo;
  if (frac <= 0 || std::isinf(v[hi])) return frac <= 0 ? v[lo] : v[hi];
  return v[lo] + (v[hi] - v[lo]) * frac;
}

RequestFigures figures_of(const RequestResult& r) {
  RequestFigures f;
  f.ttft_s = r.ttft_s;
  f.e2e_s = r.e2e_s;
  for (size_t i = 1; i < r.chunk_times_s.size(); ++i) f.itl_s.push_back(r.chunk_times_s[i] - r.chunk_times_s[i - 1]);
  if (r.completion_tokens > 1 && r.ttft_s >= 0) f.tpot_s = (r.e2e_s - r.ttft_s) / (r.completion_tokens - 1);
  return f;
}

Distribution distribution_of(std::vector<double> v) {
  Distribution d;
  d.count = static_cast<int>(v.size());
  if (v.empty()) return d;
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  d.mean = sum / v.size();
  d.p50 = percentile(v, 0.50);
  d.p90 = percentile(v, 0.90);
  d.p99 = percentile(v, 0.99);
  d.max = v.back();
  return d;
}

TimeSeries time_series(const RunResult& run) {
  TimeSeries ts;
  double end = run.wall_s;
  for (const auto& r : run.requests) end = std::max(end, r.start_s + r.e2e_s);
  if (!(end > 0)) return ts;
  ts.bin_s = nice_step(end, 40);
  const size_t n = std::max<size_t>(1, static_cast<size_t>(std::ceil(end / ts.bin_s - 1e-9)));
  ts.tokens_per_s.assign(n, 0);
  ts.in_flight.assign(n, 0);
  auto bin_of = [&](double t) { return std::min(n - 1, static_cast<size_t>(std::max(0.0, t / ts.bin_s))); };
  for (const auto& r : run.requests) {
    // In flight from its start to its end (failed requests too: they held a slot).
    const double a = r.start_s, b = r.start_s + r.e2e_s;
    for (size_t i = bin_of(a); i < n && i * ts.bin_s < b; ++i) {
      const double lo = std::max(a, i * ts.bin_s), hi = std::min(b, (i + 1) * ts.bin_s);
      if (hi > lo) ts.in_flight[i] += hi - lo;
    }
    if (r.error != ErrorKind::None || r.chunk_times_s.empty()) continue;
    // The request's tokens spread over its chunk arrivals (a chunk may carry several).
    const double per_chunk = double(r.completion_tokens) / r.chunk_times_s.size();
    for (double t : r.chunk_times_s) ts.tokens_per_s[bin_of(r.start_s + t)] += per_chunk;
  }
  // Per second of each bin; the last one may be cut short by the run's end.
  for (size_t i = 0; i < n; ++i) {
    const double width = std::min(ts.bin_s, end - i * ts.bin_s);
    if (width <= 0) continue;
    ts.tokens_per_s[i] /= width;
    ts.in_flight[i] /= width;
  }
  return ts;
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
    const RequestFigures f = figures_of(r);
    e2e.push_back(f.e2e_s);
    if (f.ttft_s >= 0) ttft.push_back(f.ttft_s);
    itl.insert(itl.end(), f.itl_s.begin(), f.itl_s.end());
    if (f.tpot_s >= 0) tpot.push_back(f.tpot_s);
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

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string ms(double s) { return fmt("%.1f", s * 1000.0); }

nlohmann::json dist_json(const Distribution& d) {
  return {{"count", d.count}, {"mean", d.mean}, {"p50", d.p50}, {"p90", d.p90}, {"p99", d.p99}, {"max", d.max}};
}

nlohmann::json goodput_json(const std::vector<SloObjective>& slo, const Goodput& g) {
  nlohmann::json obs = nlohmann::json::array();
  for (size_t i = 0; i < slo.size() && i < g.observed_s.size(); ++i)
    obs.push_back({{"objective", describe(slo[i])}, {"observed_s", g.observed_s[i]}});
  return {{"requests_met", g.requests_met}, {"share", g.share}, {"tokens_per_s", g.tokens_per_s},
          {"point_met", g.point_met}, {"objectives", obs}};
}

nlohmann::json target_json(const BenchReport& r, const TargetReport& t, bool raw_timings) {
  nlohmann::json j = {{"url", t.url}, {"model", t.model}, {"server", t.server}, {"points", nlohmann::json::array()}};
  for (size_t i = 0; i < t.points.size(); ++i) {
    nlohmann::json p = summary_to_json(t.points[i]);
    if (i < t.goodput.size()) p["goodput"] = goodput_json(r.slo, t.goodput[i]);
    if (raw_timings && i < t.runs.size()) p["run"] = run_to_json(t.runs[i]);  // raw timings: `bench report` redraws from them
    j["points"].push_back(p);
  }
  if (!r.slo.empty()) {
    const int best = highest_load_meeting_slo(t);
    j["highest_load_meeting_slo"] = best < 0 ? nlohmann::json(nullptr) : nlohmann::json(load_label(t.points[best]));
  }
  return j;
}

}  // namespace

std::string load_label(const Summary& s) {
  if (s.rate > 0) return fmt("%g req/s", s.rate);
  return std::to_string(s.users) + (s.users == 1 ? " user" : " users");
}

int highest_load_meeting_slo(const TargetReport& t) {
  int best = -1;
  for (size_t i = 0; i < t.goodput.size() && i < t.points.size(); ++i) {
    if (!t.goodput[i].point_met) continue;
    const double load = t.points[i].rate > 0 ? t.points[i].rate : t.points[i].users;
    const double best_load = best < 0 ? -1 : (t.points[best].rate > 0 ? t.points[best].rate : t.points[best].users);
    if (load > best_load) best = static_cast<int>(i);
  }
  return best;
}

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

nlohmann::json report_to_json(const BenchReport& r, bool raw_timings) {
  // The first target's fields stay at the top level, as a single-server report has them; its
  // raw timings only once, under "targets" (where report_from_json reads them).
  nlohmann::json j = target_json(r, r.targets.at(0), false);
  j["meta"] = r.meta;
  nlohmann::json slo = nlohmann::json::array();
  for (const auto& o : r.slo) slo.push_back(describe(o));
  j["slo"] = slo;
  j["slo_objectives"] = slo_objectives_json(r.slo);
  j["sweep"] = r.sweep_key;
  j["targets"] = nlohmann::json::array();
  for (const auto& t : r.targets) j["targets"].push_back(target_json(r, t, raw_timings));
  return j;
}

std::string format_table(const BenchReport& r) {
  std::ostringstream o;
  char line[512];
  const bool slo = !r.slo.empty();
  for (size_t ti = 0; ti < r.targets.size(); ++ti) {
    const TargetReport& t = r.targets[ti];
    if (r.targets.size() > 1) o << (ti == 0 ? "A: " : "B: ") << t.url << " (" << t.model << ")\n";
    std::snprintf(line, sizeof line, "%-10s %6s %6s %8s %9s %9s %9s %9s %9s %9s %9s%s\n", "load", "ok", "fail",
                  "req/s", "out tok/s", "TTFT p50", "TTFT p99", "ITL p50", "ITL p99", "TPOT p50", "E2E p50",
                  slo ? "  SLO met  goodput tok/s" : "");
    o << line;
    for (size_t i = 0; i < t.points.size(); ++i) {
      const Summary& s = t.points[i];
      std::string tail;
      if (slo && i < t.goodput.size())
        tail = fmt("  %5.1f%% ", 100 * t.goodput[i].share) + (t.goodput[i].point_met ? "yes" : "no ") +
               fmt("  %9.1f", t.goodput[i].tokens_per_s);
      std::snprintf(line, sizeof line, "%-10s %6d %6d %8.2f %9.1f %9s %9s %9s %9s %9s %9s%s\n",
                    load_label(s).c_str(), s.succeeded, s.failed, s.request_throughput, s.output_throughput,
                    ms(s.ttft_s.p50).c_str(), ms(s.ttft_s.p99).c_str(), ms(s.itl_s.p50).c_str(),
                    ms(s.itl_s.p99).c_str(), ms(s.tpot_s.p50).c_str(), ms(s.e2e_s.p50).c_str(), tail.c_str());
      o << line;
      if (ti > 0 && i < r.targets[0].points.size()) {
        const Summary& a = r.targets[0].points[i];
        auto ratio = [](double b, double a) { return a > 0 ? fmt("%.2fx", b / a) : std::string("-"); };
        std::snprintf(line, sizeof line, "%-10s %6s %6s %8s %9s %9s %9s %9s %9s %9s %9s\n", "  B/A", "", "",
                      ratio(s.request_throughput, a.request_throughput).c_str(),
                      ratio(s.output_throughput, a.output_throughput).c_str(), ratio(s.ttft_s.p50, a.ttft_s.p50).c_str(),
                      ratio(s.ttft_s.p99, a.ttft_s.p99).c_str(), ratio(s.itl_s.p50, a.itl_s.p50).c_str(),
                      ratio(s.itl_s.p99, a.itl_s.p99).c_str(), ratio(s.tpot_s.p50, a.tpot_s.p50).c_str(),
                      ratio(s.e2e_s.p50, a.e2e_s.p50).c_str());
        o << line;
      }
    }
    o << "(latencies in ms)\n";
    if (slo) {
      std::string objectives;
      for (const auto& ob : r.slo) objectives += (objectives.empty() ? "" : ", ") + describe(ob);
      const int best = highest_load_meeting_slo(t);
      o << "SLO " << objectives << ": highest load meeting it: "
        << (best < 0 ? std::string("none") : load_label(t.points[best])) << "\n";
    }
    for (const auto& s : t.points)
      for (const auto& [k, v] : s.errors_by_kind) o << "errors " << k << " at " << load_label(s) << ": " << v << "\n";
  }
  return o.str();
}

}  // namespace pagoda::bench
