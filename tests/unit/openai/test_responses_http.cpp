// The Responses API over real loopback HTTP with the FakeEngine playing scripted model output:
// the response object and its items field by field, the typed event stream (order, sequence
// numbers, `event:` names) and its agreement with the gathered answer, reasoning items, a
// function tool round trip through previous_response_id, GET / DELETE and their 404s, the
// store's bound, text.format through the structured-output path, and refusals naming the
// Responses field.
#include <catch2/catch.hpp>

#include "tests/support/responses_shape.h"
#include "tests/unit/openai/fake_chat_server.h"

using namespace pagoda;
using namespace pagoda::testing;
using json = nlohmann::json;

namespace {

server::Handlers::Options options(server::ReasoningFormat reasoning = server::ReasoningFormat::None,
                                  size_t store_count = 1000) {
  server::Handlers::Options ho;
  ho.reasoning_format = reasoning;
  ho.responses_store_count = store_count;
  return ho;
}

// What differs between two runs of the same request: ids and times.
json without_ids(json r) {
  r.erase("id");
  r.erase("created_at");
  for (json& item : r["output"]) {
    item.erase("id");
    item.erase("call_id");
  }
  return r;
}

const json kWeather = json::parse(R"([{"type": "function", "name": "get_weather", "description": "Weather in a city",
  "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}])");

const char* kCall = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";

}  // namespace

TEST_CASE("responses: the response object field by field", "[responses][server]") {
  FakeChatServer s(options());
  s.script("Hello there.");
  auto r = s.post("/v1/responses", {{"model", "fake-model"}, {"input", "Hi"}, {"instructions", "Be brief."},
                                    {"temperature", 0}, {"max_output_tokens", 50}, {"metadata", {{"k", "v"}}}});
  INFO(r.body);
  REQUIRE(r.status == 200);
  json j = r.j();
  check_response_object(j, "fake-model");
  CHECK(j["status"] == "completed");
  CHECK(j["incomplete_details"].is_null());
  CHECK(j["instructions"] == "Be brief.");
  CHECK(j["max_output_tokens"] == 50);
  CHECK(j["temperature"] == 0);
  CHECK(j["top_p"] == 1);
  CHECK(j["tools"] == json::array());
  CHECK(j["tool_choice"] == "auto");
  CHECK(j["text"] == json({{"format", {{"type", "text"}}}}));
  CHECK(j["parallel_tool_calls"] == true);
  CHECK(j["store"] == true);
  CHECK(j["previous_response_id"].is_null());
  CHECK(j["metadata"] == json({{"k", "v"}}));
  CHECK(j["reasoning"] == json({{"effort", nullptr}, {"summary", nullptr}}));
  REQUIRE(j["output"].size() == 1);
  json item = j["output"][0];
  CHECK(item["type"] == "message");
  CHECK(item["id"].get<std::string>().rfind("msg_", 0) == 0);
  CHECK(item["status"] == "completed");
  CHECK(item["role"] == "assistant");
  CHECK(item["content"] == json::array({{{"type", "output_text"}, {"text", "Hello there."},
                                         {"annotations", json::array()}, {"logprobs", json::array()}}}));
  json u = j["usage"];
  const std::string prompt = s.last_prompt_text();
  CHECK(prompt == "system: Be brief.\nuser: Hi\nassistant:");
  CHECK(u["input_tokens"] == prompt.size() + 1);  // + BOS
  CHECK(u["output_tokens"] == 12);
  CHECK(u["total_tokens"] == u["input_tokens"].get<int>() + 12);
  CHECK(u["input_tokens_details"]["cached_tokens"].is_number_integer());
  CHECK(u["output_tokens_details"]["reasoning_tokens"] == 0);
}

