// Code point automata (regex_dfa.h) against std::regex (ECMAScript search, the JSON Schema
// `pattern` semantics) on every string over a small alphabet up to length 6: patterns with
// anchors inside, nullable groups under * and +, bounded repeats; and the product, complement
// and length constructions against their definitions, before and after minimization.
#include <catch2/catch.hpp>

#include <regex>

#include "engine/structured/regex_dfa.h"

using namespace pagoda::structured;

namespace {

std::vector<std::string> all_strings(const std::string& alphabet, size_t max_len) {
  std::vector<std::string> out = {""};
  for (size_t begin = 0; begin < out.size(); ++begin)
    if (out[begin].size() < max_len)
      for (char c : alphabet) out.push_back(out[begin] + c);
  return out;
}

const char* const kPatterns[] = {
    "a",       "^a",        "b$",          "^ab*$",      "(a|b*)*",     "((a)*)*c",   "^(a|b*)+$",
    "a^b|^c$", "(^a|b$)c?", "^[^a]{2,3}$", "a{2}b?$",    "(ab|ba)+",    "x|^$",       "^(a?)*b",
    "[a-c]{2,}d", "(^|b)a($|c)", "^\\w\\d?$", "(a|)+b",  "c(a*)*$",
};

}  // namespace

TEST_CASE("regex DFA matches std::regex search on every short string") {
  auto strings = all_strings("abcd1", 5);
  for (const char* pattern : kPatterns) {
    CAPTURE(pattern);
    CharDfa dfa = dfa_from_regex(parse_regex(pattern), true);
    CharDfa small = dfa_trimmed(dfa);
    std::regex re(pattern, std::regex::ECMAScript);
    for (const auto& s : strings) {
      CAPTURE(s);
      bool expected = std::regex_search(s, re);
      auto cps = utf8_codepoints(s);
      REQUIRE(dfa.accepts(cps) == expected);
      REQUIRE(small.accepts(cps) == expected);
    }
    CHECK(small.states.size() <= dfa.states.size());
  }
}

TEST_CASE("whole-string DFA, strings, intersection, complement and length bounds") {
  auto strings = all_strings("abc", 6);
  CharDfa names = dfa_from_strings({"ab", "", "ccc"});
  CharDfa not_names = dfa_complement(names);
  for (const char* pattern : kPatterns) {
    CAPTURE(pattern);
    std::regex re(pattern, std::regex::ECMAScript);
    CharDfa search = dfa_from_regex(parse_regex(pattern), true);
    CharDfa whole = dfa_from_regex(parse_regex(pattern), false);
    CharDfa both = dfa_intersect(search, not_names);
    CharDfa bounded = dfa_with_length(search, 2, 4);
    CharDfa at_least = dfa_trimmed(dfa_with_length(dfa_complement(search), 3, std::nullopt));
    for (const auto& s : strings) {
      CAPTURE(s);
      auto cps = utf8_codepoints(s);
      bool found = std::regex_search(s, re);
      bool is_name = s == "ab" || s.empty() || s == "ccc";
      REQUIRE(names.accepts(cps) == is_name);
      REQUIRE(whole.accepts(cps) == std::regex_match(s, re));
      REQUIRE(both.accepts(cps) == (found && !is_name));
      REQUIRE(bounded.accepts(cps) == (found && s.size() >= 2 && s.size() <= 4));
      REQUIRE(at_least.accepts(cps) == (!found && s.size() >= 3));
    }
  }
  CHECK(dfa_trimmed(dfa_from_strings({})).empty());
  CHECK(dfa_trimmed(dfa_intersect(dfa_from_strings({"a"}), dfa_from_strings({"b"}))).empty());
}

TEST_CASE("DFA size limit is a RegexError, not a hang") {
  // (a|b)*a(a|b){14}: the subset construction needs 2^15 states.
  CHECK_THROWS_AS(dfa_from_regex(parse_regex("^(a|b)*a(a|b){14}$"), true, 4000), RegexError);
  CharDfa any = dfa_complement(dfa_from_strings({}));
  CHECK_THROWS_AS(dfa_with_length(any, 0, 65535, 4000), RegexError);
}
