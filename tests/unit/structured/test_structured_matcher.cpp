// GrammarMatcher on bytes and on a small hand-made vocabulary: accept/reject, characters split
// across calls and tokens, EOG handling, finished state, copies, rollback, forced bytes, and
// the compiled-grammar cache.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <thread>

#include "tests/unit/structured/structured_test_util.h"

using namespace structured_test;

namespace {

bool bit(const std::vector<uint32_t>& m, int32_t id) { return (m[id / 32] >> (id % 32)) & 1; }

// ids: 0 "<eos>" (EOG), 1 "<ctl>" (special), 2 "a", 3 "b", 4 "ab", 5 "\xC3" (first byte of é),
// 6 "\xA9" (its second byte), 7 "é", 8 "\"", 9 "", 10 "{", 11 "}", 12 "ba", 13 "x", 14 "<eot>" (EOG)
std::shared_ptr<const TokenVocabulary> small_vocab() {
  std::vector<std::string> bytes = {"<eos>", "<ctl>", "a", "b", "ab", "\xC3", "\xA9", "\xC3\xA9",
                                    "\"", "", "{", "}", "ba", "x", "<eot>"};
  std::vector<bool> eog(bytes.size()), special(bytes.size());
  eog[0] = eog[14] = true;
  special[1] = true;
  return TokenVocabulary::build(bytes, eog, special);
}

}  // namespace

TEST_CASE("matcher accepts prefixes, rejects without changing state", "[structured]") {
  auto g = compile_gbnf(R"(root ::= "ab" [0-9]+ "c")", nullptr);
  GrammarMatcher m(g);
  CHECK(m.accept_bytes("a"));
  CHECK_FALSE(m.can_end());
  CHECK_FALSE(m.accept_bytes("x"));
  CHECK(m.accept_bytes("b12"));
  CHECK_FALSE(m.accept_bytes("c9"));  // whole call rejected...
  CHECK(m.accept_bytes("3"));         // ...so the state is still after "ab12"
  CHECK(m.accept_bytes("c"));
  CHECK(m.can_end());
  CHECK(m.is_finished());
}

TEST_CASE("matcher handles UTF-8 characters split across calls", "[structured]") {
  auto g = compile_gbnf(R"(root ::= [é-ë]+ "€")", nullptr);  // U+00E9..U+00EB, U+20AC
  GrammarMatcher m(g);
  CHECK(m.accept_bytes("\xC3"));
  CHECK_FALSE(m.accept_bytes("\xA8"));  // U+00E8 is outside the class
  CHECK(m.accept_bytes("\xA9"));
  CHECK(m.accept_bytes("\xC3\xAB\xE2"));
  CHECK(m.accept_bytes("\x82"));
  CHECK_FALSE(m.can_end());
  CHECK(m.accept_bytes("\xAC"));
  CHECK(m.can_end());
  // Invalid UTF-8 never matches a class, even a negated one or `.`.
  auto any = compile_gbnf(R"(root ::= .*)", nullptr);
  CHECK(full_match(any, "\xF0\x9F\x98\x80 ok"));
  CHECK_FALSE(full_match(any, "\xC0\x80"));          // overlong
  CHECK_FALSE(full_match(any, "\xED\xA0\x80"));      // surrogate
  CHECK_FALSE(full_match(any, "\xF4\x90\x80\x80"));  // above U+10FFFF
  CHECK_FALSE(full_match(any, "\x80"));
  CHECK(full_match(compile_gbnf(R"(root ::= [^a])", nullptr), "\xF4\x8F\xBF\xBF"));
}

TEST_CASE("matcher with ambiguous and nullable grammars", "[structured]") {
  const char* g = R"(
root ::= x x
x ::= "a" | "a" "a" | ""
)";
  CHECK(full_match(g, ""));
  CHECK(full_match(g, "aaaa"));
  CHECK_FALSE(full_match(g, "aaaaa"));
  // Right recursion keeps the stack flat; deep nesting works.
  const char* nest = "root ::= \"(\" root \")\" | \"x\"\n";
  std::string deep = std::string(500, '(') + "x" + std::string(500, ')');
  CHECK(full_match(nest, deep));
  CHECK_FALSE(full_match(nest, std::string(500, '(') + "x" + std::string(499, ')')));
}

