// StepMasks (masks of a step's constrained rows on worker threads) gives exactly what each
// matcher's own fill_mask gives, for any mix of constrained and free rows, step after step;
// apply_token_mask leaves allowed logits alone and sends the others to -infinity.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "engine/sampling/grammar_masks.h"
#include "engine/structured/structured.h"

using namespace pagoda;

namespace {

std::shared_ptr<const structured::TokenVocabulary> small_vocab() {
  std::vector<std::string> bytes = {"", "{", "}", "\"", "a", "b", "ab", ":", ",", "1", "12", " ", "\"a\""};
  std::vector<bool> eog(bytes.size(), false), special(bytes.size(), false);
  eog[0] = special[0] = true;  // token 0: end of generation
  return structured::TokenVocabulary::build(bytes, eog, special);
}

}  // namespace

TEST_CASE("StepMasks equals each matcher's own mask") {
  const auto vocab = small_vocab();
  const auto g = structured::compile_gbnf(
      R"(root ::= "{" pair ("," pair)* "}"
         pair ::= "\"" [ab]+ "\":" [0-9]+)", vocab);
  std::mt19937 rng(7);
  for (int workers : {1, 3}) {
    StepMasks masks(workers);
    std::vector<structured::GrammarMatcher> rows(5, structured::GrammarMatcher(g));
    for (int step = 0; step < 20; ++step) {
      std::vector<const structured::GrammarMatcher*> ptrs;
      for (size_t i = 0; i < rows.size(); ++i) ptrs.push_back(i % 2 == 1 ? nullptr : &rows[i]);  // odd rows free
      masks.start(ptrs, vocab->mask_words());
      masks.wait();
      for (size_t i = 0; i < rows.size(); ++i) {
        if (i % 2 == 1) {
          CHECK(masks.mask(i) == nullptr);
          continue;
        }
        const std::vector<uint32_t> want = rows[i].mask();
        REQUIRE(masks.mask(i) != nullptr);
        CHECK(std::vector<uint32_t>(masks.mask(i), masks.mask(i) + want.size()) == want);
        // Advance by a random allowed token (not the end) so rows diverge.
        std::vector<int32_t> allowed;
        for (int32_t id = 1; id < vocab->size(); ++id)
          if ((want[id / 32] >> (id % 32)) & 1u) allowed.push_back(id);
        if (!allowed.empty()) REQUIRE(rows[i].accept_token(allowed[rng() % allowed.size()]));
        else rows[i].reset();
      }
    }
  }
}

TEST_CASE("StepMasks with no constrained row wakes nobody and returns at once") {
  StepMasks masks(2);
  masks.start({nullptr, nullptr}, 4);
  masks.wait();
  CHECK_FALSE(masks.any());
  CHECK(masks.mask(0) == nullptr);
}

TEST_CASE("apply_token_mask and allowed_tokens") {
  std::vector<float> logits(70, 1.5f);
  std::vector<uint32_t> bits(3, 0);
  for (int id : {0, 31, 32, 69}) bits[id / 32] |= 1u << (id % 32);
  CHECK(allowed_tokens(bits.data(), 70) == 4);
  CHECK(allowed_tokens(bits.data(), 69) == 3);  // bits past the vocabulary do not count
  CHECK(apply_token_mask(logits.data(), 70, bits.data()) == 4);
  for (int id = 0; id < 70; ++id) {
    const bool allowed = id == 0 || id == 31 || id == 32 || id == 69;
    if (allowed) CHECK(logits[id] == 1.5f);
    else CHECK(std::isinf(logits[id]));
  }
}
