// Token mask == brute force over SentencePiece vocabularies (llama-spm, phi-3: byte-fallback
// tokens, "▁" pieces), on random reachable states of several grammars.
#include "tests/support/testdata.h"
#include "tests/unit/structured/token_mask_check.h"

using namespace structured_test;

namespace {
// Every case walks a real vocabulary.
const pagoda::testing::RequiredTestdata needs_testdata{"vocab/ggml-vocab-llama-spm.gguf", "vocab/ggml-vocab-phi-3.gguf"};
}  // namespace

TEST_CASE("mask equals brute force: llama-spm vocabulary", "[structured]") {
  check_vocab("ggml-vocab-llama-spm.gguf", 22.0);
}

TEST_CASE("mask equals brute force: phi-3 vocabulary", "[structured]") {
  check_vocab("ggml-vocab-phi-3.gguf", 22.0);
}
