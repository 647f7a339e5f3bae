// Forced tokens (engine/loop/forced_tokens.h) end to end: where the grammar allows one
// continuation, its tokens follow the sampled one without a decode step each. On the tiny
// random model (byte-level vocabulary: the mask then allows exactly the forced byte, so greedy
// decoding must write the same tokens either way) and on stories260K (a real SentencePiece
// vocabulary): greedy output identical with forcing on and off where the text is forced,
// outputs valid under their schema, fewer steps, the forced tokens counted in usage and stats,
// and their logprobs (0, no alternatives).
#include <catch2/catch.hpp>

#include <cstring>

#include <nlohmann/json.hpp>

#include "engine/loop/engine.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/support/testdata.h"
#include "tests/unit/loop/engine_test_util.h"

using namespace pagoda;
using namespace pagoda::test;

namespace {

const char* kFixedKeys = R"({"type": "object", "properties": {
    "identifier": {"type": "integer", "minimum": 0, "maximum": 999},
    "is_available": {"type": "boolean"},
    "category": {"enum": ["first", "second"]},
    "description": {"const": "a fixed description"},
    "measurements": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}, "maxItems": 2}},
  "required": ["identifier", "is_available", "category", "description", "measurements"],
  "additionalProperties": false})";

void check_fixed_keys(const std::string& text) {
  INFO(text);
  const auto j = nlohmann::json::parse(text);
  CHECK(j.size() == 5);
  CHECK(j["identifier"].is_number_integer());
  CHECK(j["is_available"].is_boolean());
  CHECK((j["category"] == "first" || j["category"] == "second"));
  CHECK(j["description"] == "a fixed description");
  CHECK(j["measurements"].is_array());
}

OutputConstraint schema(const char* text) {
  OutputConstraint c;
  c.kind = OutputConstraint::Kind::JsonSchema;
  c.source = text;
  return c;
}

struct Outcome {
  std::vector<RequestResult> results;
  EngineStats stats;
};

// Runs `reqs` (their grammar compiled from `constraint` on this engine) together on a fresh
// engine over `file` with forcing on or off.
Outcome run(const gguf::GgufFile& file, const OutputConstraint& constraint, std::vector<GenerationRequest> reqs,
            bool forced) {
  auto tok = Tokenizer::from_gguf(file);
  auto model = load_model(file, 256);
  EngineConfig cfg = tiny_engine_config(128, 256);
  cfg.forced_tokens = forced;
  cfg.max_step_ms = -1;  // chunking by a clock would vary from run to run
  LlmEngine engine(*model, tok.get(), cfg);
  const auto g = engine.compile_constraint(constraint);
  for (auto& r : reqs) r.sampling.grammar = g;
  Outcome out;
  for (auto& s : submit_all(engine, reqs)) out.results.push_back(collect(*s));
  out.stats = wait_idle(engine);
  return out;
}

GenerationRequest greedy(std::vector<int32_t> prompt, int max_tokens) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.sampling.temperature = 0;
  r.sampling.logprobs = 2;
  r.stop.max_tokens = max_tokens;
  return r;
}

void check_forced_logprobs(const ChoiceResult& c) {
  REQUIRE(c.logprob_bits.size() == c.tokens.size());
  int zero_without_top = 0;
  for (size_t k = 0; k < c.tokens.size(); ++k) {
    float lp;
    std::memcpy(&lp, &c.logprob_bits[k], 4);
    CHECK(lp <= 0.0f);
    if (lp == 0.0f && c.top_tokens[k].empty()) ++zero_without_top;
  }
  CHECK(zero_without_top > 0);  // the forced ones
}

}  // namespace

