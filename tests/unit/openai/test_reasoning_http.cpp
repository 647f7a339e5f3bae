// Reasoning over real loopback HTTP with the FakeEngine playing the model: for each parser, the
// scripted output cut into two deltas at every byte, gathered (message.reasoning_content) and
// streamed (delta.reasoning_content before delta.content) alike; tool calls read after the
// block; chat_template_kwargs reaching the template; reasoning_effort accepted; constraints
// that wait for the block's end; the real DeepSeek-R1-Distill and Qwen3 templates.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

#include "engine/chat_template/chat_template.h"
#include "tests/support/testdata.h"
#include "tests/unit/openai/fake_chat_server.h"

using namespace pagoda;
using namespace pagoda::testing;
using json = nlohmann::json;

namespace {

server::Handlers::Options with_parser(server::ReasoningFormat f) {
  server::Handlers::Options ho;
  ho.reasoning_format = f;
  return ho;
}

json chat(json extra = json::object()) {
  json req = {{"model", "fake-model"}, {"messages", {{{"role", "user"}, {"content", "What is 2+2?"}}}}};
  for (auto& [k, v] : extra.items()) req[k] = v;
  return req;
}

struct Answer {
  std::string reasoning, content;
  json tool_calls = json::array();
};

Answer gathered(const HttpResult& r) {
  INFO(r.body);
  REQUIRE(r.status == 200);
  const json m = r.j()["choices"][0]["message"];
  Answer a;
  if (m.contains("reasoning_content")) a.reasoning = m["reasoning_content"];
  if (m["content"].is_string()) a.content = m["content"];
  if (m.contains("tool_calls"))
    for (const json& c : m["tool_calls"]) a.tool_calls.push_back(c["function"]);
  return a;
}

Answer streamed(const HttpResult& r) {
  INFO(r.body);
  REQUIRE(r.status == 200);
  Answer a;
  for (const std::string& e : sse_events(r.body)) {
    if (e == "[DONE]") continue;
    const json chunk = json::parse(e);
    for (const json& c : chunk["choices"]) {
      const json& d = c["delta"];
      if (d.contains("reasoning_content")) {
        CHECK(a.content.empty());  // the block comes first
        a.reasoning += d["reasoning_content"].get<std::string>();
      }
      if (d.contains("content") && d["content"].is_string()) a.content += d["content"].get<std::string>();
      for (const json& tc : d.value("tool_calls", json::array())) {
        if (tc.contains("id")) a.tool_calls.push_back({{"name", tc["function"]["name"]}, {"arguments", ""}});
        else a.tool_calls.back()["arguments"] = a.tool_calls.back()["arguments"].get<std::string>() +
                                                tc["function"]["arguments"].get<std::string>();
      }
    }
  }
  return a;
}

struct Case {
  server::ReasoningFormat format;
  json extra;  // request fields (chat_template_kwargs, tools)
  std::string output;
  std::string reasoning, content;
  size_t calls = 0;
};

const json kTools = json::parse(R"([{"type": "function", "function": {"name": "get_weather",
  "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])");

}  // namespace

TEST_CASE("reasoning over HTTP: every byte split, gathered and streamed", "[reasoning][server]") {
  const Case cases[] = {
      {server::ReasoningFormat::Qwen3, json::object(), "<think>\nPlan.\n</think>\n\nIt is 4.", "\nPlan.\n", "It is 4."},
      {server::ReasoningFormat::DeepSeekR1, {{"chat_template_kwargs", {{"prompt_opens", true}}}},
       "Plan: add.</think>\n4", "Plan: add.", "4"},
      {server::ReasoningFormat::Qwen3, {{"chat_template_kwargs", {{"enable_thinking", false}}}},
       "<think>x</think>y", "", "<think>x</think>y"},
      {server::ReasoningFormat::Qwen3, {{"tools", kTools}},
       "<think>Call it.</think>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
       "Call it.", "", 1},
  };
  for (const Case& c : cases) {
    FakeChatServer s(with_parser(c.format));
    INFO(c.output);
    for (size_t k = 0; k <= c.output.size(); ++k) {
      INFO("split at " << k);
      std::vector<FakeEngine::ScriptToken> two;
      for (std::string piece : {c.output.substr(0, k), c.output.substr(k)})
        if (!piece.empty()) two.push_back({'x', piece});
      s.engine.set_script(two);
      for (bool stream : {false, true}) {
        json req = chat(c.extra);
        req["stream"] = stream;
        Answer a = stream ? streamed(s.post("/v1/chat/completions", req)) : gathered(s.post("/v1/chat/completions", req));
        CHECK(a.reasoning == c.reasoning);
        CHECK(a.content == c.content);
        REQUIRE(a.tool_calls.size() == c.calls);
        if (c.calls) CHECK(a.tool_calls[0] == json({{"name", "get_weather"}, {"arguments", R"({"city":"Paris"})"}}));
      }
    }
  }
}

