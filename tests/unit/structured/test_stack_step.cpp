// The mask walks' shortcuts against the plain definitions: a byte cell (stack_set.h byte_cell, the
// bytes a state treats alike, advanced once for all of them by the mask walks) must hold only
// bytes that advance the state exactly as the byte it was asked about, on random reachable
// states of the mask tests' grammars; so must the first byte of a UTF-8 class in a grammar
// whose edges fold (utf8_classes.h); the vocabulary's lcp_drop jump must match its definition.
#include <random>

#include "engine/structured/stack_set.h"
#include "engine/structured/token_vocabulary.h"
#include "engine/structured/utf8_classes.h"
#include "tests/unit/structured/token_mask_check.h"

using namespace structured_test;

namespace {

// Checks the cells of `s`, which partition the bytes: each asked about at its first byte, every
// byte in it against that one. Returns the bytes some stack of `s` takes.
std::vector<uint8_t> check_cells(const CompiledGrammar::Impl& g, const StackSet& s, const StepLimits& limits) {
  std::vector<uint8_t> live;
  StackSet want, got;
  for (int c = 0; c < 256;) {
    uint8_t lo = 0, hi = 0;
    byte_cell(g, s, static_cast<uint8_t>(c), lo, hi);
    REQUIRE(lo == c);
    REQUIRE(c <= hi);
    const bool want_ok = advance_byte(g, s, static_cast<uint8_t>(c), want, limits);
    for (int b = lo; b <= hi; ++b) {
      if (want_ok && !want.empty()) live.push_back(static_cast<uint8_t>(b));
      if (b == c) continue;
      const bool ok = advance_byte(g, s, static_cast<uint8_t>(b), got, limits);
      if (ok != want_ok || !(got == want))
        FAIL("byte " << b << " in the cell [" << c << ", " << int(hi) << "] steps unlike byte " << c);
    }
    c = hi + 1;
  }
  return live;
}

}  // namespace

namespace {

// A grammar whose edges fold (edges_fold_utf8) steps every byte as the first byte of its UTF-8
// class: the folded vocabulary's walk (mask_cache) relies on it.
void check_fold(const CompiledGrammar::Impl& g, const StackSet& s, const StepLimits& limits) {
  StackSet want, got;
  for (int b = 0; b < 256; ++b) {
    const uint8_t c = utf8_class(static_cast<uint8_t>(b));
    if (c == b) continue;
    const bool ok = advance_byte(g, s, static_cast<uint8_t>(b), want, limits);
    if (advance_byte(g, s, c, got, limits) != ok || !(got == want))
      FAIL("byte " << b << " steps unlike its class's first byte " << int(c));
  }
}

}  // namespace

TEST_CASE("byte cells step like the byte they were asked about", "[structured]") {
  std::mt19937 rng(7);
  StepLimits limits;
  int states = 0, narrow = 0, folding = 0;
  for (const GrammarCase& c : kCases) {
    INFO(c.name);
    auto grammar = compile_gbnf(c.gbnf, nullptr);
    const CompiledGrammar::Impl& g = grammar->impl();
    const bool folds = edges_fold_utf8(g);
    folding += folds;
    // JSON's string characters exclude only ASCII: the common case must fold.
    if (std::string(c.name) == "json") REQUIRE(folds);
    for (int walk = 0; walk < 20; ++walk) {
      StackSet s = initial_stacks(g, limits), next;
      for (int step = 0; step < 40 && s.has_live(); ++step) {
        const std::vector<uint8_t> live = check_cells(g, s, limits);
        if (folds) check_fold(g, s, limits);
        ++states;
        if (live.empty()) break;
        // Most states split the bytes into several cells; one cell for all would mean the
        // shortcut never narrows anything and the check above proves little.
        uint8_t lo = 0, hi = 0;
        byte_cell(g, s, live[0], lo, hi);
        narrow += lo > 0 || hi < 255;
        REQUIRE(advance_byte(g, s, live[rng() % live.size()], next, limits));
        next.remove_empty();
        std::swap(s, next);
      }
    }
  }
  CHECK(states > 1000);
  CHECK(narrow * 2 > states);
  CHECK(folding >= 3);
  CHECK(folding < static_cast<int>(std::size(kCases)));  // and some do not (a class less "é")
}

// The vocabulary's lcp_drop (a walk's jump over the strings sharing a failed prefix): for every
// string, the first later one sharing fewer leading bytes with its predecessor.
TEST_CASE("lcp_drop is the next smaller common prefix", "[structured]") {
  std::mt19937 rng(11);
  const std::string pieces[] = {"a", "ab", "abc", "b", "\"", "\\", "x", "xy", " ", "\xC3\xA9", "0"};
  std::vector<std::string> bytes;
  for (int i = 0; i < 3000; ++i) {
    std::string t;
    for (int k = 1 + rng() % 5; k > 0; --k) t += pieces[rng() % (sizeof(pieces) / sizeof(pieces[0]))];
    bytes.push_back(t);
  }
  auto vocab = TokenVocabulary::build(bytes, std::vector<bool>(bytes.size()), std::vector<bool>(bytes.size()));
  const TokenVocabulary::Impl& v = vocab->impl();
  const size_t n = v.unique.size();
  REQUIRE(v.lcp_drop.size() == n);
  size_t jumps = 0;
  for (size_t u = 0; u < n; ++u) {
    size_t want = u + 1;
    while (want < n && v.lcp[want] >= v.lcp[u]) ++want;
    if (v.lcp_drop[u] != want) FAIL("lcp_drop[" << u << "] = " << v.lcp_drop[u] << ", want " << want);
    jumps += want > u + 1;
  }
  CHECK(jumps * 4 > n);  // the check above covers real jumps, not only neighbours
}
