// The tool-call parser: each model family's format, content around calls, malformed output left
// as content, and streaming: the same result whatever the chunking (split at every byte).
#include <catch2/catch.hpp>

#include <fstream>
#include <random>
#include <sstream>

#include "server/cli/server_config.h"
#include "server/openai/tool_calls.h"
#include "tests/support/testdata.h"

using namespace pagoda::server;

namespace {

struct Result {
  std::string content;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments
  bool operator==(const Result& o) const { return content == o.content && calls == o.calls; }
};

std::ostream& operator<<(std::ostream& os, const Result& r) {
  os << "content=[" << r.content << "]";
  for (auto& c : r.calls) os << " call " << c.first << " " << c.second;
  return os;
}

void add(Result& r, const ToolCallEvents& e) {
  r.content += e.content;
  for (auto& c : e.calls) r.calls.push_back({c.name, c.arguments});
}

Result whole(ToolCallFormat f, const std::string& text, std::set<std::string> names = {}) {
  Result r;
  add(r, parse_tool_calls(f, text, std::move(names)));
  return r;
}

// Feeds `text` in pieces cut at `cuts` (ascending byte positions).
Result chunked(ToolCallFormat f, const std::string& text, const std::vector<size_t>& cuts,
               std::set<std::string> names = {}) {
  ToolCallParser p(f, std::move(names));
  Result r;
  size_t at = 0;
  for (size_t c : cuts) {
    add(r, p.feed(text.substr(at, c - at)));
    at = c;
  }
  add(r, p.feed(text.substr(at)));
  add(r, p.finish());
  return r;
}

// Parses `text` whole, split in two at every byte, and one byte at a time; every way must give
// `expected`.
void check_all_splits(ToolCallFormat f, const std::string& text, const Result& expected,
                      std::set<std::string> names = {}) {
  INFO("text: " << text);
  CHECK(whole(f, text, names) == expected);
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    INFO("split at " << cut);
    REQUIRE(chunked(f, text, {cut}, names) == expected);
  }
  std::vector<size_t> every;
  for (size_t i = 1; i < text.size(); ++i) every.push_back(i);
  CHECK(chunked(f, text, every, names) == expected);
}

Result calls(std::vector<std::pair<std::string, std::string>> c, std::string content = "") {
  return Result{std::move(content), std::move(c)};
}
Result text_only(std::string s) { return Result{std::move(s), {}}; }

}  // namespace

TEST_CASE("tool-call format: names, detection from real chat templates", "[tool_calls][testdata]") {
  if (!pagoda::testing::testdata_available("chat-templates/templates")) return;
  CHECK(tool_call_format_from_name("hermes") == ToolCallFormat::Hermes);
  CHECK(tool_call_format_from_name("llama3") == ToolCallFormat::Llama3);
  CHECK(tool_call_format_from_name("mistral") == ToolCallFormat::Mistral);
  CHECK(tool_call_format_from_name("none") == ToolCallFormat::None);
  CHECK(!tool_call_format_from_name("auto"));
  CHECK(!tool_call_format_from_name("Hermes"));
  for (auto f : {ToolCallFormat::Hermes, ToolCallFormat::Llama3, ToolCallFormat::Mistral,
                 ToolCallFormat::None})
    CHECK(tool_call_format_from_name(tool_call_format_name(f)) == f);
  CHECK_THROWS_AS(resolve_tool_call_format("qwen", ""), std::invalid_argument);
  CHECK(resolve_tool_call_format("llama3", "<tool_call>") == ToolCallFormat::Llama3);

  auto detect = [](const std::string& file) {
    std::ifstream in(std::string(PAGODA_TESTDATA_DIR) + "/chat-templates/templates/" + file);
    REQUIRE(in.good());
    std::stringstream ss;
    ss << in.rdbuf();
    return resolve_tool_call_format("auto", ss.str());
  };
  CHECK(detect("NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja") == ToolCallFormat::Hermes);
  CHECK(detect("Qwen-Qwen2.5-7B-Instruct.jinja") == ToolCallFormat::Hermes);
  CHECK(detect("meta-llama-Llama-3.1-8B-Instruct.jinja") == ToolCallFormat::Llama3);
  CHECK(detect("meta-llama-Llama-3.2-3B-Instruct.jinja") == ToolCallFormat::Llama3);
  CHECK(detect("mistralai-Mistral-Nemo-Instruct-2407.jinja") == ToolCallFormat::Mistral);
  CHECK(detect("chatml.jinja") == ToolCallFormat::Hermes);  // the fallback
  CHECK(tool_call_markers(ToolCallFormat::Mistral) == std::vector<std::string>{"[TOOL_CALLS]"});
  CHECK(tool_call_markers(ToolCallFormat::Hermes) ==
        std::vector<std::string>{"<tool_call>", "</tool_call>"});
  CHECK(tool_call_markers(ToolCallFormat::None).empty());
}