TEST_CASE("forced tokens: the tiny model writes the same greedy output in fewer steps") {
  std::vector<GenerationRequest> reqs;
  for (uint64_t s = 1; s <= 4; ++s) reqs.push_back(greedy(random_tokens(10, s, 120), 200));
  const Outcome off = run(tiny_model(), schema(kFixedKeys), reqs, false);
  const Outcome on = run(tiny_model(), schema(kFixedKeys), reqs, true);
  int tokens = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const ChoiceResult& a = off.results[i].choices[0];
    const ChoiceResult& b = on.results[i].choices[0];
    INFO("request " << i << ": " << a.text << " | " << b.text);
    CHECK(b.finish == FinishReason::Stop);
    check_fixed_keys(b.text);
    CHECK(b.text == a.text);
    CHECK(b.tokens == a.tokens);
    // Usage counts the forced tokens as completion tokens.
    CHECK(on.results[i].usage.completion_tokens == static_cast<int>(b.tokens.size()));
    check_forced_logprobs(b);
    tokens += static_cast<int>(b.tokens.size());
  }
  CHECK(off.stats.forced_tokens == 0);
  CHECK(on.stats.forced_tokens > 0);
  CHECK(on.stats.generation_tokens == off.stats.generation_tokens);
  CHECK(on.stats.steps < off.stats.steps);
  WARN("tiny model, 4 requests, " << tokens << " tokens: " << on.stats.forced_tokens << " forced; steps "
                                  << off.stats.steps << " -> " << on.stats.steps);
}

TEST_CASE("forced tokens stop at max_tokens") {
  std::vector<GenerationRequest> reqs{greedy(random_tokens(10, 7, 120), 9)};
  const Outcome on = run(tiny_model(), schema(kFixedKeys), reqs, true);
  const ChoiceResult& c = on.results[0].choices[0];
  CHECK(c.finish == FinishReason::Length);
  CHECK(c.tokens.size() == 9);
  CHECK(on.results[0].usage.completion_tokens == 9);
}

TEST_CASE("forced tokens on stories260K: a const object and a schema with free values", "[testdata]") {
  if (!testing::testdata_available("models/stories260K.gguf")) return;
  const gguf::GgufFile f = gguf::GgufFile::open(testing::testdata_path("models/stories260K.gguf").string());
  auto tok = Tokenizer::from_gguf(f);
  std::vector<GenerationRequest> reqs;
  for (const char* p : {"Once upon a time", "The little dog", "Lily and Ben went"}) {
    std::vector<int32_t> prompt = tok->encode(p, true, false);
    reqs.push_back(greedy(prompt, 120));
  }
  // Everything but the first token is forced: the text is the same whatever the model prefers.
  const char* kConst = R"({"const": {"name": "Lily", "friends": ["Ben", "Tom"], "happy": true}})";
  const Outcome off = run(f, schema(kConst), reqs, false);
  const Outcome on = run(f, schema(kConst), reqs, true);
  for (size_t i = 0; i < reqs.size(); ++i) {
    const ChoiceResult& b = on.results[i].choices[0];
    INFO(b.text);
    CHECK(b.finish == FinishReason::Stop);
    CHECK(b.text == off.results[i].choices[0].text);
    CHECK(nlohmann::json::parse(b.text) == nlohmann::json::parse(R"({"name": "Lily", "friends": ["Ben", "Tom"], "happy": true})"));
    CHECK(on.results[i].usage.completion_tokens == static_cast<int>(b.tokens.size()));
  }
  CHECK(on.stats.forced_tokens > 0);
  CHECK(on.stats.steps < off.stats.steps);
  // Free values between fixed keys: valid either way.
  const Outcome free_on = run(f, schema(kFixedKeys), reqs, true);
  for (const auto& r : free_on.results) {
    CHECK(r.choices[0].finish == FinishReason::Stop);
    check_fixed_keys(r.choices[0].text);
  }
  CHECK(free_on.stats.forced_tokens > 0);
  WARN("stories260K const object: " << on.stats.forced_tokens << " of " << on.stats.generation_tokens
                                    << " tokens forced, steps " << off.stats.steps << " -> " << on.stats.steps
                                    << "; fixed keys: " << free_on.stats.forced_tokens << " of "
                                    << free_on.stats.generation_tokens << " forced; e.g. "
                                    << free_on.results[0].choices[0].text);
}