TEST_CASE("reasoning over HTTP: no parser, no reasoning_content", "[reasoning][server]") {
  FakeChatServer s(with_parser(server::ReasoningFormat::None));
  s.script("<think>a</think>b");
  auto r = s.post("/v1/chat/completions", chat());
  REQUIRE(r.status == 200);
  CHECK(!r.j()["choices"][0]["message"].contains("reasoning_content"));
  CHECK(r.j()["choices"][0]["message"]["content"] == "<think>a</think>b");
}

TEST_CASE("reasoning over HTTP: reasoning_effort and chat_template_kwargs are checked", "[reasoning][server]") {
  FakeChatServer s(with_parser(server::ReasoningFormat::Qwen3));
  s.script("ok");
  CHECK(s.post("/v1/chat/completions", chat({{"reasoning_effort", "low"}})).status == 200);
  auto bad = s.post("/v1/chat/completions", chat({{"reasoning_effort", "max"}}));
  CHECK(bad.status == 400);
  CHECK(bad.j()["error"]["param"] == "reasoning_effort");
  auto kw = s.post("/v1/chat/completions", chat({{"chat_template_kwargs", "enable_thinking"}}));
  CHECK(kw.status == 400);
  CHECK(kw.j()["error"]["param"] == "chat_template_kwargs");
}

TEST_CASE("reasoning over HTTP: a constraint waits for the end of the block", "[reasoning][server]") {
  struct Expect {
    server::ReasoningFormat format;
    json kwargs;
    std::string start, end;  // the constraint's reasoning_start / reasoning_end
  };
  const Expect cases[] = {
      {server::ReasoningFormat::Qwen3, json::object(), "<think>", "</think>"},  // the model may think
      {server::ReasoningFormat::Qwen3, {{"prompt_opens", true}}, "", "</think>"},
      {server::ReasoningFormat::Qwen3, {{"enable_thinking", false}}, "", ""},
      {server::ReasoningFormat::DeepSeekR1, json::object(), "", "</think>"},
      {server::ReasoningFormat::None, json::object(), "", ""},
  };
  for (const Expect& e : cases) {
    INFO(server::reasoning_format_name(e.format) << " " << e.kwargs.dump());
    FakeChatServer s(with_parser(e.format));
    s.script("{}");
    for (const json& extra : {json{{"response_format", {{"type", "json_object"}}}},
                              json{{"tools", kTools}, {"tool_choice", "required"}}}) {
      json req = chat(extra);
      req["chat_template_kwargs"] = e.kwargs;
      REQUIRE(s.post("/v1/chat/completions", req).status == 200);
      const OutputConstraint c = s.engine.constraints().back();
      CHECK(c.reasoning_start == e.start);
      CHECK(c.reasoning_end == e.end);
    }
    CHECK(s.engine.constraints().back().prefix == "<tool_call>\n");  // the call's markers stay
  }
}

TEST_CASE("reasoning over HTTP: the real DeepSeek-R1-Distill and Qwen3 templates",
          "[reasoning][server][testdata]") {
  if (!testing::testdata_available("chat-templates/templates")) return;
  struct Family {
    const char* file;
    json kwargs;
    std::string output, reasoning, content;
  };
  const Family families[] = {
      // R1's template opens <think> in the prompt: the output starts inside the block.
      {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", json::object(), "Add them.\n</think>\n\n4", "Add them.\n", "4"},
      {"Qwen-Qwen3-0.6B.jinja", json::object(), "<think>\nAdd them.\n</think>\n\n4", "\nAdd them.\n", "4"},
      // enable_thinking false: the template closes an empty block; the output is the answer.
      {"Qwen-Qwen3-0.6B.jinja", {{"enable_thinking", false}}, "4 <think>", "", "4 <think>"},
  };
  for (const Family& f : families) {
    INFO(f.file << " " << f.kwargs.dump());
    std::ifstream in(testing::testdata_path(std::string("chat-templates/templates/") + f.file));
    REQUIRE(in.good());
    std::stringstream src;
    src << in.rdbuf();
    auto tmpl = std::make_shared<ChatTemplate>(src.str());
    auto render = [tmpl](const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools, bool add_gen,
                         const nlohmann::ordered_json& vars) {
      ChatTemplate::Inputs ti;
      ti.messages_ordered = messages;
      ti.tools_ordered = tools;
      ti.add_generation_prompt = add_gen;
      if (vars.is_object()) ti.variables = vars;
      return tmpl->render(ti);
    };
    FakeChatServer s(with_parser(server::resolve_reasoning_format("auto", src.str())), render);
    s.script(f.output);
    for (bool stream : {false, true}) {
      json req = chat({{"chat_template_kwargs", f.kwargs}, {"stream", stream}});
      Answer a = stream ? streamed(s.post("/v1/chat/completions", req)) : gathered(s.post("/v1/chat/completions", req));
      CHECK(a.reasoning == f.reasoning);
      CHECK(a.content == f.content);
    }
  }
}
