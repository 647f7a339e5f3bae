// OpenAI request parsing/validation and response shapes, without HTTP.
#include <catch2/catch.hpp>

#include "server/openai/request_parse.h"
#include "server/openai/response_build.h"

using namespace pagoda;
using namespace pagoda::server;
using json = nlohmann::json;

namespace {
std::string param_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ApiError& e) {
    CHECK(e.status == 400);
    return e.param;
  }
  return "<no error>";
}
}  // namespace

TEST_CASE("completion request: every prompt form", "[protocol]") {
  auto r = parse_completion_request({{"prompt", "hi"}});
  REQUIRE(r.prompts.size() == 1);
  CHECK(!r.prompts[0].is_tokens);
  r = parse_completion_request({{"prompt", {"a", "b"}}});
  CHECK(r.prompts.size() == 2);
  r = parse_completion_request({{"prompt", {1, 2, 3}}});
  CHECK(r.prompts[0].tokens == std::vector<int32_t>{1, 2, 3});
  r = parse_completion_request({{"prompt", {{1}, {2, 3}}}});
  CHECK(r.prompts[1].tokens == std::vector<int32_t>{2, 3});
  CHECK(param_of([] { parse_completion_request({{"prompt", json::array()}}); }) == "prompt");
  CHECK(param_of([] { parse_completion_request({{"prompt", {"a", 1}}}); }) == "prompt[1]");
  CHECK(param_of([] { parse_completion_request({{"prompt", {1, "a"}}}); }) == "prompt[1]");
  CHECK(param_of([] { parse_completion_request({{"prompt", {{1}, json::array()}}}); }) == "prompt[1]");
  CHECK(param_of([] { parse_completion_request({{"prompt", true}}); }) == "prompt");
}

TEST_CASE("sampling fields: ranges and types", "[protocol]") {
  auto r = parse_completion_request({{"prompt", "x"}, {"temperature", 0}, {"top_p", 0.5}, {"top_k", -1},
                                     {"min_p", 0.1}, {"seed", 7}, {"presence_penalty", 1},
                                     {"frequency_penalty", -1}, {"repetition_penalty", 1.1},
                                     {"logit_bias", {{"5", -100}}}, {"stop", "END"}, {"ignore_eos", true},
                                     {"n_keep", 4}, {"logprobs", 3}, {"max_tokens", 9}, {"n", 2},
                                     {"user", "u"}, {"unknown_field", {1, 2}}});
  CHECK(r.common.sampling.temperature == 0);
  CHECK(r.common.sampling.top_p == Approx(0.5));
  CHECK(r.common.sampling.top_k == 0);
  CHECK(*r.common.sampling.seed == 7);
  CHECK(r.common.sampling.logit_bias.at(5) == -100);
  CHECK(r.common.stop.stop == std::vector<std::string>{"END"});
  CHECK(r.common.stop.ignore_eos);
  CHECK(r.common.n_keep == 4);
  CHECK(r.common.sampling.logprobs == 3);
  CHECK(*r.common.max_tokens == 9);
  CHECK(r.common.n == 2);
  auto p = [](json extra) {
    extra["prompt"] = "x";
    return param_of([&] { parse_completion_request(extra); });
  };
  CHECK(p({{"temperature", -1}}) == "temperature");
  CHECK(p({{"temperature", "hot"}}) == "temperature");
  CHECK(p({{"top_p", 0}}) == "top_p");
  CHECK(p({{"top_p", 1.01}}) == "top_p");
  CHECK(p({{"n", 0}}) == "n");
  CHECK(p({{"n", 1.5}}) == "n");
  CHECK(p({{"max_tokens", -5}}) == "max_tokens");
  CHECK(p({{"min_p", 2}}) == "min_p");
  CHECK(p({{"presence_penalty", 3}}) == "presence_penalty");
  CHECK(p({{"repetition_penalty", 0}}) == "repetition_penalty");
  CHECK(p({{"logit_bias", {{"5", 101}}}}) == "logit_bias.5");
  CHECK(p({{"logit_bias", {1, 2}}}) == "logit_bias");
  CHECK(p({{"stop", {1}}}) == "stop[0]");
  CHECK(p({{"logprobs", 21}}) == "logprobs");
  CHECK(p({{"stream_options", {{"include_usage", 1}}}}) == "stream_options.include_usage");
  CHECK(p({{"seed", "x"}}) == "seed");
}

