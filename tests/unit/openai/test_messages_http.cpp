// Anthropic's Messages API over real loopback HTTP with the FakeEngine playing scripted model
// output: the message field by field and the prompt its blocks make (system, tool_use,
// tool_result with is_error), the event stream (order, indexes, `event:` names) folded as
// Anthropic's SDK folds it == the gathered message, thinking blocks through the reasoning
// parser, every stop_reason, tool_choice any / tool through the structured-output engine,
// none, disable_parallel_tool_use, count_tokens, x-api-key, and refusals in Anthropic's
// error shape (handlers' and the transport's alike).
#include <catch2/catch.hpp>

#include "tests/unit/openai/fake_chat_server.h"
#include "server/openai/messages_parse.h"

using namespace pagoda;
using namespace pagoda::testing;
using json = nlohmann::json;

namespace {

server::Handlers::Options options(server::ReasoningFormat reasoning = server::ReasoningFormat::None) {
  server::Handlers::Options ho;
  ho.reasoning_format = reasoning;
  return ho;
}

const json kWeather = json::parse(R"([{"name": "get_weather", "description": "Weather in a city",
  "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}])");

const char* kCall = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";

json request(json extra) {
  json r = {{"model", "fake-model"}, {"max_tokens", 200}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}}};
  for (auto& [k, v] : extra.items()) r[k] = v;
  return r;
}

// The message a stream amounts to, folded as Anthropic's SDK folds the events; checks their
// order and indexes on the way.
json fold_stream(const std::vector<TypedEvent>& events) {
  REQUIRE(events.size() >= 4);
  CHECK(events[0].name == "message_start");
  CHECK(events[1].name == "ping");
  CHECK(events[events.size() - 2].name == "message_delta");
  CHECK(events.back().name == "message_stop");
  json msg = events[0].data["message"];
  CHECK(msg["content"] == json::array());
  CHECK(msg["stop_reason"].is_null());
  std::vector<std::string> partial_json;
  bool open = false;
  for (const TypedEvent& e : events) {
    CHECK(e.name == e.data["type"]);
    if (e.name == "content_block_start") {
      CHECK_FALSE(open);
      open = true;
      CHECK(e.data["index"] == msg["content"].size());
      msg["content"].push_back(e.data["content_block"]);
      partial_json.emplace_back();
    } else if (e.name == "content_block_delta") {
      REQUIRE(open);
      REQUIRE(e.data["index"] == msg["content"].size() - 1);
      json& block = msg["content"].back();
      const json& d = e.data["delta"];
      if (d["type"] == "text_delta") {
        CHECK(block["type"] == "text");
        block["text"] = block["text"].get<std::string>() + d["text"].get<std::string>();
      } else if (d["type"] == "thinking_delta") {
        CHECK(block["type"] == "thinking");
        block["thinking"] = block["thinking"].get<std::string>() + d["thinking"].get<std::string>();
      } else {
        CHECK(d["type"] == "input_json_delta");
        CHECK(block["type"] == "tool_use");
        partial_json.back() += d["partial_json"].get<std::string>();
      }
    } else if (e.name == "content_block_stop") {
      CHECK(open);
      open = false;
      CHECK(e.data["index"] == msg["content"].size() - 1);
      if (msg["content"].back()["type"] == "tool_use") msg["content"].back()["input"] = json::parse(partial_json.back());
    } else if (e.name == "message_delta") {
      CHECK_FALSE(open);
      msg["stop_reason"] = e.data["delta"]["stop_reason"];
      msg["stop_sequence"] = e.data["delta"]["stop_sequence"];
      for (auto& [k, v] : e.data["usage"].items()) msg["usage"][k] = v;
    }
  }
  return msg;
}

void check_anthropic_error(const HttpResult& r, int status, const std::string& type) {
  INFO(r.body);
  CHECK(r.status == status);
  json j = json::parse(r.body, nullptr, false);
  REQUIRE(j.is_object());
  CHECK(j["type"] == "error");
  CHECK(j["error"]["type"] == type);
  CHECK(j["error"]["message"].is_string());
  CHECK_FALSE(j.contains("param"));
}

}  // namespace

