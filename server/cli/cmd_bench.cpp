// `pagoda bench`: runs one load point or a sweep against one server, or against two alternately
// (--compare), and reports it (table, JSON, HTML); `pagoda bench report A.json [B.json]` redraws
// saved reports, two side by side.
#include <cstdio>
#include <fstream>
#include <stdexcept>

#include "server/bench/bench_options.h"
#include "server/bench/html_report.h"
#include "server/bench/load_runner.h"
#include "server/bench/report.h"
#include "server/bench/report_json.h"
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

// The table on stdout, and the JSON and HTML files when asked; false when a file cannot be written.
bool write_outputs(const BenchReport& report, const std::string& json_path, const std::string& html_path) {
  std::fputs(format_table(report).c_str(), stdout);
  if (!json_path.empty()) {
    const std::string text = report_to_json(report).dump(2);
    if (json_path == "-") {
      std::puts(text.c_str());
    } else if (!(std::ofstream(json_path) << text << "\n")) {
      std::fprintf(stderr, "pagoda bench: cannot write %s\n", json_path.c_str());
      return false;
    }
  }
  if (!html_path.empty() && !(std::ofstream(html_path) << render_html(report))) {
    std::fprintf(stderr, "pagoda bench: cannot write %s\n", html_path.c_str());
    return false;
  }
  return true;
}

const char* kReportHelp = R"(usage: pagoda bench report A.json [B.json] [options]
Redraws reports that `pagoda bench --json` saved: one as it was, or two side by side (A's server
first, B's second, with B/A ratios), as --compare draws one run. Each file must hold one server.
  --slo LIST      recompute goodput under these objectives (syntax of pagoda bench --slo)
  --html FILE     self-contained HTML report
  --json FILE     the merged report as JSON ("-" for stdout)
)";

int bench_report(int argc, char** argv) {
  std::vector<std::string> files;
  std::string html_path, json_path;
  std::vector<SloObjective> slo;
  bool have_slo = false;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
        return argv[++i];
      };
      if (a == "--help" || a == "-h") {
        std::fputs(kReportHelp, stdout);
        return 0;
      } else if (a == "--html") html_path = value();
      else if (a == "--json") json_path = value();
      else if (a == "--slo") {
        slo = parse_slo(value());
        have_slo = true;
      } else if (!a.empty() && a[0] == '-') throw std::invalid_argument("unknown option " + a);
      else files.push_back(a);
    }
    if (files.empty() || files.size() > 2) throw std::invalid_argument("give one or two JSON reports");
    std::vector<BenchReport> reports;
    for (const auto& f : files) {
      std::ifstream in(f);
      if (!in) throw std::invalid_argument("cannot read " + f);
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(in);
      } catch (const nlohmann::json::exception& e) {
        throw std::invalid_argument(f + " is not JSON: " + e.what());
      }
      try {
        reports.push_back(report_from_json(j, have_slo ? &slo : nullptr));
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument(f + ": " + e.what());
      }
    }
    const BenchReport report =
        reports.size() == 1 ? reports[0] : merge_reports(reports[0], files[0], reports[1], files[1]);
    if (report.meta.contains("warning"))
      std::fprintf(stderr, "pagoda bench report: %s\n", report.meta["warning"].get<std::string>().c_str());
    return write_outputs(report, json_path, html_path) ? 0 : 1;
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "pagoda bench report: %s\n", e.what());
    return 2;
  }
}

}  // namespace

int bench(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "report") return bench_report(argc - 1, argv + 1);
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

  if (!write_outputs(report, opt.json_path, opt.html_path)) return 1;
  int failed = 0;
  for (const auto& t : report.targets)
    for (const auto& s : t.points) failed += s.failed;
  return failed == 0 ? 0 : 3;
}

}  // namespace pagoda::cli
