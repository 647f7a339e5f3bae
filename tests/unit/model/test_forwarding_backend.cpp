// tests/support/forwarding_backend.h: it overrides every virtual Backend declares (read from
// engine/backend/backend.h, so an op added there without a forward fails here), and a model run
// through it gives the inner backend's logits bit for bit on the architectures that use the
// newer ops (gemma2: attention_ext, scale, gelu_mul, softcap; gemma3: per-layer cache edits'
// path; qwen3moe and qwen2moe: moe_ffn).
#include <catch2/catch.hpp>

#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "engine/backend/cpu/backend_cpu.h"
#include "engine/gguf/gguf.h"
#include "engine/model/model.h"
#include "tests/support/forwarding_backend.h"
#include "tests/unit/model/forward_test_util.h"
#include "tests/unit/model/reference_model.h"

using namespace pagoda;

namespace {

std::string read_source(const std::string& rel) {
  std::ifstream in(std::string(PAGODA_SOURCE_DIR) + "/" + rel);
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Counts the ops run through the hook, by kind.
class CountingBackend final : public test::ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  std::map<Op, int> count;

 private:
  void around(Op op, const std::function<void()>& call) override {
    ++count[op];
    call();
  }
};

}  // namespace

TEST_CASE("forwarding backend overrides every virtual of Backend", "[model]") {
  std::string backend = read_source("engine/backend/backend.h");
  backend = backend.substr(backend.find("class Backend {"));
  const std::string fwd = read_source("tests/support/forwarding_backend.h");
  // "virtual <return type> name(" (the destructor aside).
  const std::regex virt(R"(virtual\s+[A-Za-z_:<>,\s*&]+?\b([a-z_0-9]+)\s*\()");
  std::set<std::string> names;
  for (auto it = std::sregex_iterator(backend.begin(), backend.end(), virt); it != std::sregex_iterator(); ++it)
    names.insert((*it)[1]);
  CHECK(names.size() >= 35);  // the parse found the ops (38 when written)
  CHECK(names.count("moe_ffn") == 1);
  CHECK(names.count("attention_ext") == 1);
  for (const std::string& n : names) {
    INFO("Backend::" << n << " is not overridden in tests/support/forwarding_backend.h");
    const std::regex over("\\b" + n + "\\([^;{]*\\)\\s*(const\\s*)?override");
    CHECK(std::regex_search(fwd, over));
  }
}

TEST_CASE("a model through the forwarding backend gives the inner backend's logits", "[model]") {
  using Op = test::ForwardingBackend::Op;
  for (const char* arch : {"gemma2", "gemma3", "qwen3moe", "qwen2moe"}) {
    INFO(arch);
    test::TinyModelSpec s;
    s.arch = arch;
    s.layers = std::string(arch) == "gemma3" ? 7 : 2;
    if (std::string(arch).find("moe") != std::string::npos) s.experts = 4, s.experts_used = 2;
    const gguf::GgufFile f = gguf::GgufFile::from_bytes(test::make_tiny_model(s));
    const auto ids = test::some_tokens(13, s.vocab, 1);
    const std::vector<int32_t> table = test::blocks({5, 2, 7, 0});
    std::vector<float> direct, forwarded;
    Model plain(f, std::make_unique<CpuBackend>(1), 32);
    plain.init_kv_cache(8, test::kBlock, GgmlType::F16);
    plain.forward(test::plan_of({test::Part{&ids, 0, 13, table}}), direct);
    auto counting = std::make_unique<CountingBackend>(std::make_unique<CpuBackend>(1));
    CountingBackend& c = *counting;
    Model wrapped(f, std::move(counting), 32);
    wrapped.init_kv_cache(8, test::kBlock, GgmlType::F16);
    wrapped.forward(test::plan_of({test::Part{&ids, 0, 13, table}}), forwarded);
    CHECK(forwarded == direct);
    CHECK(c.count[Op::Matmul] > 0);
    CHECK(c.count[Op::Attention] > 0);
    CHECK((c.count[Op::Moe] > 0) == (std::string(arch).find("moe") != std::string::npos));
  }
}