TEST_CASE("messages: the message field by field, and the prompt its blocks make", "[messages][server]") {
  FakeChatServer s(options());
  s.script("Hello there.");
  json messages = json::parse(R"([
    {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
    {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "x"},
      {"type": "text", "text": "Checking."},
      {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "21 C"},
      {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": true,
       "content": [{"type": "text", "text": "timeout"}]},
      {"type": "text", "text": "Thanks"}]}])");
  auto r = s.post("/v1/messages", {{"model", "fake-model"}, {"max_tokens", 50}, {"tools", kWeather},
                                   {"system", {{{"type", "text"}, {"text", "Be brief."}}, {{"type", "text"}, {"text", "Be kind."}}}},
                                   {"messages", messages}, {"metadata", {{"user_id", "u1"}}},
                                   {"temperature", 0.5}, {"top_p", 0.9}, {"top_k", 5}});
  INFO(r.body);
  REQUIRE(r.status == 200);
  json j = r.j();
  CHECK(j["id"].get<std::string>().rfind("msg_", 0) == 0);
  CHECK(r.headers.find("X-Request-Id")->second == j["id"]);
  CHECK(j["type"] == "message");
  CHECK(j["role"] == "assistant");
  CHECK(j["model"] == "fake-model");
  CHECK(j["content"] == json::array({{{"type", "text"}, {"text", "Hello there."}}}));
  CHECK(j["stop_reason"] == "end_turn");
  CHECK(j["stop_sequence"].is_null());
  const std::string prompt = s.last_prompt_text();
  CHECK(prompt ==
        "system: Be brief.\nBe kind.\nuser: Weather in Paris?\n"
        "assistant: Checking. calls [{\"id\":\"toolu_1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
        "\"arguments\":{\"city\":\"Paris\"}}}]\n"
        "tool: 21 C for toolu_1\ntool: Error: timeout for toolu_2\nuser: Thanks\nassistant:");
  const json u = j["usage"];
  CHECK(u["input_tokens"].get<int>() + u["cache_read_input_tokens"].get<int>() == (int)prompt.size() + 1);  // + BOS
  CHECK(u["cache_creation_input_tokens"] == 0);
  CHECK(u["output_tokens"] == 12);
  // count_tokens counts the same prompt.
  auto count = s.post("/v1/messages/count_tokens", {{"model", "fake-model"}, {"tools", kWeather},
                                                    {"system", {{{"type", "text"}, {"text", "Be brief."}}, {{"type", "text"}, {"text", "Be kind."}}}},
                                                    {"messages", messages}});
  INFO(count.body);
  REQUIRE(count.status == 200);
  CHECK(count.j() == json({{"input_tokens", prompt.size() + 1}}));
}

TEST_CASE("messages: streamed events fold into the gathered message", "[messages][server]") {
  FakeChatServer s(options(server::ReasoningFormat::Qwen3));
  s.script(std::string("<think>Check.</think>\nSure. ") + kCall);
  json req = request({{"tools", kWeather}});
  auto gathered = s.post("/v1/messages", req);
  INFO(gathered.body);
  REQUIRE(gathered.status == 200);
  req["stream"] = true;
  auto r = s.post("/v1/messages", req);
  INFO(r.body);
  REQUIRE(r.status == 200);
  CHECK(r.headers.find("Content-Type")->second.find("text/event-stream") == 0);
  const std::vector<TypedEvent> events = typed_sse_events(r.body);
  std::vector<std::string> folded;  // repeats of a delta event folded into one
  for (const TypedEvent& e : events)
    if (folded.empty() || folded.back() != e.name || e.name != "content_block_delta") folded.push_back(e.name);
  const std::vector<std::string> expected = {
      "message_start", "ping",
      "content_block_start", "content_block_delta", "content_block_stop",
      "content_block_start", "content_block_delta", "content_block_stop",
      "content_block_start", "content_block_delta", "content_block_stop",
      "message_delta", "message_stop"};
  CHECK(folded == expected);
  json streamed = fold_stream(events);
  json g = gathered.j();
  REQUIRE(g["content"].size() == 3);
  CHECK(g["content"][0] == json({{"type", "thinking"}, {"thinking", "Check."}, {"signature", ""}}));
  CHECK(g["content"][1] == json({{"type", "text"}, {"text", "Sure."}}));
  CHECK(g["content"][2]["type"] == "tool_use");
  CHECK(g["content"][2]["name"] == "get_weather");
  CHECK(g["content"][2]["input"] == json({{"city", "Paris"}}));
  CHECK(g["stop_reason"] == "tool_use");
  // Same blocks and usage; only the ids differ.
  for (json* m : {&streamed, &g}) {
    m->erase("id");
    (*m)["content"][2].erase("id");
    (*m)["usage"].erase("cache_read_input_tokens");
    (*m)["usage"].erase("input_tokens");
  }
  CHECK(streamed == g);
}

