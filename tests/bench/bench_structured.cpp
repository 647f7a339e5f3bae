// Benchmark of the structured-output grammar core (not a test): GBNF compile time, and the
// per-token mask time while walking realistic JSON documents (tokenized with the model's own
// tokenizer) through JSON grammars, over deepseek-llm's 100k-token vocabulary, one thread.
//   build/tests/bench_structured [vocab.gguf] [--docs N]
// "cold" = the first document through a freshly compiled grammar (the mask cache fills as it
// goes); "warm" = the following documents with the same compiled grammar (as when the server's
// grammar cache hands the same schema to many requests).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "tests/unit/structured/structured_test_util.h"

using namespace structured_test;
using Clock = std::chrono::steady_clock;

namespace {

double us_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

// This thread's CPU time: on a shared machine, wall time includes time the thread was not
// running; both are reported.
double thread_cpu_us() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

struct Stats {
  std::vector<double> v;
  double pct(double p) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    size_t i = std::min(v.size() - 1, static_cast<size_t>(p / 100.0 * (v.size() - 1) + 0.5));
    return v[i];
  }
  void print(const char* label) {
    double sum = 0;
    for (double x : v) sum += x;
    std::printf("  %-34s n=%6zu  p50 %8.1f  p90 %8.1f  p99 %8.1f  max %9.1f  mean %8.1f us\n",
                label, v.size(), pct(50), pct(90), pct(99), pct(100), v.empty() ? 0 : sum / v.size());
  }
};

const char* kWords[] = {"alpha", "Berlin", "quick brown fox", "naïve café", "data-science", "東京",
                        "hello, world", "x", "42 Main St.", "O'Reilly", "tab\\there", "日本語テキスト",
                        "email@example.com", "path/to/file", "quote \\\"inside\\\"", "emoji 😀"};

std::string pick(std::mt19937& rng) { return kWords[rng() % (sizeof(kWords) / sizeof(kWords[0]))]; }

std::string number(std::mt19937& rng) {
  switch (rng() % 4) {
    case 0: return std::to_string(rng() % 100);
    case 1: {
      std::string s = "-";  // (not "-" + to_string(): g++ 12 warns falsely there, -Wrestrict)
      s += std::to_string(rng() % 100000);
      return s;
    }
    case 2: return std::to_string(rng() % 1000) + "." + std::to_string(rng() % 1000);
    default: return std::to_string(rng() % 10) + "." + std::to_string(rng() % 100) + "e-" + std::to_string(rng() % 9);
  }
}

std::string person_doc(std::mt19937& rng) {
  const char* status[] = {"active", "inactive", "banned", "pending review"};
  std::string s = "{\"name\": \"" + pick(rng) + "\", \"age\": " + std::to_string(rng() % 99) +
                  ", \"email\": \"" + pick(rng) + "\", \"tags\": [";
  int n = rng() % 4;
  for (int i = 0; i < n; ++i) s += (i ? ", \"" : "\"") + pick(rng) + "\"";
  s += "], \"address\": {\"street\": \"" + pick(rng) + "\", \"city\": \"" + pick(rng) +
       "\", \"zip\": \"" + std::to_string(10000 + rng() % 89999) + "\"";
  if (rng() % 2) s += ", \"geo\": [" + number(rng) + ", " + number(rng) + "]";
  s += "}, \"status\": \"" + std::string(status[rng() % 4]) + "\"";
  if (rng() % 2) {
    s += ", \"scores\": [";
    int k = 1 + rng() % 5;
    for (int i = 0; i < k; ++i) s += (i ? ", " : "") + number(rng);
    s += "]";
  }
  return s + "}";
}

std::string json_value(std::mt19937& rng, int depth) {
  int kind = depth > 2 ? 2 + rng() % 3 : rng() % 5;
  if (kind == 0) {
    std::string s = "{";
    int n = 1 + rng() % 4;
    for (int i = 0; i < n; ++i)
      s += std::string(i ? ", " : "") + "\"" + pick(rng) + "\": " + json_value(rng, depth + 1);
    return s + "}";
  }
  if (kind == 1) {
    std::string s = "[";
    int n = rng() % 4;
    for (int i = 0; i < n; ++i) s += std::string(i ? ", " : "") + json_value(rng, depth + 1);
    return s + "]";
  }
  if (kind == 2) return "\"" + pick(rng) + "\"";
  if (kind == 3) return number(rng);
  const char* lits[] = {"true", "false", "null"};
  return lits[rng() % 3];
}

std::string json_doc(std::mt19937& rng) {
  std::string s = "{\"id\": " + std::to_string(rng() % 1000) + ", \"payload\": " + json_value(rng, 0) +
                  ", \"items\": [" + json_value(rng, 1) + ", " + json_value(rng, 1) + "]}";
  return s;
}

std::string tool_doc(std::mt19937& rng) {
  const char* names[] = {"get_weather", "search_web", "send_email", "create_calendar_event"};
  std::string s = "[";
  int n = 1 + rng() % 2;
  for (int i = 0; i < n; ++i) {
    s += std::string(i ? "," : "") + "{\"name\":\"" + names[rng() % 4] + "\",\"arguments\":{\"query\":\"" +
         pick(rng) + "\",\"count\":" + std::to_string(rng() % 50) + ",\"filters\":[\"" + pick(rng) +
         "\",true,null]}}";
  }
  return s + "]";
}

