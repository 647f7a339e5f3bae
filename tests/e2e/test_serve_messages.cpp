// End to end: Anthropic's Messages API on the real `pagoda serve` (random-weight model, Phi-3's
// vocabulary and template) over loopback HTTP: the message field by field, count_tokens against
// its usage and against /tokenize, the event stream folded into the gathered message under
// greedy decoding, a stop sequence the engine matches in real output (stop_reason
// stop_sequence, naming it), refusals in Anthropic's error shape, and x-api-key with --api-key.
#include <algorithm>

#include <catch2/catch.hpp>

#include "tests/e2e/e2e_fixture.h"

using namespace pagoda::testing;
using json = nlohmann::json;

namespace {

HttpResult messages(const json& body) { return http_post(shared_server().port(), "/v1/messages", body); }

json request(const std::string& user, int max_tokens) {
  return {{"model", "model"}, {"max_tokens", max_tokens}, {"temperature", 0}, {"system", "You are terse."},
          {"messages", {{{"role", "user"}, {"content", user}}}}};
}

std::string text_of(const json& message) {
  std::string text;
  for (const json& b : message["content"])
    if (b["type"] == "text") text += b["text"].get<std::string>();
  return text;
}

// The message a stream amounts to, folded as Anthropic's SDK folds it.
json fold_stream(const std::string& body) {
  std::vector<TypedEvent> events = typed_sse_events(body);
  REQUIRE(events.size() >= 4);
  CHECK(events[0].name == "message_start");
  CHECK(events[1].name == "ping");
  CHECK(events.back().name == "message_stop");
  json msg = events[0].data["message"];
  for (const TypedEvent& e : events) {
    CHECK(e.name == e.data["type"]);
    if (e.name == "content_block_start") msg["content"].push_back(e.data["content_block"]);
    if (e.name == "content_block_delta") {
      REQUIRE(e.data["delta"]["type"] == "text_delta");
      json& block = msg["content"][e.data["index"].get<size_t>()];
      block["text"] = block["text"].get<std::string>() + e.data["delta"]["text"].get<std::string>();
    }
    if (e.name == "message_delta") {
      msg["stop_reason"] = e.data["delta"]["stop_reason"];
      msg["stop_sequence"] = e.data["delta"]["stop_sequence"];
      for (auto& [k, v] : e.data["usage"].items()) msg["usage"][k] = v;
    }
  }
  return msg;
}

}  // namespace

TEST_CASE("e2e messages: the message field by field, and count_tokens", "[e2e]") {
  auto r = messages(request("Tell me a story.", 12));
  INFO(r.body);
  REQUIRE(r.status == 200);
  const json m = r.j();
  CHECK(m["id"].get<std::string>().rfind("msg_", 0) == 0);
  CHECK(m["type"] == "message");
  CHECK(m["role"] == "assistant");
  CHECK(m["model"] == "model");
  REQUIRE(m["content"].size() <= 1);
  if (!m["content"].empty()) CHECK(m["content"][0]["type"] == "text");
  const json u = m["usage"];
  CHECK(u["output_tokens"].get<int>() <= 12);
  // The random model rarely stops by itself.
  CHECK(m["stop_reason"] == (u["output_tokens"] == 12 ? "max_tokens" : "end_turn"));
  CHECK(m["stop_sequence"].is_null());
  const int prompt = u["input_tokens"].get<int>() + u["cache_read_input_tokens"].get<int>();
  json count = {{"model", "model"}, {"system", "You are terse."},
                {"messages", {{{"role", "user"}, {"content", "Tell me a story."}}}}};
  auto counted = http_post(shared_server().port(), "/v1/messages/count_tokens", count);
  INFO(counted.body);
  REQUIRE(counted.status == 200);
  CHECK(counted.j()["input_tokens"] == prompt);
  // The same conversation as a chat request costs the same prompt.
  json chat = {{"messages", {{{"role", "system"}, {"content", "You are terse."}},
                             {{"role", "user"}, {"content", "Tell me a story."}}}}};
  CHECK(prompt == http_post(shared_server().port(), "/tokenize", chat).j()["count"]);
}

