// `pagoda bench report` end to end: two saved single-server reports merged by the real binary into
// one comparison (table with B/A ratios, JSON, HTML), clear errors for bad input, and the HTML
// opened in a real browser (headless chromium) with no script error or console error.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "server/bench/report_json.h"
#include "tests/support/run_command.h"
#include "tests/support/skip.h"
#include "tests/support/test_files.h"
#include "tests/unit/bench/bench_fixtures.h"

using namespace pagoda::bench;
using pagoda::testing::read_file;
using pagoda::testing::run_command;
namespace fs = std::filesystem;

namespace {

struct Dir {
  fs::path path = fs::temp_directory_path() / ("pagoda_bench_report_" + std::to_string(::getpid()));
  Dir() { fs::create_directories(path); }
  ~Dir() { fs::remove_all(path); }
};

// A users=1,4 sweep against `url`, every latency scaled by `slow`, saved as `bench --json` does.
void save_report(const fs::path& file, const std::string& url, double slow) {
  BenchReport r;
  r.sweep_key = "users";
  r.slo = parse_slo("ttft=300ms");
  r.meta = {{"workload", "synthetic"}, {"workload seed", 1}};
  TargetReport t;
  t.url = url;
  t.model = "stories";
  for (int users : {1, 4}) {
    RunResult run;
    run.users = users;
    run.wall_s = 3 * slow;
    for (int i = 0; i < 6 * users; ++i)
      run.requests.push_back(fixtures::request(0.2 * i, 0.04 * slow * (1 + i % 5), 0.012 * slow, 20));
    t.runs.push_back(run);
    t.points.push_back(summarize(run));
    t.goodput.push_back(evaluate_slo(r.slo, run));
  }
  r.targets.push_back(t);
  std::ofstream(file) << report_to_json(r).dump(2);
}

std::string bench_report_cmd(const std::string& args) { return std::string(PAGODA_BINARY) + " bench report " + args; }

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// What headless chromium saw of `page`: every console message it logged (uncaught exceptions
// among them), and the DOM after load or a screenshot of the page.
struct BrowserView {
  bool ran = false;
  std::string console, output;
};

BrowserView open_in_chromium(const fs::path& page, const fs::path& dir, bool screenshot) {
  const fs::path out = dir / (screenshot ? "shot.png" : "dom.html"), log = dir / "chromium.log";
  fs::remove(out);
  const std::string what = screenshot ? "--window-size=1280,4000 --screenshot='" + out.string() + "'" : "--dump-dom";
  const auto r = run_command("cd '" + dir.string() + "' && timeout 90 chromium --headless --no-sandbox --disable-gpu "
                             "--no-first-run --user-data-dir='" + (dir / "profile").string() +
                             "' --enable-logging=stderr --v=0 " + what + " 'file://" + page.string() + "' " +
                             (screenshot ? "> /dev/null" : "> '" + out.string() + "'") + " 2> '" + log.string() + "'");
  BrowserView v;
  v.ran = r.status == 0;
  v.output = read_file(out.string());
  std::ifstream in(log);
  for (std::string line; std::getline(in, line);)
    if (line.find(":CONSOLE") != std::string::npos) v.console += line + "\n";
  return v;
}

// The text of the first <text class="KIND"> in `svg`, as the browser serialised it ("" if none).
std::string svg_text(const std::string& svg, const std::string& kind) {
  const size_t at = svg.find("class=\"" + kind + "\"");
  if (at == std::string::npos) return "";
  const size_t open = svg.find('>', at), close = svg.find("</text>", at);
  return open < close && close != std::string::npos ? svg.substr(open + 1, close - open - 1) : "";
}

}  // namespace