TEST_CASE("responses: streamed events, in order, agree with the gathered answer", "[responses][server]") {
  FakeChatServer s(options(server::ReasoningFormat::Qwen3));
  s.script(std::string("<think>Check.</think>\nSure. ") + kCall);
  json req = {{"model", "fake-model"}, {"input", "Weather in Paris?"}, {"tools", kWeather}};
  auto gathered = s.post("/v1/responses", req);
  INFO(gathered.body);
  REQUIRE(gathered.status == 200);
  req["stream"] = true;
  auto r = s.post("/v1/responses", req);
  INFO(r.body);
  REQUIRE(r.status == 200);
  std::vector<TypedEvent> events = typed_sse_events(r.body);
  std::vector<std::string> types;
  for (size_t i = 0; i < events.size(); ++i) {
    CHECK(events[i].name == events[i].data["type"]);
    CHECK(events[i].data["sequence_number"] == i);
    types.push_back(events[i].name);
  }
  const std::vector<std::string> expected = {
      "response.created", "response.in_progress",
      "response.output_item.added", "response.content_part.added", "response.reasoning_text.delta",
      "response.reasoning_text.done", "response.content_part.done", "response.output_item.done",
      "response.output_item.added", "response.content_part.added", "response.output_text.delta",
      "response.output_text.done", "response.content_part.done", "response.output_item.done",
      "response.output_item.added", "response.function_call_arguments.delta",
      "response.function_call_arguments.done", "response.output_item.done", "response.completed"};
  // Deltas come as the text arrives: fold repeats of a delta event into one.
  std::vector<std::string> folded;
  for (const std::string& t : types)
    if (folded.empty() || folded.back() != t || t.find(".delta") == std::string::npos) folded.push_back(t);
  CHECK(folded == expected);
  CHECK(events[0].data["response"]["status"] == "in_progress");
  CHECK(events[0].data["response"]["output"] == json::array());
  std::string reasoning, text;
  for (const TypedEvent& e : events) {
    if (e.name == "response.reasoning_text.delta") reasoning += e.data["delta"].get<std::string>();
    if (e.name == "response.output_text.delta") {
      CHECK(e.data["output_index"] == 1);
      CHECK(e.data["content_index"] == 0);
      text += e.data["delta"].get<std::string>();
    }
    if (e.name == "response.output_item.added") CHECK(e.data["item"]["status"] == "in_progress");
    if (e.name == "response.function_call_arguments.done") {
      CHECK(e.data["arguments"] == R"({"city":"Paris"})");
      CHECK(e.data["output_index"] == 2);
    }
  }
  CHECK(reasoning == "Check.");
  CHECK(text == "Sure.");
  const json completed = events.back().data["response"];
  CHECK(without_ids(completed) == without_ids(gathered.j()));
  // The items, as the gathered answer has them.
  const json out = gathered.j()["output"];
  REQUIRE(out.size() == 3);
  CHECK(out[0]["type"] == "reasoning");
  CHECK(out[0]["id"].get<std::string>().rfind("rs_", 0) == 0);
  CHECK(out[0]["summary"] == json::array());
  CHECK(out[0]["content"] == json::array({{{"type", "reasoning_text"}, {"text", "Check."}}}));
  CHECK(out[1]["content"][0]["text"] == "Sure.");
  CHECK(out[2]["type"] == "function_call");
  CHECK(out[2]["id"].get<std::string>().rfind("fc_", 0) == 0);
  CHECK(out[2]["call_id"].get<std::string>().rfind("call_", 0) == 0);
  CHECK(out[2]["name"] == "get_weather");
  CHECK(out[2]["arguments"] == R"({"city":"Paris"})");
  CHECK(out[2]["status"] == "completed");
  CHECK(gathered.j()["usage"]["output_tokens_details"]["reasoning_tokens"] == 6);
}

TEST_CASE("responses: a function tool round trip through previous_response_id", "[responses][server]") {
  FakeChatServer s(options());
  s.script(kCall);
  auto first = s.post("/v1/responses", {{"model", "fake-model"}, {"input", "Weather in Paris?"}, {"tools", kWeather},
                                        {"instructions", "Use tools."}});
  INFO(first.body);
  REQUIRE(first.status == 200);
  const json call = first.j()["output"][0];
  REQUIRE(call["type"] == "function_call");
  s.script("It is 21 C in Paris.");
  auto second = s.post("/v1/responses",
                       {{"model", "fake-model"}, {"previous_response_id", first.j()["id"]}, {"tools", kWeather},
                        {"input", {{{"type", "function_call_output"}, {"call_id", call["call_id"]}, {"output", "21 C"}}}}});
  INFO(second.body);
  REQUIRE(second.status == 200);
  CHECK(second.j()["previous_response_id"] == first.j()["id"]);
  CHECK(second.j()["output"][0]["content"][0]["text"] == "It is 21 C in Paris.");
  // The prompt holds the stored turn (not its instructions), the call and its output.
  const std::string call_id = call["call_id"];
  CHECK(s.last_prompt_text() ==
        "user: Weather in Paris?\nassistant:  calls [{\"id\":\"" + call_id +
            "\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}}]\n"
            "tool: 21 C for " + call_id + "\nassistant:");
  // A client that keeps the conversation itself sends the call back as an item: same prompt.
  auto stateless = s.post("/v1/responses",
                          {{"model", "fake-model"}, {"tools", kWeather}, {"store", false},
                           {"input", {{{"role", "user"}, {"content", {{{"type", "input_text"}, {"text", "Weather in Paris?"}}}}},
                                      call,
                                      {{"type", "function_call_output"}, {"call_id", call["call_id"]}, {"output", "21 C"}}}}});
  INFO(stateless.body);
  REQUIRE(stateless.status == 200);
  CHECK(stateless.j()["store"] == false);
  CHECK(http_get(s.port, "/v1/responses/" + stateless.j()["id"].get<std::string>()).status == 404);
}

