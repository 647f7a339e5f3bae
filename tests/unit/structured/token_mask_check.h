// Shared by the mask tests: brute-force masks (every token's bytes through a copy of the
// matcher state) and random walks comparing them with fill_mask at every state reached.
#pragma once

#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <random>

#include "tests/unit/structured/structured_test_util.h"

namespace structured_test {


inline std::vector<uint32_t> brute_mask(const GrammarMatcher& m, const TokenVocabulary& v) {
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

inline std::string describe_diff(const std::vector<uint32_t>& got, const std::vector<uint32_t>& want,
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

inline std::vector<int32_t> allowed_ids(const std::vector<uint32_t>& bits, int32_t n) {
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < n; ++id)
    if ((bits[id / 32] >> (id % 32)) & 1) ids.push_back(id);
  return ids;
}

// Random walks through `gbnf`, checking the mask against brute force at every state, until
// `states` states were checked or `seconds` passed. Returns the number of states checked.
inline int check_random_states(const std::string& name, const std::string& gbnf,
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
      if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > seconds)
        break;
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

inline const GrammarCase kCases[] = {
    {"json", kJsonGbnf},
    {"person schema", kPersonSchemaGbnf},
    {"tool calls", kToolCallsGbnf},
    {"unicode", kUnicodeGbnf},
    {"ambiguous", "root ::= (\"a\" | \"ab\" | \"b\" | [a-z] [a-z])* \" \"? (\"end\" | \"ending\")\n"},
    {"nested lists", "root ::= item\nitem ::= \"[\" (item (\", \" item)*)? \"]\" | [0-9]+ | \"'\" [^'\\n]{0,12} \"'\"\n"},
    // Loop states (mask_cache's precomputed vocabulary splits): a loop entered one character
    // after its start where some first characters go elsewhere ("x" after "b"), loops ending
    // the grammar, and a loop over non-ASCII characters.
    {"loops", R"G(root ::= "{" ("\"k\": \"" [^"\\]* | "\"b\": \"" ("x" [a-z]* | [^"\\x] [^"\\]*)) "\"" (", " [^\n]* "\n")? "}" (" " [^{}]*)?
)G"},
    {"non-ascii loop", R"G(root ::= "<" [^<>a-z\u00e9]* ">" ([0-9a-z ]* ".")*
)G"},
    // Loops reached after a few counted characters (minimum lengths): items of a list, so the
    // walks are confined to the top frames too.
    {"counted loops", R"G(root ::= "[" item ("," item)* "]"
item ::= "\"" ([^"\\\x00-\x1F] | "\\" ["\\/bfnrt]){2,} "\"" | "'" [a-z0-9]{3,} [^'\n]* "'" | "<" [^<>]{4,} ">"
)G"},
    // JSON string loops less a few ASCII letters (keys of patternProperties): their splits are
    // derived from the prewarmed JSON string split.
    {"loops less letters", R"G(root ::= "\"" ([^"\\\x00-\x1Fbf] | "\\" ["\\/bfnrt])* ("f" ([^"\\\x00-\x1F] | "\\" ["\\/bfnrt])*)? "\"" (" \"" ([^"\\\x00-\x1Fa] | "\\" ["\\/bfnrt])* "\"")*
)G"},
};

inline void check_vocab(const std::string& file, double seconds) {
  std::string path = std::string(PAGODA_TESTDATA_DIR) + "/vocab/" + file;
  if (!std::filesystem::exists(path)) {
    WARN("skipped: " << path << " missing");
    return;
  }
  auto vocab = load_vocabulary(path);
  uint32_t seed = 1234;
  int total = 0;
  double per_grammar = seconds / (sizeof(kCases) / sizeof(kCases[0]));
  for (const GrammarCase& c : kCases) {
    int n = check_random_states(file + ": " + c.name, c.gbnf, vocab, 100000, per_grammar, seed++);
    INFO(file << ": " << c.name);
    CHECK(n >= 3);
    total += n;
  }
  WARN(file << ": " << total << " random states checked against brute force");
}

}  // namespace structured_test
