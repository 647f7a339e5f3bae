// Reasoning models: the <think> splitter fed one byte at a time and in two pieces split at
// every byte, for each parser and each way a prompt can leave the block (open, opened by the
// template, closed by it); the choice of parser from real chat templates and where their
// prompts leave the block (DeepSeek-R1-Distill, Qwen3 with and without enable_thinking, QwQ).
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

#include "engine/chat_template/chat_template.h"
#include "server/openai/reasoning.h"
#include "tests/support/testdata.h"

using namespace pagoda;
using namespace pagoda::server;

namespace {

struct Case {
  ReasoningFormat format;
  ReasoningStart start;
  std::string output;
  std::string reasoning, content;
};

const Case kCases[] = {
    {ReasoningFormat::Qwen3, ReasoningStart::Open, "<think>\nLet me see: 2+2.\n</think>\n\nIt is 4.",
     "\nLet me see: 2+2.\n", "It is 4."},
    {ReasoningFormat::Qwen3, ReasoningStart::Open, "  It is 4 <thin", "", "  It is 4 <thin"},
    {ReasoningFormat::Qwen3, ReasoningStart::Open, "<thinking>no", "", "<thinking>no"},
    {ReasoningFormat::Qwen3, ReasoningStart::Answer, "<think>a</think>b", "", "<think>a</think>b"},
    {ReasoningFormat::Qwen3, ReasoningStart::Thinking, "a < b </thin </think>\nok", "a < b </thin ", "ok"},
    {ReasoningFormat::DeepSeekR1, ReasoningStart::Thinking, "Hmm, 2+2.\n</think>\n\n4", "Hmm, 2+2.\n", "4"},
    {ReasoningFormat::DeepSeekR1, ReasoningStart::Open, "No tag at all</think>4", "No tag at all", "4"},
    {ReasoningFormat::DeepSeekR1, ReasoningStart::Open, "<think>x</think></think>", "x", "</think>"},
    {ReasoningFormat::DeepSeekR1, ReasoningStart::Thinking, "cut short </thi", "cut short </thi", ""},
    {ReasoningFormat::None, ReasoningStart::Thinking, "<think>a</think>b", "", "<think>a</think>b"},
};

ReasoningSplit run(const Case& c, const std::vector<std::string>& pieces) {
  ReasoningParser p(c.format, c.start);
  ReasoningSplit all;
  for (const std::string& piece : pieces) {
    ReasoningSplit s = p.feed(piece);
    all.reasoning += s.reasoning;
    all.content += s.content;
  }
  ReasoningSplit s = p.finish();
  all.reasoning += s.reasoning;
  all.content += s.content;
  return all;
}

std::string read_template(const std::string& name) {
  std::ifstream in(testing::testdata_path("chat-templates/templates/" + name));
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("reasoning: the split is the same however the output is cut", "[reasoning]") {
  for (const Case& c : kCases) {
    INFO(reasoning_format_name(c.format) << " start " << (int)c.start << " output: " << c.output);
    std::vector<std::string> bytes;
    for (char ch : c.output) bytes.push_back(std::string(1, ch));
    ReasoningSplit one = run(c, bytes);
    CHECK(one.reasoning == c.reasoning);
    CHECK(one.content == c.content);
    for (size_t k = 0; k <= c.output.size(); ++k) {
      INFO("split at " << k);
      ReasoningSplit two = run(c, {c.output.substr(0, k), c.output.substr(k)});
      CHECK(two.reasoning == c.reasoning);
      CHECK(two.content == c.content);
    }
  }
}

TEST_CASE("reasoning: nothing is held once it cannot be a tag", "[reasoning]") {
  ReasoningParser p(ReasoningFormat::Qwen3, ReasoningStart::Open);
  CHECK(p.feed("<th").content.empty());  // may open a block
  CHECK(p.feed("e").content == "<the");  // cannot
  ReasoningParser r(ReasoningFormat::DeepSeekR1, ReasoningStart::Thinking);
  CHECK(r.feed("abc</t").reasoning == "abc");
  CHECK(r.feed("x").reasoning == "</tx");
}

TEST_CASE("reasoning: where a prompt leaves the block", "[reasoning]") {
  CHECK(reasoning_start("<|im_start|>assistant\n") == ReasoningStart::Open);
  CHECK(reasoning_start("<|im_start|>assistant\n<think>\n") == ReasoningStart::Thinking);
  CHECK(reasoning_start("<|im_start|>assistant\n<think>\n\n</think>\n\n") == ReasoningStart::Answer);
  CHECK(reasoning_start("user: what is <think>? assistant:") == ReasoningStart::Open);
  CHECK(reasoning_start("") == ReasoningStart::Open);
}

TEST_CASE("reasoning: parser names and the auto choice", "[reasoning]") {
  CHECK(resolve_reasoning_format("qwen3", "") == ReasoningFormat::Qwen3);
  CHECK(resolve_reasoning_format("deepseek_r1", "") == ReasoningFormat::DeepSeekR1);
  CHECK(resolve_reasoning_format("none", "<think>") == ReasoningFormat::None);
  CHECK(resolve_reasoning_format("auto", "{{ '<|im_start|>' }}") == ReasoningFormat::None);
  CHECK_THROWS_AS(resolve_reasoning_format("r1", ""), std::invalid_argument);
  CHECK(reasoning_format_from_name("auto") == std::nullopt);
}

TEST_CASE("reasoning: real templates pick their parser and open or close the block",
          "[reasoning][testdata]") {
  if (!testing::testdata_available("chat-templates/templates")) return;
  struct Family {
    const char* file;
    ReasoningFormat format;
    ReasoningStart start;       // with the template's defaults
    ReasoningStart no_thinking; // with {"enable_thinking": false}
  };
  const Family families[] = {
      {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", ReasoningFormat::DeepSeekR1, ReasoningStart::Thinking,
       ReasoningStart::Thinking},
      {"Qwen-Qwen3-0.6B.jinja", ReasoningFormat::Qwen3, ReasoningStart::Open, ReasoningStart::Answer},
      {"Qwen-QwQ-32B.jinja", ReasoningFormat::Qwen3, ReasoningStart::Thinking, ReasoningStart::Thinking},
      {"Qwen-Qwen2.5-7B-Instruct.jinja", ReasoningFormat::None, ReasoningStart::Open, ReasoningStart::Open},
      {"ibm-granite-granite-3.3-2B-Instruct.jinja", ReasoningFormat::None, ReasoningStart::Open,
       ReasoningStart::Open},
      {"meta-llama-Llama-3.1-8B-Instruct.jinja", ReasoningFormat::None, ReasoningStart::Open, ReasoningStart::Open},
  };
  for (const Family& f : families) {
    INFO(f.file);
    const std::string source = read_template(f.file);
    CHECK(resolve_reasoning_format("auto", source) == f.format);
    ChatTemplate tmpl(source);
    ChatTemplate::Inputs in;
    in.messages = nlohmann::json::array({{{"role", "user"}, {"content", "What is 2+2?"}}});
    CHECK(reasoning_start(tmpl.render(in)) == f.start);
    in.variables = {{"enable_thinking", false}};
    CHECK(reasoning_start(tmpl.render(in)) == f.no_thinking);
  }
}