TEST_CASE("responses: GET, DELETE and unknown ids", "[responses][server]") {
  FakeChatServer s(options());
  s.script("Stored.");
  auto r = s.post("/v1/responses", {{"model", "fake-model"}, {"input", "Keep this."}});
  REQUIRE(r.status == 200);
  const std::string id = r.j()["id"];
  auto got = http_get(s.port, "/v1/responses/" + id);
  REQUIRE(got.status == 200);
  CHECK(got.j() == r.j());
  httplib::Client c("127.0.0.1", s.port);
  auto del = c.Delete(("/v1/responses/" + id).c_str());
  REQUIRE(del);
  CHECK(del->status == 200);
  CHECK(json::parse(del->body) == json({{"id", id}, {"object", "response"}, {"deleted", true}}));
  for (const std::string& path : {"/v1/responses/" + id, std::string("/v1/responses/resp_unknown")}) {
    auto missing = http_get(s.port, path);
    CHECK(missing.status == 404);
    CHECK(missing.j()["error"]["type"] == "invalid_request_error");
    CHECK(missing.j()["error"]["message"].get<std::string>().find("not found") != std::string::npos);
  }
  auto again = c.Delete(("/v1/responses/" + id).c_str());
  REQUIRE(again);
  CHECK(again->status == 404);
  auto follow = s.post("/v1/responses", {{"model", "fake-model"}, {"input", "more"}, {"previous_response_id", id}});
  CHECK(follow.status == 404);
  CHECK(follow.j()["error"]["param"] == "previous_response_id");
}

TEST_CASE("responses: the store keeps the most recently used", "[responses][server]") {
  FakeChatServer s(options(server::ReasoningFormat::None, 2));
  s.script("x");
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    auto r = s.post("/v1/responses", {{"model", "fake-model"}, {"input", "n" + std::to_string(i)}});
    REQUIRE(r.status == 200);
    ids.push_back(r.j()["id"]);
    if (i == 1) CHECK(http_get(s.port, "/v1/responses/" + ids[0]).status == 200);  // ids[0] used again
  }
  CHECK(http_get(s.port, "/v1/responses/" + ids[0]).status == 200);
  CHECK(http_get(s.port, "/v1/responses/" + ids[1]).status == 404);  // the least recently used
  CHECK(http_get(s.port, "/v1/responses/" + ids[2]).status == 200);
  FakeChatServer off(options(server::ReasoningFormat::None, 0));
  off.script("x");
  auto r = off.post("/v1/responses", {{"model", "fake-model"}, {"input", "hi"}});
  REQUIRE(r.status == 200);
  CHECK(r.j()["store"] == false);
  CHECK(http_get(off.port, "/v1/responses/" + r.j()["id"].get<std::string>()).status == 404);
}

TEST_CASE("responses: max_output_tokens cuts the answer: incomplete", "[responses][server]") {
  FakeChatServer s(options());
  s.script("A long answer that goes on.");
  auto r = s.post("/v1/responses", {{"model", "fake-model"}, {"input", "Hi"}, {"max_output_tokens", 4}});
  INFO(r.body);
  REQUIRE(r.status == 200);
  CHECK(r.j()["status"] == "incomplete");
  CHECK(r.j()["incomplete_details"] == json({{"reason", "max_output_tokens"}}));
  CHECK(r.j()["output"][0]["status"] == "incomplete");
  CHECK(r.j()["output"][0]["content"][0]["text"] == "A lo");
  auto st = s.post("/v1/responses", {{"model", "fake-model"}, {"input", "Hi"}, {"max_output_tokens", 4}, {"stream", true}});
  CHECK(typed_sse_events(st.body).back().name == "response.incomplete");
}

