// End to end: POST /v1/responses on the real `pagoda serve` (random-weight model, Phi-3's
// vocabulary and template) over loopback HTTP: the response object field by field, the typed
// event stream and its agreement with the gathered answer under greedy decoding, a follow-up
// through previous_response_id served from the prefix cache, text.format json_schema through
// the structured-output engine, a forced function call and its output sent back, GET / DELETE,
// 404s, and the --responses-store bound.
#include <catch2/catch.hpp>

#include "tests/e2e/e2e_fixture.h"
#include "tests/support/responses_shape.h"

using namespace pagoda::testing;
using json = nlohmann::json;

namespace {

// One server for the file, keeping at most 2 responses.
ServerProcess& server() {
  static std::unique_ptr<ServerProcess> s = start_server({"--responses-store", "2"});
  return *s;
}

HttpResult create(const json& body) { return http_post(server().port(), "/v1/responses", body); }

const char* kLongInput =
    "Once upon a time there was a little robot who lived in a lighthouse by the sea. Every night it "
    "counted the ships that passed and wrote their names in a small blue book.";

std::string output_text(const json& response) {
  std::string text;
  for (const json& item : response["output"])
    if (item["type"] == "message")
      for (const json& part : item["content"]) text += part["text"].get<std::string>();
  return text;
}

}  // namespace

TEST_CASE("e2e responses: the object field by field", "[e2e]") {
  auto r = create({{"model", "model"}, {"input", "Tell me a story."}, {"max_output_tokens", 12},
                   {"temperature", 0}, {"instructions", "You are terse."}});
  INFO(r.body);
  REQUIRE(r.status == 200);
  json j = r.j();
  check_response_object(j, "model");
  CHECK(j["instructions"] == "You are terse.");
  CHECK(j["max_output_tokens"] == 12);
  CHECK(j["store"] == true);
  const json u = j["usage"];
  CHECK(u["output_tokens"].get<int>() <= 12);
  CHECK(u["total_tokens"] == u["input_tokens"].get<int>() + u["output_tokens"].get<int>());
  CHECK(u["input_tokens_details"]["cached_tokens"].is_number_integer());
  CHECK(u["output_tokens_details"]["reasoning_tokens"] == 0);
  // The random model rarely stops by itself: 12 tokens is "incomplete", else "completed".
  if (u["output_tokens"] == 12) {
    CHECK(j["status"] == "incomplete");
    CHECK(j["incomplete_details"]["reason"] == "max_output_tokens");
  } else {
    CHECK(j["status"] == "completed");
    CHECK(j["incomplete_details"].is_null());
  }
  REQUIRE(j["output"].size() == 1);
  const json item = j["output"][0];
  CHECK(item["type"] == "message");
  CHECK(item["role"] == "assistant");
  CHECK(item["id"].get<std::string>().rfind("msg_", 0) == 0);
  CHECK(item["content"][0]["type"] == "output_text");
  CHECK(item["content"][0]["annotations"] == json::array());
  // The same conversation as a chat request costs the same prompt.
  json chat = {{"messages", {{{"role", "system"}, {"content", "You are terse."}},
                             {{"role", "user"}, {"content", "Tell me a story."}}}}};
  CHECK(u["input_tokens"] == http_post(server().port(), "/tokenize", chat).j()["count"]);
}

TEST_CASE("e2e responses: streaming equals the gathered answer under greedy", "[e2e]") {
  json req = {{"model", "model"}, {"input", "Count to ten."}, {"max_output_tokens", 20}, {"temperature", 0}};
  auto full = create(req);
  REQUIRE(full.status == 200);
  req["stream"] = true;
  auto st = create(req);
  INFO(st.body);
  REQUIRE(st.status == 200);
  auto events = typed_sse_events(st.body);
  REQUIRE(events.size() >= 8);
  std::vector<std::string> folded;
  std::string deltas;
  for (size_t i = 0; i < events.size(); ++i) {
    CHECK(events[i].data["type"] == events[i].name);
    CHECK(events[i].data["sequence_number"] == i);
    if (events[i].name == "response.output_text.delta") deltas += events[i].data["delta"].get<std::string>();
    if (folded.empty() || folded.back() != events[i].name || events[i].name.find(".delta") == std::string::npos)
      folded.push_back(events[i].name);
  }
  const std::string last = full.j()["status"] == "completed" ? "response.completed" : "response.incomplete";
  CHECK(folded == std::vector<std::string>{"response.created", "response.in_progress", "response.output_item.added",
                                           "response.content_part.added", "response.output_text.delta",
                                           "response.output_text.done", "response.content_part.done",
                                           "response.output_item.done", last});
  const json streamed = events.back().data["response"];
  CHECK(deltas == output_text(full.j()));
  CHECK(output_text(streamed) == output_text(full.j()));
  CHECK(streamed["usage"]["output_tokens"] == full.j()["usage"]["output_tokens"]);
  CHECK(streamed["usage"]["input_tokens"] == full.j()["usage"]["input_tokens"]);
  CHECK(streamed["status"] == full.j()["status"]);
}

