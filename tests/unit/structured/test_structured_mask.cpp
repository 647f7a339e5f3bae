// Token mask == brute force on a synthetic vocabulary of random byte strings (split and invalid
// UTF-8 included; small, so thousands of states are checked quickly), and masks computed by
// concurrent threads sharing one compiled grammar (its mask cache filled by both).
#include <atomic>
#include <thread>

#include "tests/support/testdata.h"
#include "tests/unit/structured/token_mask_check.h"

using namespace structured_test;

namespace {

std::shared_ptr<const TokenVocabulary> random_vocab(uint32_t seed, int n) {
  std::mt19937 rng(seed);
  const std::string pieces[] = {"{", "}", "[", "]", "\"", ":", ",", " ", "\n", "\\", "a", "b", "x",
                                "true", "null", "0", "1", "9", ".", "-", "e", "é", "→", "😀", "日",
                                "\xC3", "\xA9", "\xE2", "\x86", "\xF0", "\x9F", "\xFF", "name",
                                "age", "u", "\t", "α", "ω"};
  std::vector<std::string> bytes;
  bytes.push_back("</s>");
  bytes.push_back("<ctl>");
  for (const std::string& p : pieces) bytes.push_back(p);
  for (int i = 0; i < 256; ++i) bytes.push_back(std::string(1, static_cast<char>(i)));
  while (static_cast<int>(bytes.size()) < n) {
    std::string t;
    int parts = 1 + rng() % 4;
    for (int k = 0; k < parts; ++k) t += pieces[rng() % (sizeof(pieces) / sizeof(pieces[0]))];
    bytes.push_back(t);
  }
  std::vector<bool> eog(bytes.size()), special(bytes.size());
  eog[0] = special[1] = true;
  return TokenVocabulary::build(bytes, eog, special);
}

}  // namespace

TEST_CASE("mask equals brute force: synthetic byte vocabulary", "[structured]") {
  auto vocab = random_vocab(99, 3000);
  uint32_t seed = 1;
  int total = 0;
  for (const GrammarCase& c : kCases) {
    int n = check_random_states(c.name, c.gbnf, vocab, 600, 10.0, seed++);
    CHECK(n >= 100);
    total += n;
  }
  WARN("synthetic vocabulary: " << total << " random states checked against brute force");
}

TEST_CASE("masks from concurrent threads sharing one grammar", "[structured][testdata]") {
  if (!pagoda::testing::testdata_available("vocab/ggml-vocab-gpt-2.gguf")) return;
  std::string path = std::string(PAGODA_TESTDATA_DIR) + "/vocab/ggml-vocab-gpt-2.gguf";
  auto vocab = load_vocabulary(path);
  auto grammar = compile_gbnf(kPersonSchemaGbnf, vocab);  // cold cache: threads fill it together
  std::atomic<int> mismatches{0}, states{0};
  auto worker = [&](uint32_t seed) {
    std::mt19937 rng(seed);
    for (int walk = 0; walk < 2; ++walk) {
      GrammarMatcher m(grammar);
      for (int step = 0; step < 15; ++step) {
        std::vector<uint32_t> mask = m.mask();
        if (mask != brute_mask(m, *vocab)) mismatches++;
        states++;
        std::vector<int32_t> ids = allowed_ids(mask, vocab->size());
        int32_t pick = ids[rng() % ids.size()];
        if (vocab->is_eog(pick) || !m.accept_token(pick)) break;
      }
    }
  };
  std::thread a(worker, 1), b(worker, 2);
  a.join();
  b.join();
  CHECK(mismatches == 0);
  CHECK(states > 20);
}
