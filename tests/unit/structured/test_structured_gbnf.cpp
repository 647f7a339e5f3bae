// GBNF parsing: the accepted dialect, matching of what it describes, and the errors (with
// line:column) for malformed or oversized grammars.
#include <catch2/catch.hpp>

#include <optional>

#include "engine/structured/grammar_ir.h"
#include "tests/unit/structured/structured_test_util.h"

using namespace structured_test;

namespace {

std::string error_of(const std::string& gbnf, const GrammarLimits& limits = {}) {
  try {
    compile_gbnf(gbnf, nullptr, limits);
  } catch (const GrammarError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("GBNF literals, escapes and classes", "[structured]") {
  CHECK(full_match(R"(root ::= "abc")", "abc"));
  CHECK_FALSE(full_match(R"(root ::= "abc")", "ab"));
  CHECK_FALSE(full_match(R"(root ::= "abc")", "abcd"));
  CHECK(full_match(R"(root ::= "a\nb\t\r\\\"\[\]")", "a\nb\t\r\\\"[]"));
  CHECK(full_match(R"(root ::= "\x41\u00e9\U0001F600")", "A\xC3\xA9\xF0\x9F\x98\x80"));
  CHECK(full_match(R"(root ::= [a-z_]+)", "hello_x"));
  CHECK_FALSE(full_match(R"(root ::= [a-z_]+)", "Hello"));
  CHECK(full_match(R"(root ::= [^"\\]*)", "any thing, é 日本"));
  CHECK_FALSE(full_match(R"(root ::= [^"\\]*)", "a\"b"));
  CHECK(full_match(R"(root ::= . . .)", "a\xC3\xA9\n"));
  CHECK(full_match(R"(root ::= [\x00-\x1F])", std::string(1, '\0')));
  CHECK(full_match(R"(root ::= "")", ""));
  CHECK(full_match(R"(root ::= [-a])", "-"));
  CHECK(full_match(R"(root ::= [a-])", "-"));
}

TEST_CASE("GBNF rules, groups, alternation, comments and line continuation", "[structured]") {
  const char* g = R"(
# a comment
root ::= greeting " " name   # trailing comment
greeting ::= "hello" | "hi"
name ::= ( "bob"
         | "alice" ) "!"?
)";
  CHECK(full_match(g, "hello bob"));
  CHECK(full_match(g, "hi alice!"));
  CHECK_FALSE(full_match(g, "hey bob"));
  const char* leading_bar = "root ::= \"a\"\n  | \"b\"\n";
  CHECK(full_match(leading_bar, "b"));
  const char* after_bar = "root ::= \"a\" |\n  \"b\"\n";
  CHECK(full_match(after_bar, "b"));
  const char* crlf = "root ::= x\r\nx ::= \"y\"\r\n";
  CHECK(full_match(crlf, "y"));
  // Named start rule.
  auto g2 = compile_gbnf("a ::= \"x\"\nb ::= a a\n", nullptr, {}, "b");
  CHECK(full_match(g2, "xx"));
}

TEST_CASE("GBNF repetition bounds", "[structured]") {
  CHECK(full_match(R"(root ::= "a"{3})", "aaa"));
  CHECK_FALSE(full_match(R"(root ::= "a"{3})", "aa"));
  CHECK_FALSE(full_match(R"(root ::= "a"{3})", "aaaa"));
  CHECK(full_match(R"(root ::= "a"{2,})", "aaaaa"));
  CHECK_FALSE(full_match(R"(root ::= "a"{2,})", "a"));
  CHECK(full_match(R"(root ::= "a"{1,3} "b")", "aaab"));
  CHECK_FALSE(full_match(R"(root ::= "a"{1,3} "b")", "aaaab"));
  CHECK(full_match(R"(root ::= "a"{,2} "b")", "b"));
  CHECK(full_match(R"(root ::= "a"{,2} "b")", "aab"));
  CHECK_FALSE(full_match(R"(root ::= "a"{,2} "b")", "aaab"));
  CHECK(full_match(R"(root ::= ("ab" | "c"){2,3})", "abcab"));
  CHECK_FALSE(full_match(R"(root ::= ("ab" | "c"){2,3})", "ab"));
  CHECK(full_match(R"(root ::= "x"+ "y"* "z"?)", "xxyyy"));
}