TEST_CASE("e2e responses: a follow-up through previous_response_id reuses the prefix cache", "[e2e]") {
  auto first = create({{"model", "model"}, {"input", kLongInput}, {"max_output_tokens", 8}, {"temperature", 0}});
  REQUIRE(first.status == 200);
  const int first_input = first.j()["usage"]["input_tokens"];
  REQUIRE(first_input > 32);
  auto second = create({{"model", "model"}, {"input", "And then?"}, {"max_output_tokens", 4},
                        {"previous_response_id", first.j()["id"]}});
  INFO(second.body);
  REQUIRE(second.status == 200);
  const json u = second.j()["usage"];
  CHECK(u["input_tokens"].get<int>() > first_input);
  // At least the whole 16-token blocks of the first prompt come from the cache.
  CHECK(u["input_tokens_details"]["cached_tokens"].get<int>() >= first_input / 16 * 16);
  CHECK(second.j()["previous_response_id"] == first.j()["id"]);
}

TEST_CASE("e2e responses: text.format json_schema and a forced function call", "[e2e]") {
  json schema = {{"type", "object"},
                 {"properties", {{"answer", {{"enum", {"yes", "no"}}}}}},
                 {"required", {"answer"}},
                 {"additionalProperties", false}};
  auto r = create({{"model", "model"}, {"input", "Is the sea blue?"}, {"max_output_tokens", 40},
                   {"text", {{"format", {{"type", "json_schema"}, {"name", "verdict"}, {"schema", schema}, {"strict", true}}}}}});
  INFO(r.body);
  REQUIRE(r.status == 200);
  CHECK(r.j()["status"] == "completed");
  json verdict = json::parse(output_text(r.j()));
  CHECK((verdict == json{{"answer", "yes"}} || verdict == json{{"answer", "no"}}));
  CHECK(r.j()["text"]["format"]["type"] == "json_schema");

  json tools = {{{"type", "function"}, {"name", "get_weather"},
                 {"parameters", {{"type", "object"},
                                 {"properties", {{"city", {{"enum", {"Paris", "Rome"}}}}}},
                                 {"required", {"city"}}, {"additionalProperties", false}}}}};
  auto call = create({{"model", "model"}, {"input", "Weather?"}, {"tools", tools}, {"tool_choice", "required"},
                      {"max_output_tokens", 120}});
  INFO(call.body);
  REQUIRE(call.status == 200);
  const json out = call.j()["output"];
  REQUIRE(out.size() == 1);
  CHECK(out[0]["type"] == "function_call");
  CHECK(out[0]["name"] == "get_weather");
  CHECK(json::parse(out[0]["arguments"].get<std::string>())["city"].is_string());
  auto back = create({{"model", "model"}, {"previous_response_id", call.j()["id"]}, {"tools", tools},
                      {"max_output_tokens", 4},
                      {"input", {{{"type", "function_call_output"}, {"call_id", out[0]["call_id"]}, {"output", "21 C"}}}}});
  INFO(back.body);
  CHECK(back.status == 200);
}

TEST_CASE("e2e responses: GET, DELETE, 404s and the store bound", "[e2e]") {
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    auto r = create({{"model", "model"}, {"input", "Hello " + std::to_string(i)}, {"max_output_tokens", 2}});
    REQUIRE(r.status == 200);
    ids.push_back(r.j()["id"]);
  }
  const int port = server().port();
  CHECK(http_get(port, "/v1/responses/" + ids[0]).status == 404);  // --responses-store 2
  auto got = http_get(port, "/v1/responses/" + ids[2]);
  REQUIRE(got.status == 200);
  CHECK(got.j()["id"] == ids[2]);
  httplib::Client c("127.0.0.1", port);
  auto del = c.Delete(("/v1/responses/" + ids[2]).c_str());
  REQUIRE(del);
  CHECK(del->status == 200);
  CHECK(json::parse(del->body)["deleted"] == true);
  auto gone = http_get(port, "/v1/responses/" + ids[2]);
  CHECK(gone.status == 404);
  CHECK(gone.j()["error"]["message"].is_string());
  auto follow = create({{"model", "model"}, {"input", "x"}, {"previous_response_id", ids[0]}});
  CHECK(follow.status == 404);
  CHECK(follow.j()["error"]["param"] == "previous_response_id");
}
