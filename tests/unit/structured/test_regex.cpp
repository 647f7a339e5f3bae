// Regex (ECMA-262 subset) -> GBNF: whole-output regex_to_gbnf and JSON Schema `pattern`
// (search semantics inside a JSON string), checked through the grammar core's matcher and,
// for random patterns, against std::regex (ECMAScript) as the reference.
#include <catch2/catch.hpp>

#include <random>
#include <regex>

#include "engine/structured/json_schema.h"
#include "engine/structured/regex.h"
#include "engine/structured/structured.h"

using namespace pagoda::structured;

namespace {

struct Compiled {
  std::string text;
  std::shared_ptr<const CompiledGrammar> grammar;
  bool accepts(const std::string& output) const {
    GrammarMatcher m(grammar);
    return m.accept_bytes(output) && m.can_end();
  }
};

Compiled whole(const std::string& pattern) {
  std::string text = regex_to_gbnf(pattern);
  INFO(pattern << " -> " << text);
  return Compiled{text, compile_gbnf(text, nullptr)};
}

Compiled json_pattern(const std::string& pattern) {
  nlohmann::ordered_json schema = {{"type", "string"}, {"pattern", pattern}};
  std::string text = json_schema_to_gbnf(schema);
  INFO(pattern << " -> " << text);
  return Compiled{text, compile_gbnf(text, nullptr)};
}

// A random pattern over the alphabet {a, b, 1} (plus '\n' in the tested strings).
std::string random_pattern(std::mt19937& rng, int depth) {
  std::uniform_int_distribution<int> pick(0, 99);
  auto atom = [&]() -> std::string {
    int r = pick(rng);
    if (depth < 2 && r < 15) return std::string("(").append(random_pattern(rng, depth + 1)).append(")");
    if (depth < 2 && r < 20) return std::string("(?:").append(random_pattern(rng, depth + 1)).append(")");
    static const char* const atoms[] = {"a", "b", "1", ".", "[ab]", "[^a]", "\\d", "\\D", "\\w",
                                        "\\W", "\\s", "\\S", "[a-b1]", "[^\\d]", "\\n"};
    return atoms[pick(rng) % 15];
  };
  auto quantified = [&]() {
    std::string a = atom();
    int r = pick(rng);
    static const char* const quants[] = {"*", "+", "?", "{2}", "{1,}", "{0,2}", "*?", "+?", "{1,2}?"};
    if (r < 40) a += quants[pick(rng) % 9];
    return a;
  };
  std::string out;
  int branches = pick(rng) < 25 ? 2 : 1;
  for (int b = 0; b < branches; ++b) {
    if (b) out += "|";
    int len = 1 + pick(rng) % 3;
    for (int i = 0; i < len; ++i) out += quantified();
  }
  return out;
}

std::vector<std::string> all_strings(int max_len) {
  const char alphabet[] = {'a', 'b', '1', '\n'};
  std::vector<std::string> out = {""};
  size_t start = 0;
  for (int len = 1; len <= max_len; ++len) {
    size_t end = out.size();
    for (size_t i = start; i < end; ++i)
      for (char c : alphabet) out.push_back(out[i] + c);
    start = end;
  }
  return out;
}

}  // namespace

TEST_CASE("regex_to_gbnf: literals, classes, escapes, quantifiers, groups") {
  auto phone = whole("\\d{3}-\\d{4}");
  CHECK(phone.accepts("555-1234"));
  CHECK_FALSE(phone.accepts("555-123"));
  CHECK_FALSE(phone.accepts("a555-1234"));

  auto word = whole("^\\w+(?:\\s\\w+)*$");
  CHECK(word.accepts("hello big_world 42"));
  CHECK_FALSE(word.accepts("hello  world"));
  CHECK_FALSE(word.accepts("héllo"));

  auto dot = whole("a.c");
  CHECK(dot.accepts("abc"));
  CHECK(dot.accepts("a\xC3\xA9" "c"));  // one code point, two bytes
  CHECK_FALSE(dot.accepts("a\nc"));

  auto counts = whole("x{2,3}y{2,}z{2}");
  CHECK(counts.accepts("xxyyzz"));
  CHECK(counts.accepts("xxxyyyyzz"));
  CHECK_FALSE(counts.accepts("xyyzz"));
  CHECK_FALSE(counts.accepts("xxxxyyzz"));
  CHECK_FALSE(counts.accepts("xxyzz"));

  auto lazy = whole("a+?b*?");
  CHECK(lazy.accepts("aab"));

  auto alt = whole("(cat|dog)s?|(?<n>bird)");
  CHECK(alt.accepts("cats"));
  CHECK(alt.accepts("dog"));
  CHECK(alt.accepts("bird"));
  CHECK_FALSE(alt.accepts("birds"));

  auto optional_branch = whole("a(b|)c");
  CHECK(optional_branch.accepts("ac"));
  CHECK(optional_branch.accepts("abc"));

  auto escapes = whole("\\x41\\u00e9\\t\\.\\[\\]\\(\\\\");
  CHECK(escapes.accepts("A\xC3\xA9\t.[](\\"));

  auto unicode = whole("[α-ω]+€");
  CHECK(unicode.accepts("αβω€"));
  CHECK_FALSE(unicode.accepts("A€"));

  auto brace = whole("a{b}");  // not a quantifier: literal braces (Annex B)
  CHECK(brace.accepts("a{b}"));

  auto negated = whole("[^\\s\"]+");
  CHECK(negated.accepts("ab\xE2\x82\xAC"));
  CHECK_FALSE(negated.accepts("a b"));
  CHECK_FALSE(negated.accepts("a\"b"));

  auto empty = whole("");
  CHECK(empty.accepts(""));
  CHECK_FALSE(empty.accepts("a"));
}