TEST_CASE("hermes: one call, several calls, text around them", "[tool_calls]") {
  const auto H = ToolCallFormat::Hermes;
  check_all_splits(H, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call>",
                   calls({{"get_weather", R"({"city":"Paris","unit":"c"})"}}));
  // Key order is the model's, not sorted.
  check_all_splits(H, R"(<tool_call>{"name":"f","arguments":{"zeta":1,"alpha":[1,2]}}</tool_call>)",
                   calls({{"f", R"({"zeta":1,"alpha":[1,2]})"}}));
  check_all_splits(H,
                   "Let me look.\n\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n"
                   "<tool_call>\n{\"name\": \"b\", \"arguments\": {\"x\": \"</tool\"}}\n</tool_call>\n",
                   calls({{"a", "{}"}, {"b", R"({"x":"</tool"})"}}, "Let me look."));
  // Text after the calls is content too; whitespace around calls is formatting.
  check_all_splits(H, "<tool_call>{\"name\":\"a\",\"arguments\":{}}</tool_call>  \n Done.",
                   calls({{"a", "{}"}}, "Done."));
  // Arguments given as a JSON string, "parameters" for "arguments", missing arguments.
  check_all_splits(H, R"(<tool_call>{"name":"a","arguments":"{\"q\": 1}"}</tool_call>)",
                   calls({{"a", R"({"q":1})"}}));
  check_all_splits(H, R"(<tool_call>{"name":"a","parameters":{"q":2}}</tool_call>)",
                   calls({{"a", R"({"q":2})"}}));
  check_all_splits(H, R"(<tool_call>{"name":"now"}</tool_call>)", calls({{"now", "{}"}}));
  // An unclosed call at the end of the output still counts when its JSON is complete.
  check_all_splits(H, "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"k\": true}}\n",
                   calls({{"a", R"({"k":true})"}}));
  // UTF-8 in arguments passes through.
  check_all_splits(H, "<tool_call>{\"name\":\"a\",\"arguments\":{\"city\":\"Zürich 東京\"}}</tool_call>",
                   calls({{"a", "{\"city\":\"Zürich 東京\"}"}}));
}

TEST_CASE("hermes: what is not a call stays content, exactly", "[tool_calls]") {
  const auto H = ToolCallFormat::Hermes;
  for (std::string s : {
           std::string("plain answer, no calls"),
           std::string("  leading and trailing whitespace \n\n"),
           std::string("a < b and <tool but not a call <tool_cal"),
           std::string("<tool_call>{\"name\": \"a\", \"arguments\": {\"x\": 1}</tool_call>"),  // bad JSON
           std::string("<tool_call>{\"arguments\": {}}</tool_call>"),                         // no name
           std::string("<tool_call>{\"name\": 5}</tool_call>"),
           std::string("<tool_call>[1, 2]</tool_call>"),
           std::string("<tool_call>{\"name\": \"a\", \"arguments\": 7}</tool_call>"),
           std::string("<tool_call>{\"name\": \"a\", \"arguments\": {\"x\": 1}}"
                       "</tool_call> trailing"),  // a call: tested below, skipped here
           std::string("text <tool_call>{\"name\": \"a\", \"argu"),  // cut off mid-call
           std::string("<tool_call>"),
           std::string("</tool_call>"),
       }) {
    if (s.find("trailing") != std::string::npos) continue;
    check_all_splits(H, s, text_only(s));
  }
  // A bad call between good ones is content; the good ones are still calls.
  check_all_splits(H,
                   "<tool_call>{\"name\":\"a\"}</tool_call>\n<tool_call>{oops}</tool_call>\n"
                   "<tool_call>{\"name\":\"b\"}</tool_call>",
                   calls({{"a", "{}"}, {"b", "{}"}}, "<tool_call>{oops}</tool_call>"));
  // Deeply nested arguments are refused, not recursed into.
  std::string deep = "<tool_call>{\"name\":\"a\",\"arguments\":" + std::string(200, '[') +
                     std::string(200, ']') + "}</tool_call>";
  CHECK(whole(H, deep) == text_only(deep));
}

