// Token mask == brute force: on random reachable states (random walks of allowed tokens) of
// several grammars, the mask must equal running every token's bytes through a copy of the
// matcher, over the real vocabularies in ../shared/testdata/vocab (SPM and BPE, including
// deepseek-llm's 100k tokens). Also masks computed by concurrent threads sharing one grammar.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <random>
#include <thread>

#include "tests/unit/structured/structured_test_util.h"

using namespace structured_test;

namespace {

std::vector<uint32_t> brute_mask(const GrammarMatcher& m, const TokenVocabulary& v) {
  std::vector<uint32_t> bits(v.mask_words(), 0);
  for (int32_t id = 0; id < v.size(); ++id) {
    bool allowed;
    if (v.is_eog(id)) {
      allowed = m.can_end();
    } else if (v.is_special(id) || v.token_bytes(id).empty() || m.is_terminated()) {
      allowed = false;
    } else {
      // Runs the bytes through a copy of the matcher's state (no mask code involved).
      allowed = m.is_token_allowed(id);
      if (id % 997 == 0) {  // and now and then through a whole copy of the matcher
        GrammarMatcher copy = m;
        REQUIRE(copy.accept_bytes(v.token_bytes(id)) == allowed);
      }
    }
    if (allowed) bits[id / 32] |= 1u << (id % 32);
  }
  return bits;
}

std::string describe_diff(const std::vector<uint32_t>& got, const std::vector<uint32_t>& want,
                          const TokenVocabulary& v) {
  std::string out;
  int shown = 0;
  for (int32_t id = 0; id < v.size() && shown < 5; ++id) {
    bool g = (got[id / 32] >> (id % 32)) & 1, w = (want[id / 32] >> (id % 32)) & 1;
    if (g != w) {
      out += "token " + std::to_string(id) + " '" + v.token_bytes(id) + "': mask " +
             (g ? "allows" : "forbids") + ", brute force " + (w ? "allows" : "forbids") + "\n";
      ++shown;
    }
  }
  return out;
}

std::vector<int32_t> allowed_ids(const std::vector<uint32_t>& bits, int32_t n) {
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < n; ++id)
    if ((bits[id / 32] >> (id % 32)) & 1) ids.push_back(id);
  return ids;
}

// Random walks through `gbnf`, checking the mask against brute force at every state, until
// `states` states were checked or `seconds` passed. Returns the number of states checked.
int check_random_states(const std::string& name, const std::string& gbnf,
                        const std::shared_ptr<const TokenVocabulary>& vocab, int states,
                        double seconds, uint32_t seed) {
  auto grammar = compile_gbnf(gbnf, vocab);
  std::mt19937 rng(seed);
  auto t0 = std::chrono::steady_clock::now();
  int checked = 0;
  for (int walk = 0; checked < states; ++walk) {
    GrammarMatcher m(grammar);
    std::string text;
    for (int step = 0; step < 60 && checked < states; ++step) {
      std::vector<uint32_t> mask = m.mask();
      std::vector<uint32_t> want = brute_mask(m, *vocab);
      ++checked;
      INFO(name << ", walk " << walk << ", step " << step << ", after: " << text);
      if (mask != want) FAIL(describe_diff(mask, want, *vocab));
      std::vector<int32_t> ids = allowed_ids(mask, vocab->size());
      REQUIRE(!ids.empty());  // a reachable state always allows something (EOG at least)
      // Prefer short tokens now and then so walks get through the structure, not only strings.
      std::vector<int32_t> shorter;
      if (rng() % 3 == 0)
        for (int32_t id : ids)
          if (!vocab->is_eog(id) && vocab->token_bytes(id).size() <= 2) shorter.push_back(id);
      const std::vector<int32_t>& pool = shorter.empty() ? ids : shorter;
      int32_t pick = pool[rng() % pool.size()];
      if (m.can_end() && rng() % 8 == 0) break;
      if (vocab->is_eog(pick)) {
        REQUIRE(m.accept_token(pick));
        break;
      }
      REQUIRE(m.accept_token(pick));
      text += vocab->token_bytes(pick);
    }
    double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (elapsed > seconds) break;
  }
  return checked;
}

struct GrammarCase {
  const char* name;
  const char* gbnf;
};

const GrammarCase kCases[] = {
    {"json", kJsonGbnf},
    {"person schema", kPersonSchemaGbnf},
    {"tool calls", kToolCallsGbnf},
    {"unicode", kUnicodeGbnf},
    {"ambiguous", "root ::= (\"a\" | \"ab\" | \"b\" | [a-z] [a-z])* \" \"? (\"end\" | \"ending\")\n"},
    {"nested lists", "root ::= item\nitem ::= \"[\" (item (\", \" item)*)? \"]\" | [0-9]+ | \"'\" [^'\\n]{0,12} \"'\"\n"},
};

void check_vocab(const std::string& file, int states_per_grammar, double seconds_per_grammar) {
  std::string path = std::string(PAGODA_TESTDATA_DIR) + "/vocab/" + file;
  if (!std::filesystem::exists(path)) {
    WARN("skipped: " << path << " missing");
    return;
  }
  auto vocab = load_vocabulary(path);
  uint32_t seed = 1234;
  for (const GrammarCase& c : kCases) {
    int n = check_random_states(file + ": " + c.name, c.gbnf, vocab, states_per_grammar,
                                seconds_per_grammar, seed++);
    INFO(file << ": " << c.name);
    CHECK(n >= 20);
    WARN(file << ": " << c.name << ": " << n << " states checked");
  }
}

}  // namespace

TEST_CASE("mask equals brute force: llama-spm vocabulary", "[structured]") {
  check_vocab("ggml-vocab-llama-spm.gguf", 400, 8.0);
}

TEST_CASE("mask equals brute force: phi-3 vocabulary", "[structured]") {
  check_vocab("ggml-vocab-phi-3.gguf", 300, 6.0);
}

TEST_CASE("mask equals brute force: gpt-2 vocabulary", "[structured]") {
  check_vocab("ggml-vocab-gpt-2.gguf", 250, 6.0);
}

TEST_CASE("mask equals brute force: deepseek-llm vocabulary", "[structured]") {
  check_vocab("ggml-vocab-deepseek-llm.gguf", 250, 8.0);
}

TEST_CASE("masks from concurrent threads sharing one grammar", "[structured]") {
  std::string path = std::string(PAGODA_TESTDATA_DIR) + "/vocab/ggml-vocab-gpt-2.gguf";
  if (!std::filesystem::exists(path)) {
    WARN("skipped: " << path << " missing");
    return;
  }
  auto vocab = load_vocabulary(path);
  auto grammar = compile_gbnf(kPersonSchemaGbnf, vocab);  // cold cache: threads fill it together
  std::atomic<int> mismatches{0}, states{0};
  auto worker = [&](uint32_t seed) {
    std::mt19937 rng(seed);
    for (int walk = 0; walk < 3; ++walk) {
      GrammarMatcher m(grammar);
      for (int step = 0; step < 25; ++step) {
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