TEST_CASE("e2e messages: the stream folds into the gathered message under greedy", "[e2e]") {
  json req = request("Count to ten.", 20);
  auto gathered = messages(req);
  REQUIRE(gathered.status == 200);
  req["stream"] = true;
  auto streamed = messages(req);
  INFO(streamed.body);
  REQUIRE(streamed.status == 200);
  json folded = fold_stream(streamed.body);
  json g = gathered.j();
  CHECK(folded["content"] == g["content"]);
  CHECK(folded["stop_reason"] == g["stop_reason"]);
  CHECK(folded["usage"]["output_tokens"] == g["usage"]["output_tokens"]);
  CHECK(folded["usage"]["input_tokens"].get<int>() + folded["usage"]["cache_read_input_tokens"].get<int>() ==
        g["usage"]["input_tokens"].get<int>() + g["usage"]["cache_read_input_tokens"].get<int>());
}

TEST_CASE("e2e messages: a stop sequence in real output", "[e2e]") {
  auto free_run = messages(request("Say something long.", 40));
  REQUIRE(free_run.status == 200);
  const std::string text = text_of(free_run.j());
  // Three printable ASCII bytes past the start, as the stop sequence.
  size_t at = std::string::npos;
  for (size_t i = 1; i + 3 <= text.size() && at == std::string::npos; ++i)
    if (std::all_of(text.begin() + i, text.begin() + i + 3, [](char c) { return c > ' ' && c < 127; })) at = i;
  if (at == std::string::npos) {
    WARN("the output has no three printable ASCII bytes: " << text);
    return;
  }
  const std::string stop = text.substr(at, 3);
  json req = request("Say something long.", 40);
  req["stop_sequences"] = {"never-in-this-output-\x01", stop};
  for (bool stream : {false, true}) {
    req["stream"] = stream;
    auto r = messages(req);
    INFO(stream << " " << r.body);
    REQUIRE(r.status == 200);
    const json m = stream ? fold_stream(r.body) : r.j();
    CHECK(m["stop_reason"] == "stop_sequence");
    CHECK(m["stop_sequence"] == stop);
    CHECK(text_of(m) == text.substr(0, text.find(stop)));
  }
}

TEST_CASE("e2e messages: refusals in Anthropic's error shape", "[e2e]") {
  auto check = [](const HttpResult& r, int status, const char* type) {
    INFO(r.body);
    CHECK(r.status == status);
    const json j = json::parse(r.body, nullptr, false);
    CHECK(j["type"] == "error");
    CHECK(j["error"]["type"] == type);
    CHECK(j["error"]["message"].is_string());
  };
  json unknown = request("x", 4);
  unknown["model"] = "claude-nope";
  check(messages(unknown), 404, "not_found_error");
  json image = request("x", 4);
  image["messages"][0]["content"] = {{{"type", "image"}, {"source", {{"type", "base64"}, {"data", "AA=="}}}}};
  check(messages(image), 400, "invalid_request_error");
  json no_max = request("x", 4);
  no_max.erase("max_tokens");
  check(messages(no_max), 400, "invalid_request_error");
}

TEST_CASE("e2e messages: x-api-key with --api-key", "[e2e]") {
  auto s = start_server({"--api-key", "e2e-key"});
  const std::string body = request("Hi", 4).dump();
  CHECK(http_post_raw(s->port(), "/v1/messages", "x-api-key: e2e-key\r\nanthropic-version: 2023-06-01\r\n", body).status == 200);
  CHECK(http_post_raw(s->port(), "/v1/messages", "Authorization: Bearer e2e-key\r\n", body).status == 200);
  auto refused = http_post_raw(s->port(), "/v1/messages", "x-api-key: other\r\n", body);
  INFO(refused.body);
  CHECK(refused.status == 401);
  CHECK(refused.j()["error"]["type"] == "authentication_error");
}
