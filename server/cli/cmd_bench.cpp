// `pagoda bench`: runs one load point or a sweep against one server, or against two alternately
// (--compare), and reports it (table, JSON, HTML).
#include <cstdio>
#include <fstream>
#include <stdexcept>

#include "server/bench/bench_options.h"
#include "server/bench/html_report.h"
#include "server/bench/load_runner.h"
#include "server/bench/report.h"
#include "server/bench/server_info.h"
#include "server/bench/slo.h"
#include "server/bench/workload.h"
#include "server/cli/commands.h"

namespace pagoda::cli {
namespace {

using namespace pagoda::bench;

// The command as typed, for the report; the API key's value is not written down.
std::string command_line(int argc, char** argv) {
  std::string out = "pagoda";
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (i > 0 && std::string(argv[i - 1]) == "--api-key") a = "***";
    if (a.find_first_of(" \t\"'$") != std::string::npos) a = "'" + a + "'";
    out += " " + a;
  }
  return out;
}

// The model to send to `url`: --model, else the first GET /v1/models lists; "" after saying why.
std::string model_for(const BenchOptions& opt, const std::string& url) {
  if (!opt.model.empty()) return opt.model;
  std::string err;
  std::string model = first_model_id({url, opt.api_key, 30}, &err);
  if (model.empty()) {
    if (err.rfind("GET ", 0) == 0)  // no answer at all
      std::fprintf(stderr, "pagoda bench: cannot reach %s (%s); pass --model to skip the lookup\n", url.c_str(),
                   err.c_str());
    else  // it answered, just not with a model: say what it said ("401: pass --api-key")
      std::fprintf(stderr, "pagoda bench: %s: %s\n", url.c_str(), err.c_str());
  }
  return model;
}

std::vector<BenchOptions> load_points(const BenchOptions& opt) {
  std::vector<BenchOptions> points;
  if (opt.sweep_values.empty()) return {opt};
  for (double v : opt.sweep_values) {
    BenchOptions p = opt;
    if (opt.sweep_key == "users") {
      p.users = static_cast<int>(v);
      p.rate = 0;
    } else {
      p.rate = v;
    }
    points.push_back(p);
  }
  return points;
}

nlohmann::json run_metadata(const BenchOptions& opt, int argc, char** argv) {
  nlohmann::json m = nlohmann::json::object();
  m["date"] = utc_now();
  m["command line"] = command_line(argc, argv);
  m.update(describe_client_host());
  m["endpoint"] = opt.endpoint == Endpoint::Chat ? "/v1/chat/completions" : "/v1/completions";
  if (!opt.prompts_file.empty()) {
    m["workload"] = "prompts from " + opt.prompts_file;
  } else if (!opt.sharegpt_file.empty()) {
    m["workload"] = "ShareGPT conversations from " + opt.sharegpt_file;
  } else {
    char buf[256];
    std::snprintf(buf, sizeof buf, "synthetic: %d prompt words, %d output tokens, spread %g, system prompt %d words",
                  opt.input_len, opt.output_len, opt.len_spread, opt.system_prompt_len);
    m["workload"] = buf;
  }
  m["ignore_eos"] = opt.ignore_eos ? "yes" : "no";
  m["workload seed"] = opt.seed;
  m["warm-up requests (not counted)"] = opt.warmup;
  return m;
}

}  // namespace

int bench(int argc, char** argv) {
  BenchOptions opt;
  std::vector<SloObjective> slo;
  try {
    if (!parse_bench_options(argc, argv, opt)) return 0;
    if (!opt.slo_spec.empty()) slo = parse_slo(opt.slo_spec);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "pagoda bench: %s\n", e.what());
    return 2;
  }
  BenchReport report;
  report.sweep_key = opt.sweep_key;
  report.slo = slo;
  report.meta = run_metadata(opt, argc, argv);
  std::vector<std::string> urls = {opt.url};
  if (!opt.compare_url.empty()) urls.push_back(opt.compare_url);
  for (const auto& url : urls) {
    TargetReport t;
    t.url = url;
    t.model = model_for(opt, url);
    if (t.model.empty()) return 1;
    t.server = describe_server({url, opt.api_key, 30}, t.model);
    report.targets.push_back(std::move(t));
  }
  const Workload workload(opt);

  if (opt.warmup > 0) {
    for (auto& t : report.targets) {
      BenchOptions w = opt;
      w.url = t.url;
      w.requests = opt.warmup;
      w.duration_s = 0;
      w.rate = 0;
      w.users = std::min(opt.warmup, std::max(1, opt.users));
      w.progress = false;
      if (opt.progress) std::fprintf(stderr, "pagoda bench: %d warm-up requests to %s\n", opt.warmup, t.url.c_str());
      run_load(w, workload, t.model);
    }
  }
  // Each load point runs on every server before the next point, so drift on the host (heat,
  // other work) falls on both alike.
  for (const auto& p : load_points(opt)) {
    for (auto& t : report.targets) {
      BenchOptions pt = p;
      pt.url = t.url;
      if (opt.progress)
        std::fprintf(stderr, "pagoda bench: %s against %s (%s)\n",
                     p.rate > 0 ? ("rate " + std::to_string(p.rate) + " req/s").c_str()
                                : (std::to_string(p.users) + (p.users == 1 ? " user" : " users")).c_str(),
                     t.url.c_str(), t.model.c_str());
      t.runs.push_back(run_load(pt, workload, t.model));
      t.points.push_back(summarize(t.runs.back()));
      if (!slo.empty()) t.goodput.push_back(evaluate_slo(slo, t.runs.back()));
    }
  }

  std::fputs(format_table(report).c_str(), stdout);
  const nlohmann::json json = report_to_json(report);
  if (!opt.json_path.empty()) {
    if (opt.json_path == "-") {
      std::puts(json.dump(2).c_str());
    } else {
      std::ofstream(opt.json_path) << json.dump(2) << "\n";
    }
  }
  if (!opt.html_path.empty()) {
    std::ofstream out(opt.html_path);
    if (!out) {
      std::fprintf(stderr, "pagoda bench: cannot write %s\n", opt.html_path.c_str());
      return 1;
    }
    out << render_html(report);
  }
  int failed = 0;
  for (const auto& t : report.targets)
    for (const auto& s : t.points) failed += s.failed;
  return failed == 0 ? 0 : 3;
}

}  // namespace pagoda::cli
