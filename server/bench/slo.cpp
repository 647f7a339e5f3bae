#include "server/bench/slo.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>

#include "server/bench/report.h"

namespace pagoda::bench {

const char* slo_metric_name(SloMetric m) {
  switch (m) {
    case SloMetric::Ttft: return "TTFT";
    case SloMetric::Itl: return "ITL";
    case SloMetric::Tpot: return "TPOT";
    case SloMetric::E2e: return "E2E";
  }
  return "?";
}

namespace {

double parse_duration(const std::string& item, const std::string& v) {
  size_t pos = 0;
  double d = 0;
  try {
    d = std::stod(v, &pos);
  } catch (const std::exception&) {
    throw std::invalid_argument("--slo: '" + item + "': the limit must be a number with a unit (500ms, 0.5s)");
  }
  const std::string unit = v.substr(pos);
  double scale = 0;
  if (unit == "ms") scale = 1e-3;
  else if (unit == "s") scale = 1;
  else if (unit == "us") scale = 1e-6;
  else if (unit.empty()) throw std::invalid_argument("--slo: '" + item + "' needs a unit: ms, s or us (500ms)");
  else throw std::invalid_argument("--slo: '" + item + "': unknown unit '" + unit + "' (use ms, s or us)");
  if (!(d > 0) || !std::isfinite(d)) throw std::invalid_argument("--slo: '" + item + "': the limit must be positive");
  return d * scale;
}

SloObjective parse_item(const std::string& item) {
  const size_t eq = item.find('=');
  if (eq == std::string::npos)
    throw std::invalid_argument("--slo: '" + item + "' is not METRIC[:pNN]=LIMIT (e.g. ttft:p90=500ms)");
  std::string key = item.substr(0, eq);
  SloObjective o;
  const size_t colon = key.find(':');
  if (colon != std::string::npos) {
    const std::string p = key.substr(colon + 1);
    key = key.substr(0, colon);
    size_t pos = 0;
    double v = -1;
    if (p.size() > 1 && p[0] == 'p') {
      try {
        v = std::stod(p.substr(1), &pos);
      } catch (const std::exception&) {
        pos = 0;
      }
    }
    if (pos == 0 || pos != p.size() - 1 || !(v > 0 && v <= 100))
      throw std::invalid_argument("--slo: '" + item + "': the percentile must be p followed by 1-100 (p50, p99, p99.9)");
    o.percentile = v;
  }
  if (key == "ttft") o.metric = SloMetric::Ttft;
  else if (key == "itl") o.metric = SloMetric::Itl;
  else if (key == "tpot") o.metric = SloMetric::Tpot;
  else if (key == "e2e") o.metric = SloMetric::E2e;
  else throw std::invalid_argument("--slo: unknown metric '" + key + "' (use ttft, itl, tpot or e2e)");
  o.limit_s = parse_duration(item, item.substr(eq + 1));
  return o;
}

}  // namespace

std::vector<SloObjective> parse_slo(const std::string& spec) {
  std::vector<SloObjective> out;
  for (size_t start = 0; start <= spec.size();) {
    size_t end = spec.find(',', start);
    if (end == std::string::npos) end = spec.size();
    const std::string item = spec.substr(start, end - start);
    if (item.empty()) throw std::invalid_argument("--slo: empty objective in '" + spec + "'");
    out.push_back(parse_item(item));
    start = end + 1;
  }
  return out;
}

std::string describe(const SloObjective& o) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%s p%g <= %g ms", slo_metric_name(o.metric), o.percentile, o.limit_s * 1e3);
  return buf;
}

Goodput evaluate_slo(const std::vector<SloObjective>& slo, const RunResult& run) {
  Goodput g;
  std::vector<std::vector<double>> all(slo.size());
  long tokens_met = 0;
  for (const auto& r : run.requests) {
    ++g.requests;
    if (r.error != ErrorKind::None) {  // a failed request misses every limit
      for (auto& v : all) v.push_back(std::numeric_limits<double>::infinity());
      continue;
    }
    const RequestFigures f = figures_of(r);
    bool met = true;
    for (size_t i = 0; i < slo.size(); ++i) {
      const SloObjective& o = slo[i];
      double v = -1;
      switch (o.metric) {
        case SloMetric::Ttft: v = f.ttft_s; break;
        case SloMetric::Tpot: v = f.tpot_s; break;
        case SloMetric::E2e: v = f.e2e_s; break;
        case SloMetric::Itl:
          all[i].insert(all[i].end(), f.itl_s.begin(), f.itl_s.end());
          v = f.itl_s.empty() ? 0 : percentile(f.itl_s, o.percentile / 100);
          break;
      }
      if (o.metric != SloMetric::Itl && v >= 0) all[i].push_back(v);
      // A request without the figure (one token: no TPOT) is not held to that objective, except
      // TTFT, which every streamed reply has.
      if (v < 0 && o.metric == SloMetric::Ttft) met = false;
      if (v > o.limit_s) met = false;
    }
    if (met) {
      ++g.requests_met;
      tokens_met += r.completion_tokens;
    }
  }
  g.share = g.requests > 0 ? double(g.requests_met) / g.requests : 0;
  g.tokens_per_s = run.wall_s > 0 ? tokens_met / run.wall_s : 0;
  g.point_met = g.requests > 0;
  for (size_t i = 0; i < slo.size(); ++i) {
    const double v = all[i].empty() ? -1 : percentile(all[i], slo[i].percentile / 100);
    g.observed_s.push_back(v);
    if (v < 0 || v > slo[i].limit_s) g.point_met = false;
  }
  return g;
}

}  // namespace pagoda::bench
