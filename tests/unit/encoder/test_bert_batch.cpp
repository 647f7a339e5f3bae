// BertModel::embed_batch: several inputs in one forward pass give, bit for bit, what one call
// each gives (the matmul is batch-invariant and attention stays within each input), whatever
// the batch's order, its mates' lengths, or the thread count; on bert (F16, mean pooling),
// nomic-bert (F32, CLS) and an xlm-roberta reranker (pairs with token types, the
// classification head); and a bad input refuses the whole batch, naming the input.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/encoder/bert_model.h"
#include "engine/encoder/bert_writer.h"
#include "engine/gguf/gguf.h"
#include "tests/support/test_files.h"

using namespace pagoda::encoder;
using pagoda::gguf::GgufFile;

namespace {

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Inputs of the given lengths with random ids; pairs split a third of the way in.
std::vector<EncoderInput> random_inputs(const std::vector<int>& lengths, int vocab, bool pairs, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<EncoderInput> in;
  for (int len : lengths) {
    EncoderInput e;
    for (int i = 0; i < len; ++i) e.tokens.push_back(int32_t(rng() % uint32_t(vocab)));
    if (pairs) e.segment_b = len / 3;
    in.push_back(std::move(e));
  }
  return in;
}

}  // namespace

TEST_CASE("embed_batch equals one embed() per input, bit for bit", "[encoder][bert]") {
  pagoda::testing::ScratchDir dir("bert-batch");
  struct Case {
    BertSpec spec;
    const char* what;
  };
  std::vector<Case> cases(3);
  cases[0].spec.type = pagoda::GgmlType::F16;
  cases[0].what = "bert f16 mean";
  cases[1].spec.arch = EncoderArch::NomicBert;
  cases[1].spec.type = pagoda::GgmlType::F32;
  cases[1].spec.pooling = Pooling::Cls;
  cases[1].what = "nomic-bert f32 cls";
  cases[2].spec.xlm_roberta = true;
  cases[2].spec.pooling = Pooling::Rank;
  cases[2].what = "xlm-roberta reranker";
  for (size_t c = 0; c < cases.size(); ++c) {
    BertSpec spec = cases[c].spec;
    spec.n_layers = 2;
    spec.seed = 40 + c;
    const std::string path = dir.file(std::string(cases[c].what).substr(0, 4) + std::to_string(c) + ".gguf");
    write_bert_model(spec, path);
    const auto file = GgufFile::open(path);
    const BertModel two(file, 2), one(file, 1);
    const bool pairs = spec.pooling == Pooling::Rank;
    // Lengths around the kernels' vector widths and row groups, up to the context (128).
    const auto inputs = random_inputs({1, 7, 16, 33, 100, 2, 128, 45, 64, 9}, two.config().vocab_size, pairs, 9 + c);
    std::vector<std::vector<float>> alone;
    for (const auto& in : inputs) alone.push_back(one.embed(in.tokens, in.segment_b));
    const auto batched = two.embed_batch(inputs);
    REQUIRE(batched.size() == inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      INFO(cases[c].what << ", input " << i << " of " << inputs[i].tokens.size() << " tokens");
      REQUIRE(batched[i].size() == size_t(pairs ? 1 : spec.dim));
      CHECK(same_bits(batched[i], alone[i]));
    }
    // Reversed, and the long inputs alone together: the same bits again.
    const std::vector<EncoderInput> reversed(inputs.rbegin(), inputs.rend());
    const auto back = one.embed_batch(reversed);
    for (size_t i = 0; i < inputs.size(); ++i) {
      INFO(cases[c].what << ", reversed, input " << i);
      CHECK(same_bits(back[inputs.size() - 1 - i], alone[i]));
    }
    const auto pair = two.embed_batch({inputs[4], inputs[6]});
    CHECK(same_bits(pair[0], alone[4]));
    CHECK(same_bits(pair[1], alone[6]));
    // Different inputs still give different results (nothing leaks or repeats across rows).
    CHECK_FALSE(same_bits(batched[3], batched[7]));
  }
}

TEST_CASE("embed_batch refuses a batch with a bad input, naming it", "[encoder][bert]") {
  pagoda::testing::ScratchDir dir("bert-batch-bad");
  BertSpec spec;
  spec.ctx = 16;
  write_bert_model(spec, dir.file("m.gguf"));
  const auto file = GgufFile::open(dir.file("m.gguf"));
  const BertModel model(file, 1);
  const EncoderInput good{{2, 10, 3}, -1};
  for (const EncoderInput& bad : {EncoderInput{{}, -1}, EncoderInput{std::vector<int32_t>(17, 5), -1},
                                  EncoderInput{{2, 100000, 3}, -1}}) {
    try {
      model.embed_batch({good, bad});
      FAIL("no throw");
    } catch (const EncoderError& e) {
      CHECK(std::string(e.what()).rfind("input 1: ", 0) == 0);
    }
    CHECK_FALSE(model.check_input(bad.tokens).empty());
  }
  CHECK(model.check_input(good.tokens).empty());
  CHECK(model.embed_batch({}).empty());
}
