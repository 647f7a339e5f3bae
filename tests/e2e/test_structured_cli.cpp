// `pagoda structured`: compiles schemas, grammars and regexes over a real vocabulary (exit 0, or
// 2 with the reason), walks a text through the matcher (accepted / rejected at byte N), and
// prints timings with --bench, as text or --json.
#include <unistd.h>

#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/support/run_command.h"
#include "tests/support/test_files.h"
#include "tests/support/testdata.h"

namespace {

const pagoda::testing::RequiredTestdata needs_testdata{"vocab/ggml-vocab-phi-3.gguf",
                                                       "vocab/ggml-vocab-deepseek-llm.gguf"};

// A file of `content` in this process's scratch directory (removed at exit).
std::string scratch(const std::string& name, const std::string& content) {
  static const pagoda::testing::ScratchDir dir("structured-cli");
  const std::string path = dir.file(name);
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

pagoda::testing::CommandResult run(const std::string& args) {
  return pagoda::testing::run_command(std::string(PAGODA_BINARY) + " structured " + args + " 2>&1");
}

const std::string kModels[] = {std::string(PAGODA_TESTDATA_DIR) + "/vocab/ggml-vocab-phi-3.gguf",
                               std::string(PAGODA_TESTDATA_DIR) + "/vocab/ggml-vocab-deepseek-llm.gguf"};

const char* kSchema = R"({"type": "object", "properties": {
  "name": {"type": "string", "minLength": 1},
  "age": {"type": "integer", "minimum": 0},
  "email": {"type": "string", "format": "email"},
  "tags": {"type": "array", "items": {"enum": ["a", "b"]}}},
  "required": ["name", "age"], "additionalProperties": false})";

}  // namespace

TEST_CASE("pagoda structured compiles and walks texts", "[cli][structured]") {
  const std::string schema = scratch("schema.json", kSchema);
  const std::string good = scratch("good.json", R"({"name":"Ada Lovelace","age":36,"email":"ada@example.org","tags":["a","b"]})");
  const std::string bad = scratch("bad.json", R"({"name":"Ada","age":-1})");
  const std::string partial = scratch("partial.json", R"({"name":"Ada","age":3)");
  for (const std::string& model : kModels) {
    INFO(model);
    const std::string base = "--model " + model + " --schema " + schema;
    auto r = run(base);
    CHECK(r.status == 0);
    CHECK(r.out.find("compiled") != std::string::npos);

    r = run(base + " --input " + good);
    CHECK(r.status == 0);
    CHECK(r.out.find("accepted") != std::string::npos);

    r = run(base + " --input " + bad);
    CHECK(r.status == 1);
    // {"name":"Ada","age": is 20 bytes; the minus sign is refused.
    CHECK(r.out.find("rejected at byte 20") != std::string::npos);

    r = run(base + " --input " + partial);
    CHECK(r.status == 1);
    CHECK(r.out.find("rejected at byte 21") != std::string::npos);  // the end: 21 bytes, object open

    r = run(base + " --input " + good + " --bench --json");
    REQUIRE(r.status == 0);
    const auto j = nlohmann::json::parse(r.out);
    CHECK(j["accepted"] == true);
    CHECK(j["bench"]["masks"].get<int>() > 5);
    CHECK(j["bench"]["mask_us_p50"].get<double>() > 0);
  }
}

TEST_CASE("pagoda structured: grammars and regexes; errors exit 2 with the reason", "[cli][structured]") {
  const std::string model = "--model " + kModels[0];
  const std::string yes = scratch("yes.txt", "yes");
  const std::string gbnf = scratch("g.gbnf", "root ::= \"yes\" | \"no\"\n");
  CHECK(run(model + " --grammar " + gbnf + " --input " + yes).status == 0);
  CHECK(run(model + " --regex '[a-z]{2,3}' --input " + yes).status == 0);
  CHECK(run(model + " --regex '[0-9]+' --input " + yes).status == 1);

  auto r = run(model + " --grammar " + scratch("bad.gbnf", "root ::= undefined-rule\n"));
  CHECK(r.status == 2);
  CHECK(r.out.find("undefined-rule") != std::string::npos);
  r = run(model + " --schema " + scratch("bad.json", R"({"type": 5})"));
  CHECK(r.status == 2);
  r = run(model + " --regex '(unclosed'");
  CHECK(r.status == 2);
  r = run(model + " --schema " + scratch("bad2.json", R"({"type": 5})") + " --json");
  CHECK(r.status == 2);
  CHECK(nlohmann::json::parse(r.out)["compiled"] == false);
  CHECK(run(model).status == 2);  // no constraint given
}
