// Structured output through the engine on the tiny random-weight model: every constrained
// choice spells what its grammar allows and ends with "stop" when the grammar is complete,
// unconstrained batch mates are untouched (bit for bit), and n > 1, logprobs, preemption and
// compile errors behave.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "engine/tokenizer/tokenizer.h"
#include "tests/unit/loop/engine_test_util.h"

using namespace pagoda;
using namespace pagoda::test;

namespace {

// The tiny model's prompt: a few byte tokens (the built-in vocabulary is byte-level).
GenerationRequest request(const std::shared_ptr<const structured::CompiledGrammar>& g, uint64_t seed,
                          int max_tokens = 120) {
  GenerationRequest r;
  r.prompt = random_tokens(12, seed, 120);
  r.sampling.temperature = 0.9f;
  r.sampling.seed = seed;
  r.sampling.grammar = g;
  r.stop.max_tokens = max_tokens;
  return r;
}

OutputConstraint schema(const char* text) {
  OutputConstraint c;
  c.kind = OutputConstraint::Kind::JsonSchema;
  c.source = text;
  return c;
}

const char* kPerson = R"({"type": "object", "properties": {
    "color": {"enum": ["red", "green", "blue"]},
    "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 4}, "maxItems": 2}},
  "required": ["color", "age", "tags"], "additionalProperties": false})";

void check_person(const ChoiceResult& c) {
  INFO(c.text);
  REQUIRE(c.finish == FinishReason::Stop);
  const auto j = nlohmann::json::parse(c.text);
  CHECK(j.size() == 3);
  CHECK((j["color"] == "red" || j["color"] == "green" || j["color"] == "blue"));
  CHECK(j["age"].is_number_integer());
  CHECK(j["age"].get<int>() >= 0);
  CHECK(j["age"].get<int>() <= 120);
  REQUIRE(j["tags"].is_array());
  CHECK(j["tags"].size() <= 2);
  for (const auto& t : j["tags"]) CHECK(t.get<std::string>().size() <= 4 * 4);  // 4 code points
}

// The tiny model with its tokenizer (the vocabulary grammars compile over) and an engine on it.
struct TinyEngine {
  std::unique_ptr<Tokenizer> tok = Tokenizer::from_gguf(tiny_model());
  std::unique_ptr<Model> model;
  std::unique_ptr<LlmEngine> engine;
  // `timed`: prefill chunks beside decodes follow the step-time target (a clock: chunking,
  // hence preemption, then varies from run to run).
  explicit TinyEngine(int kv_blocks, int batch = 256, int max_seqs = 16, bool timed = true)
      : model(load_model(tiny_model(), batch)), engine(make(kv_blocks, batch, max_seqs, timed)) {}
  std::unique_ptr<LlmEngine> make(int kv_blocks, int batch, int max_seqs, bool timed) {
    EngineConfig c = tiny_engine_config(kv_blocks, batch, max_seqs);
    if (!timed) c.max_step_ms = -1;
    return std::make_unique<LlmEngine>(*model, tok.get(), c);
  }
};

}  // namespace

TEST_CASE("constrained choices follow their JSON schema and stop when it is complete") {
  TinyEngine t(128, 256);
  LlmEngine& engine = *t.engine;
  const auto g = engine.compile_constraint(schema(kPerson));
  std::vector<GenerationRequest> reqs;
  for (uint64_t s = 1; s <= 6; ++s) reqs.push_back(request(g, s));
  auto streams = submit_all(engine, reqs);
  for (auto& st : streams) check_person(collect(*st).choices[0]);
  // The same constraint compiles once: the second call is a cache hit, the same object.
  CHECK(engine.compile_constraint(schema(kPerson)) == g);
}

TEST_CASE("a choice constraint picks one of the strings; greedy too") {
  TinyEngine t(64, 256);
  LlmEngine& engine = *t.engine;
  OutputConstraint c;
  c.kind = OutputConstraint::Kind::Choice;
  c.choices = {"yes", "no", "maybe so"};
  const auto g = engine.compile_constraint(c);
  for (float temperature : {0.0f, 1.0f}) {
    GenerationRequest r = request(g, 5);
    r.sampling.temperature = temperature;
    r.sampling.logprobs = 8;
    const auto out = collect(*submit_or_throw(engine, r)).choices[0];
    INFO(out.text);
    CHECK(out.finish == FinishReason::Stop);
    CHECK((out.text == "yes" || out.text == "no" || out.text == "maybe so"));
    // Top alternatives are possible tokens only: at the first step just "y", "n" and "m" are
    // (the built-in vocabulary spells them one byte each), not 8 tokens with -inf logprobs.
    REQUIRE_FALSE(out.top_tokens.empty());
    CHECK(out.top_tokens[0].size() <= 3);
    CHECK_FALSE(out.top_tokens[0].empty());
  }
}