TEST_CASE("llama3: bare JSON, python_tag, several calls", "[tool_calls]") {
  const auto L = ToolCallFormat::Llama3;
  const std::set<std::string> names = {"get_weather", "search"};
  check_all_splits(L, R"({"name": "get_weather", "parameters": {"city": "Oslo"}})",
                   calls({{"get_weather", R"({"city":"Oslo"})"}}), names);
  check_all_splits(L, "\n  {\"name\": \"search\", \"parameters\": {\"q\": \"x\"}}; "
                      "{\"name\": \"get_weather\", \"parameters\": {}}\n",
                   calls({{"search", R"({"q":"x"})"}, {"get_weather", "{}"}}), names);
  check_all_splits(L, R"(<|python_tag|>{"name": "search", "arguments": {"q": "y"}})",
                   calls({{"search", R"({"q":"y"})"}}), names);
  // After an explicit marker any name is accepted.
  check_all_splits(L, R"(I will search.<|python_tag|>{"name": "other", "parameters": {}})",
                   calls({{"other", "{}"}}, "I will search."), names);
  // Bare JSON that is not a call of a known function is content.
  for (std::string s : {std::string(R"({"name": "Bob", "parameters": {}})"),
                        std::string(R"({"name": "search"})"),
                        std::string(R"({"city": "Oslo"})"), std::string("{}"),
                        std::string("{ not json at all"), std::string("plain text"),
                        std::string("Sure: {\"name\": \"search\", \"parameters\": {}}"),
                        std::string("<|python_tag|>brave_search.call(query=\"x\")")}) {
    check_all_splits(L, s, text_only(s), names);
  }
  // Text after a bare call is content.
  check_all_splits(L, "{\"name\": \"search\", \"parameters\": {}} and then some",
                   calls({{"search", "{}"}}, "and then some"), names);
}

TEST_CASE("mistral: [TOOL_CALLS] with a list of calls", "[tool_calls]") {
  const auto M = ToolCallFormat::Mistral;
  const std::set<std::string> names = {"get_weather"};
  check_all_splits(M,
                   R"([TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Rome"}}, {"name": "x", "arguments": {}, "id": "abcdefghi"}])",
                   calls({{"get_weather", R"({"city":"Rome"})"}, {"x", "{}"}}), names);
  check_all_splits(M, "Checking.[TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {}}]",
                   calls({{"a", "{}"}}, "Checking."), names);
  // The marker may be missing (a control token the detokenizer dropped): a bare list of calls
  // of known functions still counts.
  check_all_splits(M, R"( [{"name": "get_weather", "arguments": {"city": "Rome"}}])",
                   calls({{"get_weather", R"({"city":"Rome"})"}}), names);
  for (std::string s : {std::string("[1] First point. [2] Second."), std::string("[TOOL_CALLS]"),
                        std::string("[TOOL_CALLS] no json here"),
                        std::string(R"([TOOL_CALLS][{"name": "a", "arguments": {}})"),  // unclosed
                        std::string(R"([{"name": "unknown", "arguments": {}}])"), std::string("[]"),
                        std::string("[TOOL"), std::string("")}) {
    check_all_splits(M, s, text_only(s), names);
  }
}