TEST_CASE("bench report merges two saved runs into one comparison", "[bench]") {
  Dir d;
  const fs::path a = d.path / "a.json", b = d.path / "b.json";
  save_report(a, "http://127.0.0.1:1", 1);
  save_report(b, "http://127.0.0.1:2", 2);
  const fs::path html = d.path / "m.html", merged = d.path / "m.json";
  auto r = run_command(bench_report_cmd("'" + a.string() + "' '" + b.string() + "' --html '" + html.string() + "' --json '" +
                              merged.string() + "' 2>&1"));
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("A: http://127.0.0.1:1") != std::string::npos);
  CHECK(r.out.find("B: http://127.0.0.1:2") != std::string::npos);
  CHECK(r.out.find("2.00x") != std::string::npos);  // B's latencies are twice A's
  const auto j = nlohmann::json::parse(read_file(merged.string()));
  CHECK(j["targets"].size() == 2);
  CHECK(j["meta"]["merged from"].get<std::string>().find("b.json") != std::string::npos);
  const std::string page = read_file(html.string());
  CHECK(page.find("http://127.0.0.1:2") != std::string::npos);
  CHECK(count(page, "<svg") >= 4);

  // One file redraws as it was; a new SLO rescores it.
  r = run_command(bench_report_cmd("'" + a.string() + "' --slo ttft:p50=1ms 2>&1"));
  CHECK(r.status == 0);
  CHECK(r.out.find("highest load meeting it: none") != std::string::npos);

  r = run_command(bench_report_cmd("2>&1"));
  CHECK(r.status == 2);
  CHECK(r.out.find("one or two JSON reports") != std::string::npos);
  r = run_command(bench_report_cmd("'" + (d.path / "missing.json").string() + "' 2>&1"));
  CHECK(r.status == 2);
  CHECK(r.out.find("cannot read") != std::string::npos);
  std::ofstream(d.path / "bad.json") << "{\"targets\": [";
  r = run_command(bench_report_cmd("'" + (d.path / "bad.json").string() + "' 2>&1"));
  CHECK(r.status == 2);
  CHECK(r.out.find("is not JSON") != std::string::npos);
  r = run_command(bench_report_cmd("'" + merged.string() + "' '" + a.string() + "' 2>&1"));  // already a comparison
  CHECK(r.status == 2);
  CHECK(r.out.find("one server") != std::string::npos);
}

TEST_CASE("the HTML report opens in a browser without a script or console error", "[browser]") {
  if (!pagoda::testing::requirement_met(run_command("command -v chromium >/dev/null 2>&1").status == 0,
                                        "chromium not found (apt-get install chromium)"))
    return;
  Dir d;
  const fs::path a = d.path / "a.json", b = d.path / "b.json", html = d.path / "m.html";
  save_report(a, "http://127.0.0.1:1", 1);
  save_report(b, "http://127.0.0.1:2", 1.5);
  REQUIRE(run_command(bench_report_cmd("'" + a.string() + "' '" + b.string() + "' --html '" + html.string() + "'")).status == 0);

  // The check itself: a page with a deliberate script error must be caught.
  const fs::path broken = d.path / "broken.html";
  std::ofstream(broken) << "<html><body><svg></svg><script>no_such_function_here();</script></body></html>";
  const BrowserView bad = open_in_chromium(broken, d.path, false);
  REQUIRE(bad.ran);
  CHECK(bad.console.find("no_such_function_here") != std::string::npos);

  const BrowserView v = open_in_chromium(html, d.path, false);
  REQUIRE(v.ran);
  CHECK(v.console.empty());
  // Every chart of the page made it into the rendered document, each with both axis labels and
  // tick labels on its axes.
  const std::string page = read_file(html.string());
  const std::string& dom = v.output;
  CHECK(count(dom, "<svg") == count(page, "<svg"));
  CHECK(count(dom, "<svg") >= 4);
  CHECK(dom.find("http://127.0.0.1:2") != std::string::npos);
  for (size_t at = dom.find("<svg"); at != std::string::npos; at = dom.find("<svg", at + 1)) {
    const std::string svg = dom.substr(at, dom.find("</svg>", at) - at);
    INFO(svg.substr(0, 300));
    CHECK_FALSE(svg_text(svg, "xlabel").empty());
    CHECK_FALSE(svg_text(svg, "ylabel").empty());
    CHECK(count(svg, "class=\"tick\"") >= 4);
  }

  // And it paints: a screenshot of the whole report, a PNG of real size.
  const BrowserView shot = open_in_chromium(html, d.path, true);
  REQUIRE(shot.ran);
  CHECK(shot.console.empty());
  CHECK(shot.output.rfind("\x89PNG", 0) == 0);
  CHECK(shot.output.size() > 50000);
}