TEST_CASE("regex parse errors name the construct and the offset") {
  auto error_of = [](const std::string& p) -> std::string {
    try {
      regex_to_gbnf(p);
    } catch (const RegexError& e) {
      return std::string(e.what()) + " @" + std::to_string(e.offset);
    }
    return "no error";
  };
  CHECK_THAT(error_of("a(?=b)"), Catch::Contains("lookaround") && Catch::Contains("@1"));
  CHECK_THAT(error_of("(a)\\1"), Catch::Contains("backreference") && Catch::Contains("@4"));
  CHECK_THAT(error_of("\\bword"), Catch::Contains("word boundary"));
  CHECK_THAT(error_of("(ab"), Catch::Contains("missing ')'"));
  CHECK_THAT(error_of("ab)"), Catch::Contains("unmatched ')'"));
  CHECK_THAT(error_of("*a"), Catch::Contains("nothing to repeat"));
  CHECK_THAT(error_of("[z-a]"), Catch::Contains("out of order"));
  CHECK_THAT(error_of("[ab"), Catch::Contains("missing ']'"));
  CHECK_THAT(error_of("a{3,2}"), Catch::Contains("n < m"));
  CHECK_THAT(error_of("a{20000}"), Catch::Contains("above"));
  CHECK_THAT(error_of("a^b"), Catch::Contains("anchors"));
  CHECK_THAT(error_of("((a{100}){100}){100}"), Catch::Contains("too large"));
  CHECK_THAT(error_of("\\p{L}"), Catch::Contains("property"));
  CHECK_THAT(error_of("a\\"), Catch::Contains("ends with"));
  CHECK_THAT(error_of(std::string("\xFF")), Catch::Contains("UTF-8"));
}

TEST_CASE("random regexes agree with std::regex (whole match and JSON pattern search)") {
  std::mt19937 rng(11);
  std::vector<std::string> strings = all_strings(4);
  int checked = 0;
  for (int round = 0; round < 150; ++round) {
    std::string pattern = random_pattern(rng, 0);
    std::regex reference(pattern, std::regex::ECMAScript);
    Compiled exact = whole(pattern);
    Compiled search = json_pattern(pattern);
    for (const auto& s : strings) {
      bool full = std::regex_match(s, reference);
      if (full != exact.accepts(s)) FAIL("whole match of /" << pattern << "/ on " << nlohmann::json(s).dump() << "\n" << exact.text);
      bool found = std::regex_search(s, reference);
      std::string as_json = nlohmann::json(s).dump();
      if (found != search.accepts(as_json))
        FAIL("search of /" << pattern << "/ in " << as_json << "\n" << search.text);
      ++checked;
    }
  }
  CHECK(checked == 150 * int(strings.size()));
}

TEST_CASE("regex_to_gbnf: starred groups that can match nothing, against std::regex") {
  const char* const patterns[] = {"(a|b*)*", "((a)*)*", "(a?)+b", "(a*b*)*c", "((a|)*)+", "(|a)*b?", "(a?b?)*"};
  std::vector<std::string> strings = {""};
  for (size_t i = 0; i < strings.size(); ++i)
    if (strings[i].size() < 5)
      for (char c : std::string("abc")) strings.push_back(strings[i] + c);
  for (const char* pattern : patterns) {
    CAPTURE(pattern);
    auto grammar = compile_gbnf(regex_to_gbnf(pattern), nullptr);
    std::regex re(pattern, std::regex::ECMAScript);
    for (const auto& s : strings) {
      CAPTURE(s);
      GrammarMatcher m(grammar);
      CHECK((m.accept_bytes(s) && m.can_end()) == std::regex_match(s, re));
    }
  }
}