TEST_CASE("responses: refusals name the Responses field", "[responses][server]") {
  FakeChatServer s(options());
  s.script("x");
  struct Bad {
    json body;
    std::string param;
  };
  const Bad bad[] = {
      {{{"model", "fake-model"}}, "input"},
      {{{"model", "fake-model"}, {"input", 3}}, "input"},
      {{{"model", "fake-model"}, {"input", json::array()}}, "input"},
      {{{"model", "fake-model"}, {"input", {{{"role", "robot"}, {"content", "x"}}}}}, "input[0].role"},
      {{{"model", "fake-model"}, {"input", {{{"role", "user"}, {"content", {{{"type", "input_image"}}}}}}}}, "input[0].content[0].type"},
      {{{"model", "fake-model"}, {"input", {{{"type", "function_call_output"}, {"output", "x"}}}}}, "input[0].call_id"},
      {{{"model", "fake-model"}, {"input", "x"}, {"tools", {{{"type", "web_search"}}}}}, "tools[0].type"},
      {{{"model", "fake-model"}, {"input", "x"}, {"max_output_tokens", 0}}, "max_output_tokens"},
      {{{"model", "fake-model"}, {"input", "x"}, {"text", {{"format", {{"type", "yaml"}}}}}}, "text.format.type"},
      {{{"model", "fake-model"}, {"input", "x"}, {"reasoning", {{"effort", "max"}}}}, "reasoning.effort"},
      {{{"model", "fake-model"}, {"input", "x"}, {"previous_response_id", 5}}, "previous_response_id"},
  };
  for (const Bad& b : bad) {
    auto r = s.post("/v1/responses", b.body);
    INFO(b.body.dump() << " -> " << r.body);
    CHECK(r.status == 400);
    CHECK(r.j()["error"]["param"] == b.param);
  }
}

TEST_CASE("responses: text.format goes to the structured-output engine", "[responses][server]") {
  FakeChatServer s(options());
  s.script("{\"a\":1}");
  json schema = {{"type", "object"}, {"properties", {{"a", {{"type", "integer"}}}}}};
  auto r = s.post("/v1/responses", {{"model", "fake-model"}, {"input", "JSON please"},
                                    {"text", {{"format", {{"type", "json_schema"}, {"name", "x"}, {"schema", schema}}}}}});
  INFO(r.body);
  REQUIRE(r.status == 200);
  CHECK(r.j()["text"]["format"]["name"] == "x");
  OutputConstraint c = s.engine.constraints().back();
  CHECK(c.kind == OutputConstraint::Kind::JsonSchema);
  CHECK(json::parse(c.source) == schema);
  REQUIRE(s.post("/v1/responses", {{"model", "fake-model"}, {"input", "x"}, {"text", {{"format", {{"type", "json_object"}}}}}}).status == 200);
  CHECK(s.engine.constraints().back().kind == OutputConstraint::Kind::JsonObject);
  const size_t before = s.engine.constraints().size();
  REQUIRE(s.post("/v1/responses", {{"model", "fake-model"}, {"input", "x"}, {"text", {{"format", {{"type", "text"}}}}}}).status == 200);
  CHECK(s.engine.constraints().size() == before);
}

TEST_CASE("responses: a request that fails while streaming ends with response.failed", "[responses][server]") {
  server::Handlers::Options ho = options();
  ho.timeout_s = 0.3;
  FakeChatServer s(ho);
  s.script("never sent");
  s.engine.pause(true);  // a stalled engine: the request times out
  auto r = s.post("/v1/responses", {{"model", "fake-model"}, {"input", "Hi"}, {"stream", true}});
  s.engine.pause(false);
  INFO(r.body);
  REQUIRE(r.status == 200);  // the status line went out before the failure
  auto events = typed_sse_events(r.body);
  REQUIRE(events.size() == 3);
  CHECK(events[0].name == "response.created");
  CHECK(events[1].name == "response.in_progress");
  CHECK(events[2].name == "response.failed");
  CHECK(events[2].data["sequence_number"] == 2);
  const json failed = events[2].data["response"];
  CHECK(failed["status"] == "failed");
  CHECK(failed["error"]["code"] == "timeout");
  CHECK(failed["error"]["message"].is_string());
  CHECK(http_get(s.port, "/v1/responses/" + failed["id"].get<std::string>()).status == 404);  // not stored
}
