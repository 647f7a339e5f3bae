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
