// forced_tokens (engine/loop/forced_tokens.h) over a real byte-level BPE vocabulary
// (deepseek-llm): the forced tokens spell the start of the text the grammar forces, are each
// allowed in turn, and keep the boundary with the sampled token where the tokenizer puts it
// (nothing is forced when the sampled token would have merged with the forced text).
#include <catch2/catch.hpp>

#include "engine/gguf/gguf.h"
#include "engine/loop/forced_tokens.h"
#include "engine/sampling/output_constraint.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/support/testdata.h"

using namespace pagoda;

TEST_CASE("forced tokens over deepseek-llm's vocabulary", "[testdata]") {
  if (!testing::testdata_available("vocab/ggml-vocab-deepseek-llm.gguf")) return;
  const gguf::GgufFile file = gguf::GgufFile::open(testing::testdata_path("vocab/ggml-vocab-deepseek-llm.gguf").string());
  const auto tok = Tokenizer::from_gguf(file);
  const auto vocab = token_vocabulary(*tok);
  const auto g = structured::compile_gbnf(
      R"(root ::= "{\"name\": \"" [a-z]+ "\", \"is_available\": " ("true" | "false") ", \"kind\": \"fixed\"}")", vocab);
  // (text already accepted, the sampled token's text)
  const std::pair<const char*, const char*> cases[] = {
      {"", "{"}, {"{\"name\": \"", "abc"}, {"{\"name\": \"abc", "\","}, {"{\"name\": \"abc\", \"is_available\": ", "true"},
      {"{\"name\": \"abc\", \"is_available\": ", "false"}};
  int nonempty = 0;
  for (const auto& [done, sampled_text] : cases) {
    INFO(done << " + " << sampled_text);
    const std::vector<int32_t> sampled_ids = tok->encode(sampled_text, false, false);
    REQUIRE(sampled_ids.size() == 1);
    const int32_t sampled = sampled_ids[0];
    structured::GrammarMatcher after(g);
    REQUIRE(after.accept_bytes(done));
    REQUIRE(after.accept_token(sampled));
    const std::string forced_text = after.forced_bytes();
    const std::vector<int32_t> forced = forced_tokens(after, *tok, sampled, 32);
    std::string spelled;
    structured::GrammarMatcher m = after;
    for (int32_t id : forced) {
      CHECK(m.accept_token(id));
      spelled += vocab->token_bytes(id);
    }
    CHECK(forced_text.compare(0, spelled.size(), spelled) == 0);
    const std::vector<int32_t> whole = tok->encode(std::string(sampled_text) + forced_text, false, false);
    if (whole.empty() || whole[0] != sampled) {
      CHECK(forced.empty());  // the sampled token would have merged with the forced text
    } else {
      // The forced tokens are the tokenizer's own after the sampled one.
      REQUIRE(whole.size() >= forced.size() + 1);
      CHECK(std::vector<int32_t>(whole.begin() + 1, whole.begin() + 1 + static_cast<long>(forced.size())) == forced);
    }
    nonempty += forced.empty() ? 0 : 1;
  }
  CHECK(nonempty >= 2);
  // Nothing to force where the grammar has a choice: right after the opening quote of the name.
  structured::GrammarMatcher open(g);
  REQUIRE(open.accept_bytes("{\"name\": "));
  const int32_t quote = tok->encode("\"", false, false).at(0);
  REQUIRE(open.accept_token(quote));
  CHECK(forced_tokens(open, *tok, quote, 32).empty());
}
