// Token mask == brute force over byte-level BPE vocabularies (gpt-2, deepseek-llm's 100k
// tokens), on random reachable states of several grammars.
#include "tests/support/testdata.h"
#include "tests/unit/structured/token_mask_check.h"

using namespace structured_test;

namespace {
// Every case walks a real vocabulary.
const pagoda::testing::RequiredTestdata needs_testdata{"vocab/ggml-vocab-gpt-2.gguf", "vocab/ggml-vocab-deepseek-llm.gguf"};
}  // namespace

TEST_CASE("mask equals brute force: gpt-2 vocabulary", "[structured]") {
  check_vocab("ggml-vocab-gpt-2.gguf", 14.0);
}

TEST_CASE("mask equals brute force: deepseek-llm vocabulary", "[structured]") {
  check_vocab("ggml-vocab-deepseek-llm.gguf", 26.0);
}

// Loops entered after a few counted characters (a minimum length; classes narrower first, a
// class less letters): the mask right after the opening quote and a character or two in,
// alone (the walk covers the whole stack) and inside a list (confined to the top frames).
TEST_CASE("mask equals brute force: loops after counted characters", "[structured]") {
  for (const char* file : {"ggml-vocab-gpt-2.gguf", "ggml-vocab-deepseek-llm.gguf"}) {
    auto vocab = load_vocabulary(std::string(PAGODA_TESTDATA_DIR) + "/vocab/" + file);
    const std::string chr = R"(([^"\\\x00-\x1F] | "\\" ["\\/bfnrt]))";
    const std::string items[] = {
        "\"\\\"\" " + chr + "{1,} \"\\\"\"",
        "\"\\\"\" " + chr + "{3,} \"\\\"\"",
        "\"\\\"\" [a-z] [a-z0-9] " + chr + "* \"\\\"\"",
        "\"\\\"\" ([^\"\\\\\\x00-\\x1Fq] | \"\\\\\" [\"\\\\/bfnrt]){2,} \"\\\"\"",
    };
    for (const std::string& item : items)
      for (bool listed : {false, true}) {
        const std::string gbnf = listed ? "root ::= \"[\" item (\",\" item)* \"]\"\nitem ::= " + item + "\n"
                                        : "root ::= " + item + "\n";
        auto grammar = compile_gbnf(gbnf, vocab);
        for (const char* prefix : {"", "a", "x1", "\\n", "\xc3\xa9"}) {
          GrammarMatcher m(grammar);
          REQUIRE(m.accept_bytes(listed ? "[\"" : "\""));
          if (!m.accept_bytes(prefix)) continue;
          INFO(file << ": " << gbnf << "after: " << prefix);
          const std::vector<uint32_t> want = brute_mask(m, *vocab);
          const std::vector<uint32_t> got = m.mask();
          if (got != want) FAIL(describe_diff(got, want, *vocab));
        }
      }
  }
}