TEST_CASE("GBNF errors name the place and the problem", "[structured]") {
  CHECK(error_of("") .find("empty grammar") != std::string::npos);
  CHECK(error_of("# only a comment\n").find("empty grammar") != std::string::npos);
  std::string e = error_of("root ::= foo\n");
  CHECK(e.find("undefined rule 'foo'") != std::string::npos);
  CHECK(e.find("line 1, column 10") != std::string::npos);
  e = error_of("root ::= ( \"a\" \n\nx ::= \"b\"\n");
  CHECK(e.find("unbalanced parenthesis") != std::string::npos);
  e = error_of("root ::= \"a\" )\n");
  CHECK(e.find("unexpected ')'") != std::string::npos);
  e = error_of("root ::= \"a\\q\"\n");
  CHECK(e.find("bad escape") != std::string::npos);
  CHECK(e.find("column 12") != std::string::npos);
  CHECK(error_of("root ::= \"abc\n").find("unterminated string") != std::string::npos);
  CHECK(error_of("root ::= [abc\n").find("unterminated character class") != std::string::npos);
  CHECK(error_of("root ::= [z-a]\n").find("end before start") != std::string::npos);
  CHECK(error_of("root ::= \"a\"\nroot ::= \"b\"\n").find("defined twice") != std::string::npos);
  CHECK(error_of("x ::= \"a\"\n").find("no start rule 'root'") != std::string::npos);
  CHECK(error_of("root = \"a\"\n").find("expected '::='") != std::string::npos);
  CHECK(error_of("root ::= \"a\"{2,1}\n").find("n < m") != std::string::npos);
  CHECK(error_of("root ::= \"a\"{}\n").find("empty repetition") != std::string::npos);
  CHECK(error_of("root ::= <think>\n").find("not supported") != std::string::npos);
  CHECK(error_of("root ::= \"a\" @\n").find("unexpected character '@'") != std::string::npos);
  CHECK(error_of("root ::= [^\\x00-\\U0010FFFF]\n").find("matches no character") != std::string::npos);
  // Left recursion, direct and through a nullable prefix, and a repeated empty-able group.
  CHECK(error_of("root ::= root \"a\" | \"b\"\n").find("left recursion") != std::string::npos);
  CHECK(error_of("root ::= x\nx ::= \"\"? y\ny ::= x \"a\"\n").find("left recursion") !=
        std::string::npos);
}

TEST_CASE("GBNF repeated groups that can match nothing are accepted, same language", "[structured]") {
  CHECK(full_match(R"(root ::= ("a"?)*)", ""));
  CHECK(full_match(R"(root ::= ("a"?)*)", "aaa"));
  CHECK(full_match(R"(root ::= ("a" | "b"*)* "c")", "abbac"));
  CHECK_FALSE(full_match(R"(root ::= ("a" | "b"*)* "c")", "abd"));
  CHECK(full_match(R"(root ::= (("x")*)*)", "xxxx"));
  CHECK(full_match(R"(root ::= (("x")*)+ "y")", "y"));
  CHECK(full_match(R"(root ::= ("")* "z")", "z"));
  // Through a nullable rule, recursive too.
  const char* through_rule = "root ::= (x | \"-\")+\nx ::= \"a\" x | \"\"\n";
  CHECK(full_match(through_rule, "aa-a--"));
  CHECK(full_match(through_rule, ""));
  CHECK_FALSE(full_match(through_rule, "ab"));
}

TEST_CASE("GBNF size limits", "[structured]") {
  std::string e = error_of("root ::= [0-9]{0,2147483648}\n");
  CHECK(e.find("repetition count above the limit") != std::string::npos);
  GrammarLimits small;
  small.max_elements = 100;
  e = error_of("root ::= (\"abcdef\" [0-9]){0,30}\n", small);
  CHECK(e.find("grammar too large") != std::string::npos);
  e = error_of("root ::= \"abcdefghij\"{30}\n", small);
  CHECK(e.find("grammar too large") != std::string::npos);
  small = {};
  small.max_text_bytes = 10;
  CHECK(error_of("root ::= \"abcdefghij\"\n", small).find("limit") != std::string::npos);
  small = {};
  small.max_nesting = 3;
  CHECK(error_of("root ::= ((((\"a\"))))\n", small).find("nested deeper") != std::string::npos);
  // Nested bounded repetitions share their body: no blow-up.
  CHECK(error_of("root ::= (((\"a\"{100}){100}){100})\n").empty());
}

