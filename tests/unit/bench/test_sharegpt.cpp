// ShareGPT files as a workload: first human turns as prompts, reply lengths as max_tokens.
#include <catch2/catch.hpp>

#include "server/bench/sharegpt.h"

using namespace pagoda::bench;

TEST_CASE("ShareGPT conversations give prompts and reply lengths", "[bench]") {
  const std::string text = R"([
    {"id": "a", "conversations": [{"from": "human", "value": "Tell me a story."},
                                  {"from": "gpt", "value": "Once upon a time there was a cat."},
                                  {"from": "human", "value": "Another?"},
                                  {"from": "gpt", "value": "No."}]},
    {"id": "b", "conversations": [{"from": "gpt", "value": "Hello!"},
                                  {"from": "human", "value": "Hi"},
                                  {"from": "gpt", "value": "ok"}]},
    {"id": "c", "conversations": [{"from": "human", "value": "unanswered"}]},
    {"id": "d"},
    "junk"
  ])";
  const auto p = parse_sharegpt(text, "f.json");
  REQUIRE(p.size() == 2);
  CHECK(p[0].user == "Tell me a story.");
  CHECK(p[0].max_tokens == 33 / 4);
  CHECK(p[1].user == "Hi");
  CHECK(p[1].max_tokens == 1);  // "ok": at least one token

  auto error_of = [](const std::string& t) {
    try {
      parse_sharegpt(t, "f.json");
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(error_of("{\"a\": 1}").find("not a ShareGPT file") != std::string::npos);
  CHECK(error_of("[{\"conversations\": []}]").find("no conversation") != std::string::npos);
  CHECK_THROWS_AS(read_sharegpt("/nonexistent/sharegpt.json"), std::runtime_error);
}