TEST_CASE("chat request: messages normalized and validated", "[protocol]") {
  auto r = parse_chat_request(
      {{"messages",
        {{{"role", "developer"}, {"content", "sys"}},
         {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "a"}}, {{"type", "text"}, {"text", "b"}}}}},
         {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", json::array()}}}},
       {"max_completion_tokens", 5}, {"max_tokens", 9}, {"logprobs", true}, {"top_logprobs", 2},
       {"stream", true}, {"stream_options", {{"include_usage", true}}}});
  CHECK(r.messages[0]["role"] == "system");
  CHECK(r.messages[1]["content"] == "a\nb");
  CHECK(r.messages[2]["content"] == "");
  CHECK(*r.common.max_tokens == 5);
  CHECK(r.common.sampling.logprobs == 2);
  CHECK(r.common.include_usage);
  CHECK(param_of([] { parse_chat_request({{"messages", "hi"}}); }) == "messages");
  CHECK(param_of([] { parse_chat_request({{"messages", {{{"role", "bot"}, {"content", "x"}}}}}); }) ==
        "messages[0].role");
  CHECK(param_of([] { parse_chat_request({{"messages", {{{"content", "x"}}}}}); }) == "messages[0].role");
  CHECK(param_of([] { parse_chat_request({{"messages", {{{"role", "user"}, {"content", 5}}}}}); }) ==
        "messages[0].content");
}

TEST_CASE("error body and JSON body parsing", "[protocol]") {
  json e = error_body(ApiError(400, "bad", "invalid_request_error", "n"));
  CHECK(e["error"]["message"] == "bad");
  CHECK(e["error"]["param"] == "n");
  CHECK(e["error"]["code"].is_null());
  CHECK_THROWS_AS(parse_json_body("{"), ApiError);
  CHECK_THROWS_AS(parse_json_body("3"), ApiError);
  CHECK(parse_json_body("{\"a\":1}")["a"] == 1);
  // Deep nesting is refused before parsing; brackets inside strings do not count.
  std::string deep = "{\"a\":" + std::string(100000, '[') + std::string(100000, ']') + "}";
  CHECK_THROWS_AS(parse_json_body(deep), ApiError);
  CHECK(parse_json_body("{\"a\":\"" + std::string(1000, '[') + "\"}")["a"].get<std::string>().size() == 1000);
  CHECK(parse_json_body("{\"a\":\"\\\"[[[\"}")["a"] == "\"[[[");
  // A token holding half a UTF-8 character does not break serialization.
  CHECK(dump_json(json(std::string("\xe2\x82"))).size() > 2);
}

TEST_CASE("response shapes", "[protocol]") {
  ResponseMeta m{"cmpl-1", "mod", 123};
  ChoiceResult c;
  c.text = "ab";
  c.finish = FinishReason::Length;
  c.logprobs = {{'a', -0.5f, {{'a', -0.5f}, {'b', -1.f}}}, {'b', -0.1f, {}}};
  Usage u{4, 2, 1};
  auto text = [](int32_t id) { return std::string(1, (char)id); };
  json r = completion_response(m, {c}, u, true, text);
  CHECK(r["usage"]["total_tokens"] == 6);
  CHECK(r["usage"]["prompt_tokens_details"]["cached_tokens"] == 1);
  CHECK(r["choices"][0]["logprobs"]["text_offset"] == json({0, 1}));
  CHECK(r["choices"][0]["logprobs"]["top_logprobs"][0]["b"] == -1.0);
  json ch = chat_response(m, {c}, u, true, text);
  CHECK(ch["choices"][0]["logprobs"]["content"][0]["bytes"] == json({97}));
  json k = chat_chunk(m, 0, {{"content", "x"}}, nullptr, nullptr, true);
  CHECK(k["usage"].is_null());
  CHECK(k["choices"][0]["finish_reason"].is_null());
  json uc = usage_chunk(m, "chat.completion.chunk", u);
  CHECK(uc["choices"].empty());
}