TEST_CASE("GBNF IR from the parser", "[structured]") {
  Grammar g = parse_gbnf("root ::= a \"x\"*\na ::= [^a-c]\n", GrammarLimits{}, "root");
  REQUIRE(g.rules.size() == 2);
  CHECK(g.rules[g.start].name == "root");
  const Expr& body = g.rules[0].body;
  REQUIRE(body.kind == Expr::Kind::Sequence);
  REQUIRE(body.children.size() == 2);
  CHECK(body.children[0].kind == Expr::Kind::RuleRef);
  CHECK(body.children[1].kind == Expr::Kind::Repeat);
  CHECK(body.children[1].max_count == kUnbounded);
  CHECK(g.rules[1].body.kind == Expr::Kind::CharClass);
  CHECK(g.rules[1].body.negated);
}

TEST_CASE("grammar IR built in code compiles like GBNF", "[structured]") {
  Grammar g;
  GrammarRule root;
  root.name = "root";
  root.defined = true;
  root.body.kind = Expr::Kind::Repeat;
  root.body.min_count = 1;
  root.body.max_count = 3;
  Expr digit;
  digit.kind = Expr::Kind::CharClass;
  digit.ranges.push_back({'0', '9'});
  root.body.children.push_back(digit);
  g.rules.push_back(root);
  auto compiled = compile_grammar(g, nullptr);
  CHECK(full_match(compiled, "123"));
  CHECK_FALSE(full_match(compiled, "1234"));
  g.rules[0].body.children[0].kind = Expr::Kind::RuleRef;
  g.rules[0].body.children[0].rule = 7;
  CHECK_THROWS_AS(compile_grammar(g, nullptr), GrammarError);
}

// Counts above the unroll limit are lowered as binary counters: exact at every boundary, a
// handful of rules whatever the count.
TEST_CASE("GBNF large repetition counts count in binary", "[structured]") {
  struct Range {
    uint32_t lo;
    std::optional<uint32_t> hi;
  };
  const Range ranges[] = {{0, 33},  {33, 33},  {0, 63},   {0, 64},  {1, 65},   {40, 100},
                          {31, 97}, {100, 1000}, {33, {}}, {64, {}}, {0, 4095}, {257, 4097}};
  for (const Range& r : ranges) {
    std::string count = "{" + std::to_string(r.lo) + "," + (r.hi ? std::to_string(*r.hi) : "") + "}";
    auto g = compile_gbnf("root ::= [a]" + count + " \"!\"\n", nullptr);
    std::vector<uint32_t> lengths = {0, 1, 31, 32, 33, 34, 63, 64, 65, 127, 128, 129, 1000, 1001, 4096, 4097, 4098};
    for (uint32_t x : {r.lo, r.hi.value_or(r.lo + 7)})
      for (uint32_t d = 0; d < 3; ++d) lengths.push_back(x + d), lengths.push_back(x >= d ? x - d : 0);
    for (uint32_t n : lengths) {
      bool want = n >= r.lo && (!r.hi || n <= *r.hi);
      INFO("count " << count << ", length " << n);
      CHECK(full_match(g, std::string(n, 'a') + "!") == want);
    }
  }
  // A group body, alternatives of different lengths: the count is of repetitions, not bytes.
  auto g = compile_gbnf("root ::= (\"ab\" | \"c\"){35,70}\n", nullptr);
  uint64_t state = 12345;
  for (int trial = 0; trial < 200; ++trial) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    uint32_t reps = uint32_t(state >> 33) % 90;
    std::string text;
    for (uint32_t i = 0; i < reps; ++i) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      text += (state >> 40) & 1 ? "ab" : "c";
    }
    INFO(text);
    CHECK(full_match(g, text) == (reps >= 35 && reps <= 70));
  }
  // Huge counts: a few dozen rules, and 100k characters walk through.
  auto huge = compile_gbnf("root ::= [a-z]{0,2147483647}\n", nullptr);
  CHECK(full_match(huge, std::string(100000, 'q')));
  auto tight = compile_gbnf("root ::= [a-z]{65535}\n", nullptr);
  CHECK(full_match(tight, std::string(65535, 'q')));
  CHECK_FALSE(full_match(tight, std::string(65534, 'q')));
  CHECK_FALSE(full_match(tight, std::string(65536, 'q')));
  // Nested large counts share their helpers too.
  CHECK(error_of("root ::= (([a]{0,1000}){0,1000}){0,1000}\n").empty());
}