TEST_CASE("token masks on a small vocabulary: EOG, special and partial UTF-8 tokens", "[structured]") {
  auto vocab = small_vocab();
  auto g = compile_gbnf(R"(root ::= "a" "b"? "é"*)", vocab);
  GrammarMatcher m(g);
  auto mask = m.mask();
  REQUIRE(mask.size() == 1);
  CHECK(bit(mask, 2));
  CHECK(bit(mask, 4));
  CHECK_FALSE(bit(mask, 3));
  CHECK_FALSE(bit(mask, 0));   // cannot end yet
  CHECK_FALSE(bit(mask, 1));   // special: never
  CHECK_FALSE(bit(mask, 9));   // empty: never
  CHECK_FALSE(m.accept_token(0));
  CHECK_FALSE(m.accept_token(1));
  CHECK_FALSE(m.accept_token(99));
  CHECK_FALSE(m.accept_token(-1));
  REQUIRE(m.accept_token(2));
  mask = m.mask();
  CHECK(bit(mask, 0));
  CHECK(bit(mask, 14));        // every EOG token
  CHECK(bit(mask, 3));
  CHECK(bit(mask, 5));         // first byte of é
  CHECK(bit(mask, 7));
  CHECK_FALSE(bit(mask, 6));   // a lone continuation byte
  CHECK_FALSE(bit(mask, 2));
  REQUIRE(m.accept_token(5));
  mask = m.mask();
  CHECK(mask[0] == (1u << 6));  // only the continuation byte; cannot end mid-character
  REQUIRE(m.accept_token(6));
  CHECK(m.can_end());
  CHECK_FALSE(m.is_finished());
  CHECK(m.accept_token(0));
  CHECK(m.is_terminated());
  CHECK(m.mask()[0] == 0);
  CHECK_FALSE(m.accept_token(7));
}

TEST_CASE("finished grammar allows only EOG", "[structured]") {
  auto vocab = small_vocab();
  auto g = compile_gbnf(R"(root ::= "{" "}")", vocab);
  GrammarMatcher m(g);
  CHECK(m.forced_bytes() == "{}");
  REQUIRE(m.accept_token(10));
  CHECK(m.mask()[0] == (1u << 11));
  REQUIRE(m.accept_token(11));
  CHECK(m.is_finished());
  CHECK(m.mask()[0] == ((1u << 0) | (1u << 14)));
  CHECK(m.forced_bytes().empty());
}

TEST_CASE("matcher copies are independent; rollback and reset", "[structured]") {
  auto vocab = small_vocab();
  auto g = compile_gbnf(R"(root ::= ("a" | "b")+ "x")", vocab);
  GrammarMatcher m(g, /*max_rollback=*/4);
  REQUIRE(m.accept_token(4));   // "ab"
  GrammarMatcher fork = m;
  REQUIRE(fork.accept_token(13));
  CHECK(fork.can_end());
  CHECK_FALSE(m.can_end());
  REQUIRE(m.accept_token(12));  // "ba"
  REQUIRE(m.accept_token(13));
  CHECK(m.can_end());
  CHECK(m.rollback(2));
  CHECK_FALSE(m.can_end());
  CHECK(m.accept_token(13));
  CHECK_FALSE(m.rollback(5));
  m.reset();
  CHECK_FALSE(m.accept_token(13));
  CHECK(m.accept_token(2));
}

TEST_CASE("compiled grammar cache returns the same grammar and stays bounded", "[structured]") {
  auto vocab = small_vocab();
  CompiledGrammarCache cache(2);
  auto a1 = cache.get_or_compile_gbnf("root ::= \"a\"", vocab);
  auto a2 = cache.get_or_compile_gbnf("root ::= \"a\"", vocab);
  CHECK(a1 == a2);
  CHECK(cache.hits() == 1);
  auto b = cache.get_or_compile_gbnf("root ::= \"b\"", vocab);
  auto c = cache.get_or_compile_gbnf("root ::= \"ab\"", vocab);
  CHECK(cache.size() == 2);
  CHECK(cache.get_or_compile_gbnf("root ::= \"a\"", vocab) != a1);  // evicted, recompiled
  CHECK_THROWS_AS(cache.get_or_compile_gbnf("root ::= (", vocab), GrammarError);
  // Concurrent use.
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        auto g = cache.get_or_compile_gbnf("root ::= \"a\"{" + std::to_string((i + t) % 5 + 1) + "}", vocab);
        GrammarMatcher m(g);
        if (!m.accept_token(2)) failures++;
      }
    });
  for (auto& th : threads) th.join();
  CHECK(failures == 0);
}

TEST_CASE("exponentially ambiguous grammar hits the stack limit instead of hanging", "[structured]") {
  // After n a's there are 2^n distinct parse stacks (each a pending "b" or "c").
  auto vocab = small_vocab();
  GrammarLimits limits;
  limits.max_stacks = 256;
  auto g = compile_gbnf("root ::= s\ns ::= \"a\" s \"b\" | \"a\" s \"c\" | \"x\"\n", vocab, limits);
  GrammarMatcher m(g);
  int accepted = 0;
  for (int i = 0; i < 30; ++i) {
    if (!m.accept_bytes("a")) break;
    ++accepted;
  }
  CHECK(accepted >= 6);  // 2^6 pending stacks x 3 alternatives fit in 256
  CHECK(accepted < 30);
  auto t0 = std::chrono::steady_clock::now();
  std::vector<uint32_t> mask = m.mask();
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  CHECK(ms < 5000);
  CHECK(m.accept_bytes("x"));  // still usable below the limit
}
