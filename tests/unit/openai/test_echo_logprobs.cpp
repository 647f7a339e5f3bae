// Echo + logprobs on /v1/completions without a model: request validation (echo with logprobs
// accepted, max_tokens 0 only with echo) and the logprobs object of an echoed choice (null first
// entry, prompt then generated tokens, text offsets).
#include <catch2/catch.hpp>

#include "server/openai/echo_logprobs.h"
#include "server/openai/request_parse.h"

using namespace pagoda;
using namespace pagoda::server;

namespace {

// Token t renders as t letters 'a' + t - 1 (token 0: empty), so offsets are easy to predict.
std::string piece(int32_t t) { return std::string(static_cast<size_t>(t), static_cast<char>('a' + std::max(t - 1, 0))); }

}  // namespace

TEST_CASE("completions: echo with logprobs and max_tokens 0 are accepted") {
  CompletionRequest r = parse_completion_request(
      json{{"prompt", "abc"}, {"echo", true}, {"logprobs", 3}, {"max_tokens", 0}});
  CHECK(r.echo);
  CHECK(r.common.sampling.logprobs == 3);
  REQUIRE(r.common.max_tokens.has_value());
  CHECK(*r.common.max_tokens == 0);

  try {
    parse_completion_request(json{{"prompt", "abc"}, {"max_tokens", 0}});
    FAIL("max_tokens 0 without echo was accepted");
  } catch (const ApiError& e) {
    CHECK(e.status == 400);
    CHECK(e.param == "max_tokens");
  }
  CHECK_THROWS_AS(parse_completion_request(json{{"prompt", "abc"}, {"echo", true}, {"max_tokens", -1}}), ApiError);
  CHECK_THROWS_AS(parse_chat_request(json{{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"max_tokens", 0}}),
                  ApiError);
}

TEST_CASE("echo logprobs: prompt first with a null head, then generated tokens") {
  const std::vector<int32_t> prompt = {1, 2, 3};
  const std::vector<TokenLogprob> prompt_lps = {{2, -0.5f, {{2, -0.5f}, {4, -1.5f}}}, {3, -2.0f, {{1, -0.25f}}}};
  const std::vector<TokenLogprob> generated = {{4, -0.75f, {{4, -0.75f}}}};
  const json j = echo_logprobs_json(prompt, prompt_lps, generated, /*echo_len=*/6, piece);
  CHECK(j["tokens"] == json::array({"a", "bb", "ccc", "dddd"}));
  CHECK(j["token_logprobs"] == json::array({nullptr, -0.5, -2.0, -0.75}));
  CHECK(j["top_logprobs"][0].is_null());
  CHECK(j["top_logprobs"][1] == json{{"bb", -0.5}, {"dddd", -1.5}});
  CHECK(j["top_logprobs"][2] == json{{"a", -0.25}});
  CHECK(j["top_logprobs"][3] == json{{"dddd", -0.75}});
  CHECK(j["text_offset"] == json::array({0, 1, 3, 6}));

  // The prompt alone (max_tokens 0, or a streamed echo chunk); a one-token prompt is all null.
  const json p = prompt_logprobs_json(prompt, prompt_lps, piece);
  CHECK(p["tokens"].size() == 3);
  CHECK(p["text_offset"] == json::array({0, 1, 3}));
  const json one = prompt_logprobs_json({5}, {}, piece);
  CHECK(one["token_logprobs"] == json::array({nullptr}));
  CHECK(one["top_logprobs"] == json::array({nullptr}));
  // Entries the engine did not deliver (a request that ended early) are left out, never invented.
  CHECK(prompt_logprobs_json(prompt, {prompt_lps[0]}, piece)["tokens"].size() == 2);
}
