// End-to-end: prompt logprobs over HTTP, the way lm-evaluation-harness scores text against a
// local OpenAI-compatible server: /v1/completions with echo, logprobs and max_tokens 0 or 1.
// The real `pagoda serve` binary on a loopback port with a random-weight model (Phi-3's real
// vocabulary). Checks the response shape (null first logprob, text offsets over the echo),
// that each prompt logprob equals what a request generating at that position reports, and
// streaming, n > 1, several prompts and the max_tokens 0 rules.
#include <catch2/catch.hpp>

#include <cmath>

#include "tests/e2e/e2e_fixture.h"

using namespace pagoda::testing;
using json = nlohmann::json;

namespace {

json post(const json& body) {
  HttpResult r = http_post(shared_server().port(), "/v1/completions", body);
  INFO(r.body);
  REQUIRE(r.status == 200);
  return r.j();
}

std::vector<int> tokenize(const std::string& text) {
  HttpResult r = http_post(shared_server().port(), "/tokenize", json{{"prompt", text}});
  REQUIRE(r.status == 200);
  return r.j()["tokens"].get<std::vector<int>>();
}

const std::string kPrompt = "The quick brown fox jumps over the lazy dog near the river";

// The shape every echoed logprobs object has: null first entry, offsets running over pieces.
void check_shape(const json& lp, size_t prompt_tokens, size_t generated, size_t echo_len) {
  INFO(lp.dump());
  REQUIRE(lp.is_object());
  const json& toks = lp["tokens"];
  REQUIRE(toks.size() == prompt_tokens + generated);
  REQUIRE(lp["token_logprobs"].size() == toks.size());
  REQUIRE(lp["top_logprobs"].size() == toks.size());
  REQUIRE(lp["text_offset"].size() == toks.size());
  CHECK(lp["token_logprobs"][0].is_null());
  CHECK(lp["top_logprobs"][0].is_null());
  CHECK(lp["text_offset"][0] == 0);
  for (size_t i = 1; i < toks.size(); ++i) {
    CHECK(lp["token_logprobs"][i].is_number());
    CHECK(lp["token_logprobs"][i].get<double>() <= 0.0);
    CHECK(lp["top_logprobs"][i].is_object());
    if (i < prompt_tokens)
      CHECK(lp["text_offset"][i].get<size_t>() ==
            lp["text_offset"][i - 1].get<size_t>() + toks[i - 1].get<std::string>().size());
  }
  if (generated > 0) CHECK(lp["text_offset"][prompt_tokens].get<size_t>() == echo_len);
}

}  // namespace

TEST_CASE("echo + logprobs + max_tokens 0: the prompt scored, nothing generated") {
  const size_t n_prompt = tokenize(kPrompt).size();
  json r = post({{"prompt", kPrompt}, {"echo", true}, {"logprobs", 2}, {"max_tokens", 0}, {"temperature", 0}});
  const json& c = r["choices"][0];
  CHECK(c["text"] == kPrompt);
  CHECK(c["finish_reason"] == "length");
  CHECK(r["usage"]["prompt_tokens"] == n_prompt);
  CHECK(r["usage"]["completion_tokens"] == 0);
  check_shape(c["logprobs"], n_prompt, 0, kPrompt.size());
  for (size_t i = 1; i < n_prompt; ++i) {
    // Top entries (at most 2; pieces that render alike share a key) are sorted and bound the
    // prompt token's own logprob from above.
    const json& top = c["logprobs"]["top_logprobs"][i];
    CHECK(top.size() >= 1);
    CHECK(top.size() <= 2);
    double best = -1e30;
    for (auto& [k, v] : top.items()) best = std::max(best, v.get<double>());
    CHECK(c["logprobs"]["token_logprobs"][i].get<double>() <= best + 1e-6);
    const std::string tok = c["logprobs"]["tokens"][i];
    if (top.contains(tok)) CHECK(top[tok].get<double>() == Approx(c["logprobs"]["token_logprobs"][i].get<double>()));
  }

  // Without logprobs: the echo only.
  json plain = post({{"prompt", kPrompt}, {"echo", true}, {"max_tokens", 0}});
  CHECK(plain["choices"][0]["text"] == kPrompt);
  CHECK(plain["choices"][0]["logprobs"].is_null());
  CHECK(plain["choices"][0]["finish_reason"] == "length");
  CHECK(plain["usage"]["completion_tokens"] == 0);

  // max_tokens 0 needs echo (and chat never takes it).
  HttpResult bad = http_post(shared_server().port(), "/v1/completions", json{{"prompt", kPrompt}, {"max_tokens", 0}});
  CHECK(bad.status == 400);
  CHECK(bad.j()["error"]["param"] == "max_tokens");
  HttpResult bad_chat = http_post(shared_server().port(), "/v1/chat/completions",
                                  json{{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 0}});
  CHECK(bad_chat.status == 400);
}

