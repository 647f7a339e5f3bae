#include "server/bench/report_json.h"

#include <cctype>
#include <stdexcept>

namespace pagoda::bench {
namespace {

ErrorKind error_kind_from(const std::string& name) {
  for (ErrorKind k : {ErrorKind::None, ErrorKind::Connect, ErrorKind::Http4xx, ErrorKind::Http429, ErrorKind::Http5xx,
                      ErrorKind::Timeout, ErrorKind::Incomplete, ErrorKind::BadResponse})
    if (name == error_kind_name(k)) return k;
  throw std::invalid_argument("unknown error kind '" + name + "'");
}

// `j[key]` as T, or an error naming where it was expected.
template <typename T>
T field(const nlohmann::json& j, const char* key, const char* where) {
  if (!j.is_object() || !j.contains(key)) throw std::invalid_argument(std::string(where) + " has no '" + key + "'");
  try {
    return j.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    throw std::invalid_argument(std::string(where) + ": '" + key + "' has the wrong type");
  }
}

nlohmann::json slo_to_json(const SloObjective& o) {
  std::string name = slo_metric_name(o.metric);
  for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return {{"metric", name}, {"percentile", o.percentile}, {"limit_s", o.limit_s}};
}

SloObjective slo_from_json(const nlohmann::json& j) {
  const std::string metric = field<std::string>(j, "metric", "an SLO objective");
  char spec[128];
  std::snprintf(spec, sizeof spec, "%s:p%g=%.9gs", metric.c_str(), field<double>(j, "percentile", "an SLO objective"),
                field<double>(j, "limit_s", "an SLO objective"));
  return parse_slo(spec).at(0);  // the one parser checks the metric name and the bounds
}

}  // namespace

nlohmann::json run_to_json(const RunResult& run) {
  nlohmann::json reqs = nlohmann::json::array();
  for (const auto& r : run.requests) {
    nlohmann::json q = {{"start_s", r.start_s},         {"ttft_s", r.ttft_s},
                        {"e2e_s", r.e2e_s},             {"chunk_times_s", r.chunk_times_s},
                        {"prompt_tokens", r.prompt_tokens}, {"completion_tokens", r.completion_tokens},
                        {"error", error_kind_name(r.error)}};
    if (r.error != ErrorKind::None) {
      q["http_status"] = r.http_status;
      q["error_message"] = r.error_message;
    }
    reqs.push_back(std::move(q));
  }
  return {{"wall_s", run.wall_s}, {"users", run.users}, {"rate", run.rate}, {"requests", reqs}};
}

RunResult run_from_json(const nlohmann::json& j) {
  RunResult run;
  run.wall_s = field<double>(j, "wall_s", "a run");
  run.users = field<int>(j, "users", "a run");
  run.rate = field<double>(j, "rate", "a run");
  const auto reqs = field<nlohmann::json>(j, "requests", "a run");
  if (!reqs.is_array()) throw std::invalid_argument("a run's 'requests' is not a list");
  for (const auto& q : reqs) {
    RequestResult r;
    r.start_s = field<double>(q, "start_s", "a request");
    r.ttft_s = field<double>(q, "ttft_s", "a request");
    r.e2e_s = field<double>(q, "e2e_s", "a request");
    r.chunk_times_s = field<std::vector<double>>(q, "chunk_times_s", "a request");
    r.prompt_tokens = field<int>(q, "prompt_tokens", "a request");
    r.completion_tokens = field<int>(q, "completion_tokens", "a request");
    r.error = error_kind_from(field<std::string>(q, "error", "a request"));
    r.usage_reported = true;
    if (r.error != ErrorKind::None) {
      r.http_status = q.value("http_status", 0);
      r.error_message = q.value("error_message", "");
    }
    run.requests.push_back(std::move(r));
  }
  return run;
}

nlohmann::json slo_objectives_json(const std::vector<SloObjective>& slo) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& o : slo) a.push_back(slo_to_json(o));
  return a;
}

BenchReport report_from_json(const nlohmann::json& j, const std::vector<SloObjective>* slo) {
  if (!j.is_object() || !j.contains("targets")) throw std::invalid_argument("not a pagoda bench JSON report (no 'targets')");
  BenchReport r;
  r.sweep_key = j.value("sweep", "");
  r.meta = j.value("meta", nlohmann::json::object());
  if (slo) {
    r.slo = *slo;
  } else if (j.contains("slo_objectives")) {
    for (const auto& o : j.at("slo_objectives")) r.slo.push_back(slo_from_json(o));
  }
  for (const auto& tj : field<nlohmann::json>(j, "targets", "the report")) {
    TargetReport t;
    t.url = field<std::string>(tj, "url", "a target");
    t.model = field<std::string>(tj, "model", "a target");
    t.server = tj.value("server", nlohmann::json::object());
    for (const auto& pj : field<nlohmann::json>(tj, "points", "a target")) {
      if (!pj.contains("run"))
        throw std::invalid_argument("a point has no raw timings ('run'): the file was written by an older pagoda bench");
      t.runs.push_back(run_from_json(pj.at("run")));
      t.points.push_back(summarize(t.runs.back()));
      if (!r.slo.empty()) t.goodput.push_back(evaluate_slo(r.slo, t.runs.back()));
    }
    r.targets.push_back(std::move(t));
  }
  if (r.targets.empty()) throw std::invalid_argument("the report has no targets");
  return r;
}

BenchReport merge_reports(const BenchReport& a, const std::string& a_name, const BenchReport& b,
                          const std::string& b_name) {
  if (a.targets.size() != 1 || b.targets.size() != 1)
    throw std::invalid_argument("each report must hold one server (" + a_name + ": " +
                                std::to_string(a.targets.size()) + ", " + b_name + ": " +
                                std::to_string(b.targets.size()) + ")");
  if (a.sweep_key != b.sweep_key)
    throw std::invalid_argument("the reports sweep different things ('" + a.sweep_key + "' and '" + b.sweep_key + "')");
  BenchReport m;
  m.sweep_key = a.sweep_key;
  m.slo = a.slo;
  m.targets = {a.targets[0], b.targets[0]};
  for (auto& t : m.targets) {  // both under A's objectives
    t.goodput.clear();
    for (const auto& run : t.runs)
      if (!m.slo.empty()) t.goodput.push_back(evaluate_slo(m.slo, run));
  }
  // Both runs' metadata, each key once where they agree, "A: x / B: y" where they differ.
  m.meta = nlohmann::json::object();
  m.meta["merged from"] = "A: " + a_name + ", B: " + b_name;
  for (const auto& [k, va] : a.meta.items()) {
    const auto vb = b.meta.value(k, nlohmann::json());
    if (vb == va) {
      m.meta[k] = va;
    } else {
      auto text = [](const nlohmann::json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
      m.meta[k] = "A: " + text(va) + " / B: " + (vb.is_null() ? std::string("-") : text(vb));
    }
  }
  for (const auto& [k, vb] : b.meta.items())
    if (!a.meta.contains(k)) m.meta[k] = "A: - / B: " + (vb.is_string() ? vb.get<std::string>() : vb.dump());
  if (a.meta.value("workload", nlohmann::json()) != b.meta.value("workload", nlohmann::json()) ||
      a.meta.value("workload seed", nlohmann::json()) != b.meta.value("workload seed", nlohmann::json())) m.meta["warning"] = "the two runs used different workloads; their ratios compare unlike loads";
  return m;
}

}  // namespace pagoda::bench