struct Case {
  const char* name;
  const char* gbnf;
  std::string (*doc)(std::mt19937&);
};

}  // namespace

int main(int argc, char** argv) {
  std::string path = std::string(PAGODA_TESTDATA_DIR) + "/vocab/ggml-vocab-deepseek-llm.gguf";
  int docs = 30;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--docs") && i + 1 < argc) docs = std::atoi(argv[++i]);
    else path = argv[i];
  }
  pagoda::gguf::GgufFile file = pagoda::gguf::GgufFile::open(path);
  auto tok = pagoda::Tokenizer::from_gguf(file);
  auto t0 = Clock::now();
  auto vocab = load_vocabulary(path);
  std::printf("vocabulary %s: %d tokens, index built in %.1f ms\n", path.c_str(), vocab->size(),
              us_since(t0) / 1000);

  const Case cases[] = {{"person schema", kPersonSchemaGbnf, person_doc},
                        {"tool calls", kToolCallsGbnf, tool_doc},
                        {"generic json", kJsonGbnf, json_doc}};
  Stats all_warm, all_cold, all, all_warm_cpu;
  for (const Case& c : cases) {
    std::printf("%s:\n", c.name);
    Stats compile;
    for (int i = 0; i < 50; ++i) {
      auto t = Clock::now();
      auto g = compile_gbnf(c.gbnf, vocab);
      compile.v.push_back(us_since(t));
    }
    compile.print("compile (parse + lower)");
    std::mt19937 rng(7);
    auto grammar = compile_gbnf(c.gbnf, vocab);
    Stats cold, warm, accept, warm_cpu;
    std::vector<uint32_t> bits(vocab->mask_words());
    size_t tokens = 0;
    for (int d = 0; d < docs; ++d) {
      std::string text = c.doc(rng);
      std::vector<int32_t> ids = tok->encode(text, false, false);
      GrammarMatcher m(grammar);
      for (size_t i = 0; i <= ids.size(); ++i) {
        double c0 = thread_cpu_us();
        auto t = Clock::now();
        m.fill_mask(bits.data());
        double us = us_since(t);
        double cpu = thread_cpu_us() - c0;
        (d == 0 ? cold : warm).v.push_back(us);
        (d == 0 ? all_cold : all_warm).v.push_back(us);
        all.v.push_back(us);
        if (d > 0) {
          warm_cpu.v.push_back(cpu);
          all_warm_cpu.v.push_back(cpu);
        }
        if (i == ids.size()) {
          if (!m.can_end()) std::printf("  ! document %d cannot end: %s\n", d, text.c_str());
          break;
        }
        int32_t id = ids[i];
        if (!((bits[id / 32] >> (id % 32)) & 1)) {
          std::printf("  ! document %d: token %zu ('%s') not in the mask: %s\n", d, i,
                      vocab->token_bytes(id).c_str(), text.c_str());
          break;
        }
        t = Clock::now();
        if (!m.accept_token(id)) {
          std::printf("  ! document %d: token %zu rejected\n", d, i);
          break;
        }
        accept.v.push_back(us_since(t));
        ++tokens;
      }
    }
    cold.print("mask, cold (1st document)");
    warm.print("mask, warm (later documents)");
    warm_cpu.print("mask, warm, thread CPU time");
    accept.print("accept_token");
    std::printf("  %zu tokens in %d documents, %zu cached positions\n", tokens, docs,
                grammar->cached_positions());
    // Random walks: a uniformly random allowed token at each step (odd strings, unicode,
    // deep nesting: states real documents rarely reach), same compiled grammar.
    Stats walk, walk_cpu;
    size_t before = grammar->cached_positions();
    for (int w = 0; w < docs; ++w) {
      GrammarMatcher m(grammar);
      for (int step = 0; step < 100; ++step) {
        double c0 = thread_cpu_us();
        auto t = Clock::now();
        m.fill_mask(bits.data());
        walk.v.push_back(us_since(t));
        walk_cpu.v.push_back(thread_cpu_us() - c0);
        std::vector<int32_t> allowed;
        for (int32_t id = 0; id < vocab->size(); ++id)
          if ((bits[id / 32] >> (id % 32)) & 1) allowed.push_back(id);
        if (allowed.empty()) break;
        int32_t id = allowed[rng() % allowed.size()];
        if (vocab->is_eog(id) || !m.accept_token(id)) break;
      }
    }
    walk.print("mask, random walks");
    walk_cpu.print("mask, random walks, thread CPU");
    std::printf("  random walks added %zu cached positions\n", grammar->cached_positions() - before);
  }
  std::printf("all grammars:\n");
  all_cold.print("mask, cold");
  all_warm.print("mask, warm");
  all_warm_cpu.print("mask, warm, thread CPU time");
  all.print("mask, all documents");
  return 0;
}