TEST_CASE("messages: stop_reason max_tokens and stop_sequence", "[messages][server]") {
  FakeChatServer s(options());
  s.script("A long answer that goes on.");
  auto cut = s.post("/v1/messages", request({{"max_tokens", 4}}));
  INFO(cut.body);
  REQUIRE(cut.status == 200);
  CHECK(cut.j()["stop_reason"] == "max_tokens");
  CHECK(cut.j()["content"][0]["text"] == "A lo");
  CHECK(cut.j()["usage"]["output_tokens"] == 4);
  // A stop sequence inside one scripted token: the text before it, then "stop".
  s.engine.set_script({{'O', "One"}, {'x', " two END three"}, {'y', "never"}});
  auto stopped = s.post("/v1/messages", request({{"stop_sequences", {"ZZZ", "END"}}}));
  INFO(stopped.body);
  REQUIRE(stopped.status == 200);
  CHECK(stopped.j()["stop_reason"] == "stop_sequence");
  CHECK(stopped.j()["stop_sequence"] == "END");
  CHECK(stopped.j()["content"][0]["text"] == "One two ");
  auto st = s.post("/v1/messages", request({{"stop_sequences", {"END"}}, {"stream", true}}));
  json folded = fold_stream(typed_sse_events(st.body));
  CHECK(folded["stop_reason"] == "stop_sequence");
  CHECK(folded["stop_sequence"] == "END");
}

TEST_CASE("messages: tool_choice through the structured-output engine", "[messages][server]") {
  FakeChatServer s(options());
  s.script(kCall);
  const size_t before = s.engine.constraints().size();
  auto any = s.post("/v1/messages", request({{"tools", kWeather}, {"tool_choice", {{"type", "any"}}}}));
  INFO(any.body);
  REQUIRE(any.status == 200);
  CHECK(any.j()["stop_reason"] == "tool_use");
  REQUIRE(s.engine.constraints().size() == before + 1);
  auto named = s.post("/v1/messages", request({{"tools", kWeather}, {"tool_choice", {{"type", "tool"}, {"name", "get_weather"}}}}));
  REQUIRE(named.status == 200);
  REQUIRE(s.engine.constraints().size() == before + 2);
  CHECK(s.engine.constraints().back().source.find("get_weather") != std::string::npos);
  auto unknown = s.post("/v1/messages", request({{"tools", kWeather}, {"tool_choice", {{"type", "tool"}, {"name", "nope"}}}}));
  check_anthropic_error(unknown, 400, "invalid_request_error");
  // auto leaves decoding free; none does not read calls at all.
  auto automatic = s.post("/v1/messages", request({{"tools", kWeather}, {"tool_choice", {{"type", "auto"}}}}));
  REQUIRE(automatic.status == 200);
  CHECK(automatic.j()["stop_reason"] == "tool_use");
  CHECK(s.engine.constraints().size() == before + 2);
  auto none = s.post("/v1/messages", request({{"tools", kWeather}, {"tool_choice", {{"type", "none"}}}}));
  REQUIRE(none.status == 200);
  CHECK(none.j()["stop_reason"] == "end_turn");
  CHECK(none.j()["content"][0]["text"] == kCall);
  // disable_parallel_tool_use: the first call only.
  s.script(std::string(kCall) + "\n" + kCall);
  auto two = s.post("/v1/messages", request({{"tools", kWeather}}));
  REQUIRE(two.status == 200);
  CHECK(two.j()["content"].size() == 2);
  auto one = s.post("/v1/messages", request({{"tools", kWeather}, {"tool_choice", {{"type", "auto"}, {"disable_parallel_tool_use", true}}}}));
  INFO(one.body);
  REQUIRE(one.status == 200);
  CHECK(one.j()["content"].size() == 1);
  CHECK(one.j()["stop_reason"] == "tool_use");
}

