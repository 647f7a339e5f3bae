// `pagoda bench`: runs one load point or a sweep and reports it (table, JSON, HTML).
#include <cstdio>
#include <fstream>
#include <stdexcept>

#include "server/bench/bench_options.h"
#include "server/bench/load_runner.h"
#include "server/bench/report.h"
#include "server/bench/workload.h"
#include "server/cli/commands.h"

namespace pagoda::cli {

int bench(int argc, char** argv) {
  using namespace pagoda::bench;
  BenchOptions opt;
  try {
    if (!parse_bench_options(argc, argv, opt)) return 0;
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "pagoda bench: %s\n", e.what());
    return 2;
  }
  std::string model = opt.model;
  if (model.empty()) {
    std::string err;
    model = first_model_id({opt.url, opt.api_key, 30}, &err);
    if (model.empty()) {
      if (err.rfind("GET ", 0) == 0)  // no answer at all
        std::fprintf(stderr, "pagoda bench: cannot reach %s (%s); pass --model to skip the lookup\n",
                     opt.url.c_str(), err.c_str());
      else  // it answered, just not with a model: say what it said ("401: pass --api-key")
        std::fprintf(stderr, "pagoda bench: %s: %s\n", opt.url.c_str(), err.c_str());
      return 1;
    }
  }
  const Workload workload(opt);

  std::vector<BenchOptions> points;
  if (opt.sweep_values.empty()) {
    points.push_back(opt);
  } else {
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
  }

  std::vector<RunResult> runs;
  std::vector<Summary> summaries;
  for (const auto& p : points) {
    if (opt.progress)
      std::fprintf(stderr, "pagoda bench: %s against %s (%s)\n",
                   p.rate > 0 ? ("rate " + std::to_string(p.rate) + " req/s").c_str()
                              : (std::to_string(p.users) + " users").c_str(),
                   p.url.c_str(), model.c_str());
    runs.push_back(run_load(p, workload, model));
    summaries.push_back(summarize(runs.back()));
  }

  std::fputs(format_table(summaries, opt.sweep_key).c_str(), stdout);
  nlohmann::json report = {{"url", opt.url},
                           {"model", model},
                           {"endpoint", opt.endpoint == Endpoint::Chat ? "chat" : "completions"},
                           {"points", nlohmann::json::array()}};
  for (const auto& s : summaries) report["points"].push_back(summary_to_json(s));
  if (!opt.json_path.empty()) {
    if (opt.json_path == "-") {
      std::puts(report.dump(2).c_str());
    } else {
      std::ofstream(opt.json_path) << report.dump(2) << "\n";
    }
  }
  if (!opt.html_path.empty()) {
    std::ofstream out(opt.html_path);
    if (!out) {
      std::fprintf(stderr, "pagoda bench: cannot write %s\n", opt.html_path.c_str());
      return 1;
    }
    out << render_html(summaries, runs, "pagoda bench: " + model + " at " + opt.url);
  }
  int failed = 0;
  for (const auto& s : summaries) failed += s.failed;
  return failed == 0 ? 0 : 3;
}

}  // namespace pagoda::cli
