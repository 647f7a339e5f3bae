// Benchmark (not a test) of structured output over the json-schema-test-suite:
// every draft-7 schema the converter accepts is compiled (JSON Schema -> GBNF -> automaton, over
// deepseek-llm's 100k-token vocabulary), and every valid instance it accepts is tokenized with
// that vocabulary and walked through the matcher, timing the token mask at each step. Each
// schema is new to its grammar: the first walk of each instance times cold-cache masks (the
// first request with a new schema), a second walk warm ones (every later request with that
// schema, which the server's grammar cache hands the same compiled grammar). One thread.
//   build/tests/bench_structured_suite [vocab.gguf] [suite-dir] [--slow US] [--again N]
// --slow US lists every cold mask above US microseconds of thread CPU (file, group, the text
// before the mask), to find which grammar positions make the tail. --again N compiles every
// schema N more times and reports each cold mask's least thread CPU over those rounds: the
// vocabulary's caches (loop splits) are warm then, and the least of N hides a busy host's
// noise, so two builds' mask code can be compared on a shared machine.
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/structured/json_schema.h"
#include "tests/unit/structured/structured_test_util.h"

using namespace structured_test;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

namespace {

double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5))];
}

// This thread's CPU time: on a shared machine, wall time includes time the thread was not
// running; both are reported.
double thread_cpu_us() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

void print(const char* label, const std::vector<double>& v) {
  std::printf("%-28s n=%-6zu p50 %8.1f  p90 %8.1f  p99 %8.1f  max %9.1f  (us)\n", label, v.size(), pct(v, 0.5),
              pct(v, 0.9), pct(v, 0.99), v.empty() ? 0.0 : *std::max_element(v.begin(), v.end()));
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args;
  double slow_us = -1;
  int again = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--slow" && i + 1 < argc) slow_us = std::atof(argv[++i]);
    else if (std::string(argv[i]) == "--again" && i + 1 < argc) again = std::atoi(argv[++i]);
    else args.push_back(argv[i]);
  }
  const std::string vocab_path = args.size() > 0 ? args[0] : PAGODA_TESTDATA_DIR "/vocab/ggml-vocab-deepseek-llm.gguf";
  const std::string suite = args.size() > 1 ? args[1] : "/usr/share/json-schema-test-suite/tests/draft7";
  if (!fs::exists(vocab_path) || !fs::is_directory(suite)) {
    std::fprintf(stderr, "bench_structured_suite: need %s and %s\n", vocab_path.c_str(), suite.c_str());
    return 2;
  }
  pagoda::gguf::GgufFile file = pagoda::gguf::GgufFile::open(vocab_path);
  auto tok = pagoda::Tokenizer::from_gguf(file);
  auto vocab = pagoda::token_vocabulary(*tok);  // the tokenizer above, not a second load
  std::vector<uint32_t> bits(vocab->mask_words());

  std::vector<double> compile_us, mask_us, warm_us, compile_cpu, mask_cpu, warm_cpu;
  int schemas = 0, refused = 0, walked = 0, rejected = 0;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(suite))
    if (e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::vector<double> again_cpu;  // per cold mask position, the least over the later rounds
  for (int round = 0; round <= again; ++round) {
  size_t position = 0;
  for (const auto& path : files) {
    std::ifstream in(path);
    const auto groups = nlohmann::ordered_json::parse(in);
    for (const auto& group : groups) {
      std::shared_ptr<const CompiledGrammar> g;
      const auto t0 = Clock::now();
      const double c0 = thread_cpu_us();
      try {
        g = compile_gbnf(pagoda::structured::json_schema_to_gbnf(group["schema"]), vocab);
      } catch (const std::exception&) {
        if (round == 0) ++refused;
        continue;
      }
      if (round == 0) {
        compile_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
        compile_cpu.push_back(thread_cpu_us() - c0);
        ++schemas;
      }
      for (const auto& t : group["tests"]) {
        if (!t["valid"].get<bool>()) continue;
        // Compact, as the converter writes; instances in another key order than the schema's
        // `properties` are not reachable and are skipped (counted as rejected).
        const std::string text = t["data"].dump();
        const std::vector<int32_t> ids = tok->encode(text, false, false);
        bool ok = true;
        for (int pass = 0; pass < (round == 0 ? 2 : 1); ++pass) {
          std::vector<double>& times = pass == 0 ? mask_us : warm_us;
          std::vector<double>& cpu = pass == 0 ? mask_cpu : warm_cpu;
          GrammarMatcher m(g);
          std::string before;
          for (int32_t id : ids) {
            const double c1 = thread_cpu_us();
            const auto m0 = Clock::now();
            m.fill_mask(bits.data());
            const double wall = std::chrono::duration<double, std::micro>(Clock::now() - m0).count();
            const double used = thread_cpu_us() - c1;
            if (round > 0) {
              if (again_cpu.size() <= position) again_cpu.push_back(used);
              again_cpu[position] = std::min(again_cpu[position], used);
              ++position;
              before += vocab->token_bytes(id);
              if (!m.accept_token(id)) break;
              continue;
            }
            times.push_back(wall);
            cpu.push_back(used);
            if (pass == 0 && slow_us >= 0 && cpu.back() > slow_us)
              std::printf("slow %8.1f us  %s / %s  after '%s'\n", cpu.back(), path.filename().c_str(),
                          group["description"].get<std::string>().c_str(), before.c_str());
            before += vocab->token_bytes(id);
            if (!m.accept_token(id)) {
              ok = false;
              break;
            }
          }
          ok = ok && m.can_end();
        }
        if (round == 0) ++(ok ? walked : rejected);
      }
    }
  }
  }
  std::printf("json-schema-test-suite (%s) over %s (%d tokens), one thread\n", suite.c_str(), vocab_path.c_str(),
              vocab->size());
  std::printf("%d schemas compiled, %d refused; %d valid instances walked, %d not reachable as written\n", schemas,
              refused, walked, rejected);
  print("compile (schema -> grammar)", compile_us);
  print("mask per token, cold", mask_us);
  print("mask per token, warm", warm_us);
  print("compile, thread CPU", compile_cpu);
  print("mask, cold, thread CPU", mask_cpu);
  print("mask, warm, thread CPU", warm_cpu);
  if (again > 0) print("mask, cold again, least CPU", again_cpu);
  return 0;
}