TEST_CASE("messages: thinking enabled / disabled reaches the template", "[messages][server]") {
  FakeChatServer s(options(server::ReasoningFormat::Qwen3));
  s.script("Plain.");
  auto off = s.post("/v1/messages", request({{"thinking", {{"type", "disabled"}}}}));
  INFO(off.body);
  REQUIRE(off.status == 200);
  CHECK(s.last_prompt_text() == "user: Hi\nassistant:<think>\n\n</think>\n\n");
  CHECK(off.j()["content"] == json::array({{{"type", "text"}, {"text", "Plain."}}}));
  s.script("Thought.</think>Answer.");
  auto on = s.post("/v1/messages", request({{"thinking", {{"type", "enabled"}, {"budget_tokens", 1024}}},
                                            {"chat_template_kwargs", {{"prompt_opens", true}}}}));
  INFO(on.body);
  REQUIRE(on.status == 200);
  CHECK(on.j()["content"][0] == json({{"type", "thinking"}, {"thinking", "Thought."}, {"signature", ""}}));
  CHECK(on.j()["content"][1] == json({{"type", "text"}, {"text", "Answer."}}));
}

TEST_CASE("messages: refusals in Anthropic's error shape", "[messages][server]") {
  FakeChatServer s(options());
  s.script("x");
  const json bad[] = {
      {{"model", "fake-model"}, {"messages", {{{"role", "user"}, {"content", "x"}}}}},  // no max_tokens
      request({{"messages", nullptr}}),
      request({{"messages", json::array()}}),
      request({{"messages", {{{"role", "system"}, {"content", "x"}}}}}),
      request({{"messages", {{{"role", "user"}, {"content", {{{"type", "image"}, {"source", {{"type", "base64"}}}}}}}}}}),
      request({{"messages", {{{"role", "user"}, {"content", {{{"type", "tool_use"}, {"id", "a"}, {"name", "f"}}}}}}}}),
      request({{"tools", {{{"type", "web_search_20250305"}, {"name", "web_search"}}}}}),
      request({{"tools", {{{"name", "f"}}}}}),
      request({{"tool_choice", {{"type", "sometimes"}}}}),
      request({{"tool_choice", {{"type", "any"}}}}),  // no tools
      request({{"thinking", {{"type", "maybe"}}}}),
      request({{"stop_sequences", "END"}}),
      request({{"max_tokens", 0}}),
      request({{"temperature", -1}}),
      request({{"metadata", "x"}}),
  };
  for (const json& b : bad) {
    INFO(b.dump());
    check_anthropic_error(s.post("/v1/messages", b), 400, "invalid_request_error");
  }
  auto image = s.post("/v1/messages", bad[4]);
  CHECK(image.j()["error"]["message"].get<std::string>().find("text-only") != std::string::npos);
  check_anthropic_error(s.post("/v1/messages", request({{"model", "claude-x"}})), 404, "not_found_error");
  check_anthropic_error(http_post(s.port, "/v1/messages", std::string("{not json")), 400, "invalid_request_error");
  check_anthropic_error(s.post("/v1/messages/batches", json::object()), 404, "not_found_error");
  check_anthropic_error(s.post("/v1/messages/count_tokens", {{"model", "fake-model"}}), 400, "invalid_request_error");
  // Other routes keep OpenAI's shape.
  auto openai = s.post("/v1/chat/completions", json::object());
  CHECK(openai.status == 400);
  CHECK(openai.j()["error"]["param"] == "messages");
}

