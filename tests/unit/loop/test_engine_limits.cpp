// The limits the engine owns and the server reads through EngineApi: the admission bound, the
// sequences in flight, and the max_tokens rule (MaxTokensRule: cap, defaults, the context).
#include <catch2/catch.hpp>

#include <chrono>
#include <optional>
#include <thread>

#include "engine/loop/engine.h"
#include "engine_test_util.h"

using namespace pagoda;
using namespace pagoda::test;

TEST_CASE("MaxTokensRule: the cap, the defaults and the context") {
  const MaxTokensRule shift{100, 0, true};
  CHECK(shift.cap() == 100);                            // no limit: the context
  CHECK(shift.resolve(std::nullopt, 0, 30) == 70);      // unset, no default: the rest of the context
  CHECK(shift.resolve(std::nullopt, 16, 30) == 16);     // unset: the endpoint's default
  CHECK(shift.resolve(std::nullopt, 16, 95) == 5);      // ... never past the context
  CHECK(shift.resolve(80, 16, 30) == 80);               // asked, context shift on: past the context
  CHECK(shift.resolve(0, 16, 30) == 1);                 // the prompt alone: one token, dropped
  const MaxTokensRule no_shift{100, 50, false};
  CHECK(no_shift.cap() == 50);
  CHECK(no_shift.resolve(40, 16, 90) == 10);  // asked, context shift off: the rest of the context
  CHECK(no_shift.resolve(40, 16, 10) == 40);
}

TEST_CASE("LlmEngine: the admission bound, in-flight count and max_tokens rule come from its configuration") {
  EngineConfig cfg = tiny_engine_config(128, 512, 2);
  cfg.max_queue = 3;
  cfg.max_tokens_limit = 77;
  cfg.context_shift = false;
  auto model = load_model(tiny_model(), cfg.max_batch_tokens);
  LlmEngine engine(*model, nullptr, cfg);
  CHECK(engine.admission_limit() == 5);
  const MaxTokensRule rule = engine.max_tokens_rule();
  CHECK(rule.context == engine.context_size());
  CHECK(rule.limit == 77);
  CHECK(rule.cap() == 77);
  CHECK(!rule.context_shift);
  CHECK(engine.inflight_seqs() == 0);

  GenerationRequest req;
  req.prompt = random_tokens(8, 3);
  req.n = 5;
  req.stop.max_tokens = 0;  // the engine resolves it: the rest of the context, so it runs a while
  req.stop.ignore_eos = true;
  auto stream = submit_or_throw(engine, req);
  CHECK(engine.inflight_seqs() == 5);
  // One more sequence is over the bound the handlers read.
  GenerationRequest one = req;
  one.n = 1;
  SubmitError err;
  CHECK(engine.submit(one, &err) == nullptr);
  CHECK(err.code == "queue_full");
  stream->abort();
  collect(*stream, 5);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (engine.inflight_seqs() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(engine.inflight_seqs() == 0);
}