TEST_CASE("tool-call parser: streaming releases text early and holds only possible markers",
          "[tool_calls]") {
  ToolCallParser p(ToolCallFormat::Hermes);
  CHECK(p.feed("Hello").content == "Hello");
  CHECK(p.feed(" wor").content == " wor");  // nothing there could open a call
  CHECK(p.feed("ld <tool").content == "ld");  // " <tool" may still become "<tool_call>"
  CHECK(p.feed("box>").content == " <toolbox>");
  ToolCallEvents e = p.feed("<tool_call>{\"name\": \"f\", \"arguments\": {}}");
  CHECK(e.empty());  // held until the call closes
  e = p.feed("</tool_call>");
  REQUIRE(e.calls.size() == 1);
  CHECK(e.calls[0].name == "f");
  CHECK(p.saw_calls());
  CHECK(p.finish().empty());

  // Llama 3 content that opens with a bracket but cannot be a call is released at once.
  ToolCallParser q(ToolCallFormat::Llama3, {"f"});
  CHECK(q.feed("{}").content == "{}");
  ToolCallParser r(ToolCallFormat::Mistral, {"f"});
  CHECK(r.feed("[1] a").content == "[1] a");
  // format None: everything is content.
  CHECK(whole(ToolCallFormat::None, "<tool_call>{\"name\":\"a\"}</tool_call>") ==
        text_only("<tool_call>{\"name\":\"a\"}</tool_call>"));
}

TEST_CASE("--tool-call-parser: flag, config key, choices", "[tool_calls]") {
  auto parse = [](std::vector<std::string> args) {
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    return parse_server_config((int)argv.size(), argv.data(), nullptr);
  };
  CHECK(parse({"serve"}).tool_call_parser == "auto");
  CHECK(parse({"serve", "--tool-call-parser", "mistral"}).tool_call_parser == "mistral");
  CHECK(parse({"serve", "--tool-call-parser=none"}).tool_call_parser == "none");
  CHECK_THROWS_AS(parse({"serve", "--tool-call-parser", "qwen"}), ConfigError);
  ServerConfig cfg;
  apply_config_json(R"({"tool_call_parser": "llama3"})", "test.json", cfg);
  CHECK(cfg.tool_call_parser == "llama3");
  CHECK_THROWS_AS(apply_config_json(R"({"tool_call_parser": "x"})", "test.json", cfg), ConfigError);
  CHECK(server_usage().find("--tool-call-parser") != std::string::npos);
  // Every accepted value resolves.
  for (const char* v : {"auto", "hermes", "llama3", "mistral", "none"})
    CHECK_NOTHROW(resolve_tool_call_format(v, ""));
}

TEST_CASE("tool-call parser: random outputs, random chunking", "[tool_calls]") {
  // Outputs stitched from fragments of every format: whatever the chunking, the streamed result
  // equals the whole-output result, and output with no call comes back byte for byte.
  const std::vector<std::string> parts = {
      "<tool_call>", "</tool_call>", "[TOOL_CALLS]", "<|python_tag|>", "<tool", "[TOOL", "{", "}",
      "[", "]", "\"name\"", "\"arguments\"", "\"parameters\"", ": ", "\"f\"", "\"g\"", ", ", ";",
      " ", "\n", "text", "\"x\\\"}\"", "{\"name\": \"f\", \"arguments\": {\"a\": 1}}", "é"};
  std::mt19937 rng(1234);
  for (auto f : {ToolCallFormat::Hermes, ToolCallFormat::Llama3, ToolCallFormat::Mistral}) {
    for (int iter = 0; iter < 3000; ++iter) {
      std::string text;
      int n = 1 + (int)(rng() % 12);
      for (int i = 0; i < n; ++i) text += parts[rng() % parts.size()];
      const std::set<std::string> names = {"f"};
      Result expected = whole(f, text, names);
      std::vector<size_t> cuts;
      for (size_t i = 1; i < text.size(); ++i)
        if (rng() % 3 == 0) cuts.push_back(i);
      INFO("format " << tool_call_format_name(f) << " text: " << text);
      REQUIRE(chunked(f, text, cuts, names) == expected);
      if (expected.calls.empty()) REQUIRE(expected.content == text);
      for (auto& c : expected.calls) REQUIRE(nlohmann::json::parse(c.second).is_object());
    }
  }
}