TEST_CASE("messages: a request that fails while streaming ends with an error event", "[messages][server]") {
  server::Handlers::Options ho = options();
  ho.timeout_s = 0.3;
  FakeChatServer s(ho);
  s.script("never sent");
  s.engine.pause(true);  // a stalled engine: the request times out
  auto r = s.post("/v1/messages", request({{"stream", true}}));
  s.engine.pause(false);
  INFO(r.body);
  REQUIRE(r.status == 200);  // the status line went out before the failure
  auto events = typed_sse_events(r.body);
  REQUIRE(events.size() == 3);
  CHECK(events[0].name == "message_start");
  CHECK(events[1].name == "ping");
  CHECK(events[2].name == "error");
  CHECK(events[2].data["type"] == "error");
  CHECK(events[2].data["error"]["type"] == "timeout_error");
}

TEST_CASE("messages: x-api-key is accepted beside Bearer", "[messages][server]") {
  FakeChatServer s(options(), nullptr, "sekret");
  s.script("ok");
  const std::string body = request({}).dump();
  const int port = s.port;
  auto post = [&](const std::string& headers) { return http_post_raw(port, "/v1/messages", headers, body); };
  CHECK(post("x-api-key: sekret\r\nanthropic-version: 2023-06-01\r\n").status == 200);
  CHECK(post("Authorization: Bearer sekret\r\n").status == 200);
  check_anthropic_error(post(""), 401, "authentication_error");
  check_anthropic_error(post("x-api-key: wrong\r\n"), 401, "authentication_error");
  check_anthropic_error(post("x-api-key: sekret\r\nx-api-key: sekret\r\n"), 401, "authentication_error");
  // Any route takes either header; OpenAI's routes answer in OpenAI's shape.
  CHECK(http_post_raw(port, "/v1/embeddings", "x-api-key: sekret\r\n", R"({"input": "x"})").status != 401);
  auto openai = http_post_raw(port, "/v1/embeddings", "", R"({"input": "x"})");
  CHECK(openai.status == 401);
  CHECK(openai.j()["error"]["type"] == "authentication_error");
}

TEST_CASE("messages: request parsing maps Anthropic's fields onto chat's", "[messages]") {
  using server::parse_messages_request;
  auto r = parse_messages_request(server::RequestJson::parse(R"({"model": "m", "max_tokens": 7, "stop_sequences": ["a", "b"],
    "temperature": 0.2, "top_p": 0.5, "top_k": 3, "metadata": {"user_id": "u"}, "stream": true,
    "messages": [{"role": "user", "content": "q"}],
    "tools": [{"name": "f", "input_schema": {"type": "object"}}], "tool_choice": {"type": "tool", "name": "f"}})"));
  const server::CommonRequest& c = r.chat.common;
  CHECK(c.model == "m");
  CHECK(*c.max_tokens == 7);
  CHECK(c.stop.stop == std::vector<std::string>{"a", "b"});
  CHECK(c.sampling.temperature == Approx(0.2));
  CHECK(c.sampling.top_p == Approx(0.5));
  CHECK(c.sampling.top_k == 3);
  CHECK(c.user == "u");
  CHECK(c.stream);
  CHECK(r.chat.tool_choice.mode == server::ToolChoice::Mode::Function);
  CHECK(r.chat.tool_choice.function == "f");
  CHECK(r.chat.tools[0]["function"]["parameters"] == server::RequestJson({{"type", "object"}}));
  CHECK_FALSE(r.single_tool_call);
  // count_tokens needs no max_tokens; a stop_sequences refusal names the Anthropic field.
  CHECK_NOTHROW(parse_messages_request(server::RequestJson::parse(R"({"messages": [{"role": "user", "content": "q"}]})"), true));
  try {
    parse_messages_request(server::RequestJson::parse(R"({"max_tokens": 1, "stop_sequences": [3], "messages": [{"role": "user", "content": "q"}]})"));
    FAIL("accepted");
  } catch (const server::ApiError& e) {
    CHECK(e.param == "stop_sequences[0]");
  }
}