TEST_CASE("each prompt logprob equals the logprob a request generating there reports") {
  const std::vector<int> ids = tokenize(kPrompt);
  REQUIRE(ids.size() >= 8);
  json echo = post({{"prompt", ids}, {"echo", true}, {"logprobs", 5}, {"max_tokens", 1}, {"temperature", 0}});
  const json& lp = echo["choices"][0]["logprobs"];
  check_shape(lp, ids.size(), 1, echo["choices"][0]["text"].get<std::string>().size() -
                                     lp["tokens"][ids.size()].get<std::string>().size());
  for (size_t k = 1; k <= ids.size(); ++k) {
    INFO("position " << k);
    // Generate one token after the first k prompt tokens: its distribution is the one the echo
    // scored prompt token k with (k == ids.size(): the echo's own generated token).
    std::vector<int> prefix(ids.begin(), ids.begin() + static_cast<long>(k));
    json g = post({{"prompt", prefix}, {"logprobs", 5}, {"max_tokens", 1}, {"temperature", 0}});
    const json& glp = g["choices"][0]["logprobs"];
    const json& top_gen = glp["top_logprobs"][0];
    const json& top_echo = lp["top_logprobs"][k];
    REQUIRE(top_gen.size() == top_echo.size());
    for (auto& [piece, v] : top_gen.items()) {
      REQUIRE(top_echo.contains(piece));
      CHECK(top_echo[piece].get<double>() == Approx(v.get<double>()).margin(1e-5));
    }
    // The greedy token is the most likely one; where the prompt has that token, its logprob
    // is the generated one.
    const std::string gen_tok = glp["tokens"][0];
    const double gen_lp = glp["token_logprobs"][0];
    CHECK(top_echo[gen_tok].get<double>() == Approx(gen_lp).margin(1e-5));
    if (lp["tokens"][k] == gen_tok) CHECK(lp["token_logprobs"][k].get<double>() == Approx(gen_lp).margin(1e-5));
  }
}

TEST_CASE("echo + logprobs: several prompts, n > 1 and streaming agree") {
  const std::string other = "A second prompt, shorter";
  json body = {{"prompt", {kPrompt, other}}, {"echo", true}, {"logprobs", 1}, {"max_tokens", 3},
               {"temperature", 0}, {"n", 2}};
  json r = post(body);
  REQUIRE(r["choices"].size() == 4);
  const size_t n0 = tokenize(kPrompt).size(), n1 = tokenize(other).size();
  for (int i = 0; i < 4; ++i) {
    const json& c = r["choices"][i];
    const std::string& prompt = i < 2 ? kPrompt : other;
    CHECK(c["text"].get<std::string>().rfind(prompt, 0) == 0);
    check_shape(c["logprobs"], i < 2 ? n0 : n1, 3, prompt.size());
  }
  CHECK(r["choices"][0]["logprobs"] == r["choices"][1]["logprobs"]);  // greedy siblings
  CHECK(r["usage"]["completion_tokens"] == 12);

  // Streamed: the echo chunk carries the prompt's logprobs, the rest follow; together they
  // are the gathered answer.
  body["stream"] = true;
  HttpResult s = http_post(shared_server().port(), "/v1/completions", body);
  REQUIRE(s.status == 200);
  std::vector<json> merged(4, json{{"tokens", json::array()}, {"token_logprobs", json::array()},
                                   {"top_logprobs", json::array()}, {"text_offset", json::array()}});
  std::vector<std::string> text(4);
  std::vector<bool> first(4, true);
  for (const std::string& e : sse_events(s.body)) {
    if (e == "[DONE]") continue;
    json j = json::parse(e);
    for (const json& c : j["choices"]) {
      const size_t i = c["index"];
      if (first[i]) {
        // The first chunk of a choice is its echo, with the prompt's logprobs.
        CHECK(c["text"] == (i < 2 ? kPrompt : other));
        REQUIRE(c["logprobs"].is_object());
        CHECK(c["logprobs"]["token_logprobs"][0].is_null());
        first[i] = false;
      }
      text[i] += c["text"].get<std::string>();
      if (c["logprobs"].is_object())
        for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
          for (const json& v : c["logprobs"][key]) merged[i][key].push_back(v);
    }
  }
  for (int i = 0; i < 4; ++i) {
    INFO("choice " << i);
    CHECK(text[i] == r["choices"][i]["text"]);
    CHECK(merged[i] == r["choices"][i]["logprobs"]);
  }

  // Streaming with max_tokens 0: the echo chunk, then finish "length".
  json s0 = {{"prompt", kPrompt}, {"echo", true}, {"logprobs", 0}, {"max_tokens", 0}, {"stream", true}};
  auto ev = sse_events(http_post(shared_server().port(), "/v1/completions", s0).body);
  REQUIRE(ev.size() >= 3);
  json head = json::parse(ev[0]);
  CHECK(head["choices"][0]["text"] == kPrompt);
  CHECK(head["choices"][0]["logprobs"]["tokens"].size() == n0);
  json tail = json::parse(ev[ev.size() - 2]);
  CHECK(tail["choices"][0]["finish_reason"] == "length");
  CHECK(sse_texts(ev, 1)[0] == kPrompt);
}