TEST_CASE("unconstrained batch mates get the same tokens with or without constrained ones") {
  TinyEngine t(128, 256);
  LlmEngine& engine = *t.engine;
  const auto g = engine.compile_constraint(schema(kPerson));
  std::vector<GenerationRequest> free_reqs;
  for (uint64_t s = 11; s <= 13; ++s) {
    GenerationRequest r = request(nullptr, s, 30);
    r.sampling.logprobs = 2;
    free_reqs.push_back(r);
  }
  std::vector<ChoiceResult> alone;
  for (auto& st : submit_all(engine, free_reqs)) alone.push_back(collect(*st).choices[0]);

  std::vector<GenerationRequest> mixed = free_reqs;
  for (uint64_t s = 21; s <= 23; ++s) mixed.push_back(request(g, s));
  auto streams = submit_all(engine, mixed);
  for (size_t i = 0; i < streams.size(); ++i) {
    const auto out = collect(*streams[i]).choices[0];
    if (i < free_reqs.size()) CHECK(out == alone[i]);
    else check_person(out);
  }
}

TEST_CASE("n = 2 with logprobs: both choices valid, logprobs of the masked distribution") {
  TinyEngine t(128, 256);
  LlmEngine& engine = *t.engine;
  const auto g = engine.compile_constraint(schema(kPerson));
  GenerationRequest r = request(g, 3);
  r.n = 2;
  r.sampling.logprobs = 3;
  const auto res = collect(*submit_or_throw(engine, r), 2);
  for (const auto& c : res.choices) {
    check_person(c);
    REQUIRE(c.logprob_bits.size() == c.tokens.size());
    for (size_t k = 0; k < c.tokens.size(); ++k) {
      float lp;
      std::memcpy(&lp, &c.logprob_bits[k], 4);
      CHECK(std::isfinite(lp));  // the drawn token is allowed, so never -inf
      CHECK(lp <= 0.0f);
    }
  }
}

TEST_CASE("constrained choices survive preemption and recompute") {
  // A cache too small for all of them at once: sequences are preempted and recomputed.
  TinyEngine t(12, 64, 8, /*timed=*/false);
  LlmEngine& engine = *t.engine;
  const auto g = engine.compile_constraint(schema(kPerson));
  std::vector<GenerationRequest> reqs;
  for (uint64_t s = 31; s <= 36; ++s) reqs.push_back(request(g, s, 80));
  // The constrained ones may not overlap (the engine runs while they arrive): unconstrained
  // choices that outgrow the cache together preempt whatever the timing, the newest running
  // (constrained ones, when they overlap) first.
  const GenerationRequest pressure = preempting_request(12, 4242);
  const auto pressure_stream = submit_or_throw(engine, pressure);
  auto streams = submit_all(engine, reqs);
  for (auto& st : streams) check_person(collect(*st).choices[0]);
  for (const ChoiceResult& c : collect(*pressure_stream, pressure.n).choices)
    CHECK(c.tokens.size() == (size_t)pressure.stop.max_tokens);
  CHECK(wait_idle(engine).preemptions > 0);
}

TEST_CASE("constraints that do not compile are ConstraintErrors naming the problem") {
  TinyEngine t(16, 64);
  LlmEngine& engine = *t.engine;
  CHECK_THROWS_AS(engine.compile_constraint(schema(R"({"type": 5})")), ConstraintError);
  CHECK_THROWS_AS(engine.compile_constraint(schema("{not json")), ConstraintError);
  OutputConstraint gbnf;
  gbnf.kind = OutputConstraint::Kind::Gbnf;
  gbnf.source = "root ::= missing-rule";
  CHECK_THROWS_WITH(engine.compile_constraint(gbnf), Catch::Contains("missing-rule"));
  OutputConstraint regex;
  regex.kind = OutputConstraint::Kind::Regex;
  regex.source = "(unclosed";
  CHECK_THROWS_AS(engine.compile_constraint(regex), ConstraintError);
}
