// EncoderEngine's step loop: which queued inputs a step takes (inputs_in_step: whole inputs in
// arrival order within the token and input budgets, one long input alone), and, through the
// engine, many concurrent requests answered with exactly the vectors of one
// BertModel::embed() each, in fewer forward passes than requests, with an input the model
// refuses finishing with an error beside good ones, and no request left in flight.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/encoder/bert_model.h"
#include "engine/encoder/bert_writer.h"
#include "engine/encoder/encoder_engine.h"
#include "engine/gguf/gguf.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/support/test_files.h"

using namespace pagoda;
using namespace pagoda::encoder;

TEST_CASE("inputs_in_step: whole inputs in order within the token and input budgets", "[encoder]") {
  CHECK(inputs_in_step({}, 512, 16) == 0);
  CHECK(inputs_in_step({100, 100, 100, 100, 100, 100}, 512, 16) == 5);  // 500 tokens; a 6th goes over
  CHECK(inputs_in_step({100, 100, 100}, 512, 2) == 2);                  // the input budget
  CHECK(inputs_in_step({600, 10}, 512, 16) == 1);                       // longer than the budget: alone
  CHECK(inputs_in_step({10, 600, 10}, 512, 16) == 1);                  // arrival order: no skipping ahead
  CHECK(inputs_in_step({512}, 512, 16) == 1);
  CHECK(inputs_in_step({256, 256, 1}, 512, 16) == 2);
  CHECK(inputs_in_step({5, 5}, 512, 0) == 1);                           // at least one input a step
}

namespace {

struct Outcome {
  std::vector<float> vec;
  FinishReason finish = FinishReason::None;
  std::string error;
};

Outcome drain(RequestStream& s) {
  Outcome o;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!s.done()) {
    if (std::chrono::steady_clock::now() > deadline) throw std::runtime_error("request did not finish in time");
    auto d = s.next(std::chrono::milliseconds(100));
    if (!d) continue;
    if (!d->embedding.empty()) o.vec = d->embedding;
    if (d->finish != FinishReason::None) o.finish = d->finish, o.error = d->error;
  }
  return o;
}

}  // namespace

TEST_CASE("the encoder engine batches concurrent requests into steps, results as one embed() each", "[encoder]") {
  testing::ScratchDir dir("encoder-engine");
  for (encoder::Pooling pooling : {encoder::Pooling::Mean, encoder::Pooling::Rank}) {
    BertSpec spec;
    spec.pooling = pooling;
    spec.seed = 17;
    write_bert_model(spec, dir.file("m.gguf"));
    const auto file = gguf::GgufFile::open(dir.file("m.gguf"));
    const BertModel model(file, 2);
    const auto tok = Tokenizer::from_gguf(file);
    const bool rank = pooling == encoder::Pooling::Rank;
    // 40 requests of 1 to 60 tokens (sometimes several 60s in a row, so steps are cut by the token budget).
    std::mt19937 rng(3);
    std::vector<GenerationRequest> reqs;
    for (int i = 0; i < 40; ++i) {
      GenerationRequest r;
      r.embed = true;
      const int len = i % 7 == 3 ? 60 : 1 + int(rng() % 40);
      for (int t = 0; t < len; ++t) r.prompt.push_back(int32_t(rng() % uint32_t(model.config().vocab_size)));
      r.segment_b = rank ? len / 2 : -1;
      if (i == 11) r.prompt[0] = model.config().vocab_size + 5;  // refused by the model at its step
      reqs.push_back(std::move(r));
    }
    EncoderEngine engine(model, *tok, EncoderEngine::Limits{0, 128, 8});
    engine.set_paused(true);  // every request queued before the first step: the batching is fixed
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const auto& r : reqs) {
      SubmitError err;
      streams.push_back(engine.submit(r, &err));
      REQUIRE(streams.back() != nullptr);
    }
    CHECK(engine.stats().waiting == 40);
    engine.set_paused(false);
    for (size_t i = 0; i < reqs.size(); ++i) {
      INFO("pooling " << int(pooling) << ", request " << i << " of " << reqs[i].prompt.size() << " tokens");
      const Outcome o = drain(*streams[i]);
      if (i == 11) {
        CHECK(o.finish == FinishReason::Error);
        CHECK(o.error.find("outside the vocabulary") != std::string::npos);
        CHECK(o.vec.empty());
        continue;
      }
      REQUIRE(o.finish == FinishReason::Stop);
      const std::vector<float> want = model.embed(reqs[i].prompt, reqs[i].segment_b);
      REQUIRE(o.vec.size() == want.size());
      CHECK(std::memcmp(o.vec.data(), want.data(), want.size() * sizeof(float)) == 0);
      CHECK(streams[i]->usage().prompt_tokens == int(reqs[i].prompt.size()));
    }
    // A step counts itself before it hands out its results: the counters are final here.
    CHECK(engine.inflight_seqs() == 0);
    const EngineStats st = engine.stats();
    // The steps inputs_in_step cuts from the whole queue, input budget 8, token budget 128.
    std::vector<int64_t> lengths;
    for (const auto& r : reqs) lengths.push_back(int64_t(r.prompt.size()));
    uint64_t want_steps = 0;
    for (size_t at = 0; at < lengths.size(); ++want_steps)
      at += inputs_in_step(std::vector<int64_t>(lengths.begin() + std::ptrdiff_t(at), lengths.end()), 128, 8);
    CHECK(st.steps == want_steps);
    CHECK(want_steps >= 5);
    CHECK(want_steps < 20);
    uint64_t tokens = 0;
    for (const auto& r : reqs) tokens += r.prompt.size();
    CHECK(st.prompt_tokens == tokens);
  }
}

TEST_CASE("the encoder engine refuses generation, empty and over-long inputs at submit", "[encoder]") {
  testing::ScratchDir dir("encoder-engine-refuse");
  BertSpec spec;
  spec.ctx = 16;
  write_bert_model(spec, dir.file("m.gguf"));
  const auto file = gguf::GgufFile::open(dir.file("m.gguf"));
  const BertModel model(file, 1);
  const auto tok = Tokenizer::from_gguf(file);
  EncoderEngine engine(model, *tok, EncoderEngine::Limits{});
  SubmitError err;
  GenerationRequest gen;
  gen.prompt = {2, 5, 3};
  CHECK(engine.submit(gen, &err) == nullptr);
  CHECK(err.code == "model_not_generative");
  GenerationRequest empty;
  empty.embed = true;
  CHECK(engine.submit(empty, &err) == nullptr);
  CHECK(err.code == "empty_input");
  GenerationRequest lng;
  lng.embed = true;
  lng.prompt.assign(17, 5);
  CHECK(engine.submit(lng, &err) == nullptr);
  CHECK(err.code == "context_length_exceeded");
}
