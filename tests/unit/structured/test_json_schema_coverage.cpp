// JSON Schema keywords beyond the first converter: large length / item bounds (binary
// counting, no unrolling; beside a pattern or format too), and the other widened keywords, each checked by walking texts
// through the grammar core's matcher at the boundaries the schema sets; where the test data
// has a real vocabulary, token masks of the new grammars equal brute force on random states.
#include <catch2/catch.hpp>

#include <filesystem>
#include <random>

#include "engine/structured/json_schema.h"
#include "engine/structured/regex_dfa.h"
#include "tests/unit/structured/token_mask_check.h"

using namespace structured_test;
using Json = nlohmann::ordered_json;

namespace {

struct Schema {
  std::string text;
  std::shared_ptr<const CompiledGrammar> compiled;
  bool accepts(const std::string& output) const {
    GrammarMatcher m(compiled);
    return m.accept_bytes(output) && m.can_end();
  }
};

Schema schema_of(const std::string& schema) {
  Schema s;
  s.text = json_schema_to_gbnf(Json::parse(schema));
  INFO(s.text);
  s.compiled = compile_gbnf(s.text, nullptr);
  return s;
}

std::string quoted(size_t n, char c = 'a') { return "\"" + std::string(n, c) + "\""; }

std::string int_array(size_t n) {
  std::string out = "[";
  for (size_t i = 0; i < n; ++i) out += i ? ",7" : "7";
  return out + "]";
}

}  // namespace

TEST_CASE("large maxLength / minLength / maxItems / minItems: exact, small grammars") {
  for (uint64_t max : {33u, 255u, 4096u, 32767u, 65535u}) {
    Schema s = schema_of(R"({"type":"string","maxLength":)" + std::to_string(max) + "}");
    CHECK(s.text.size() < 600);
    CHECK(s.accepts(quoted(0)));
    CHECK(s.accepts(quoted(max)));
    CHECK(s.accepts(quoted(max - 1)));
    CHECK_FALSE(s.accepts(quoted(max + 1)));
    // An escape counts as one character.
    CHECK(s.accepts("\"\\n" + std::string(max - 1, 'b') + "\""));
    CHECK_FALSE(s.accepts("\"\\n" + std::string(max, 'b') + "\""));
  }
  Schema both = schema_of(R"({"type":"string","minLength":20000,"maxLength":65535})");
  CHECK_FALSE(both.accepts(quoted(19999)));
  CHECK(both.accepts(quoted(20000)));
  CHECK(both.accepts(quoted(65535)));
  CHECK_FALSE(both.accepts(quoted(65536)));
  // A maximum above what any output reaches is read as the largest count.
  Schema huge = schema_of(R"({"type":"string","maxLength":9007199254740991})");
  CHECK(huge.accepts(quoted(70000)));

  for (uint64_t max : {40u, 32767u}) {
    Schema a = schema_of(R"({"type":"array","items":{"type":"integer"},"minItems":3,"maxItems":)" +
                         std::to_string(max) + "}");
    CHECK_FALSE(a.accepts(int_array(2)));
    CHECK(a.accepts(int_array(3)));
    CHECK(a.accepts(int_array(max)));
    CHECK_FALSE(a.accepts(int_array(max + 1)));
  }
  Schema min_items = schema_of(R"({"type":"array","items":{"const":7},"minItems":1000})");
  CHECK_FALSE(min_items.accepts(int_array(999)));
  CHECK(min_items.accepts(int_array(1000)));
  CHECK(min_items.accepts(int_array(5000)));
  Schema props = schema_of(R"({"type":"object","properties":{"a":{"type":"integer"}},"maxProperties":65535})");
  CHECK(props.accepts(R"({"a":1,"b":2})"));
}

TEST_CASE("large bounds: token masks equal brute force (deepseek-llm vocabulary)") {
  std::string path = std::string(PAGODA_TESTDATA_DIR) + "/vocab/ggml-vocab-deepseek-llm.gguf";
  if (!std::filesystem::exists(path)) {
    WARN("skipped: " << path << " missing");
    return;
  }
  auto vocab = load_vocabulary(path);
  const char* schemas[] = {
      R"({"type":"object","properties":{"s":{"type":"string","minLength":40,"maxLength":65535},"t":{"type":"array","items":{"type":"string","maxLength":100},"maxItems":32767}},"required":["s","t"]})",
      // Counted repeats after a pattern's automaton; a format shortened to a maxLength.
      R"({"type":"object","properties":{"p":{"type":"string","pattern":"^[a-z]+@[a-z]+$","maxLength":9000},"m":{"type":"string","format":"email","maxLength":254},"d":{"type":"string","format":"date","pattern":"^20"}},"required":["p","m","d"]})",
  };
  uint32_t seed = 99;
  for (const char* s : schemas) {
    std::string gbnf = json_schema_to_gbnf(Json::parse(s));
    int n = check_random_states(s, gbnf, vocab, 400, 6.0, seed++);
    CHECK(n >= 3);
  }
}

TEST_CASE("not over length, count and numeric bounds, and over pattern") {
  Schema s = schema_of(R"({"type":["string","integer"],"not":{"minLength":3}})");
  CHECK(s.accepts(quoted(2)));
  CHECK_FALSE(s.accepts(quoted(3)));
  CHECK_FALSE(s.accepts("5"));  // an integer satisfies minLength, so fails its not
  Schema n = schema_of(R"({"type":"number","not":{"exclusiveMaximum":2.5}})");
  CHECK(n.accepts("2.5"));
  CHECK(n.accepts("3"));
  CHECK_FALSE(n.accepts("2.49"));
  Schema items = schema_of(R"({"type":"array","not":{"maxItems":2}})");
  CHECK_FALSE(items.accepts(int_array(2)));
  CHECK(items.accepts(int_array(3)));
  Schema p = schema_of(R"({"type":"string","not":{"pattern":"^ab"},"maxLength":4})");
  CHECK(p.accepts("\"ba\""));
  CHECK(p.accepts("\"a\""));
  CHECK_FALSE(p.accepts("\"abc\""));
  CHECK_FALSE(p.accepts("\"bbbbb\""));
  Schema frac = schema_of(R"({"type":"number","not":{"type":"integer"}})");
  CHECK(frac.accepts("-1.25"));
  CHECK(frac.accepts("0.5"));
  CHECK_FALSE(frac.accepts("2"));
  CHECK_FALSE(frac.accepts("2.0"));
  CHECK_FALSE(frac.accepts("1234567890123.456"));  // more digits than a double keeps exactly
}

TEST_CASE("oneOf with overlapping branches: the overlap cut out where decidable") {
  Schema lengths = schema_of(R"({"type":"string","oneOf":[{"minLength":2},{"maxLength":4}]})");
  CHECK(lengths.accepts(quoted(1)));
  CHECK(lengths.accepts(quoted(5)));
  for (size_t n : {2, 3, 4}) CHECK_FALSE(lengths.accepts(quoted(n)));
  Schema keys = schema_of(
      R"({"type":"object","oneOf":[{"required":["a"]},{"required":["b"]}],"properties":{"a":{"type":"integer"},"b":{"type":"integer"}},"additionalProperties":false})");
  CHECK(keys.accepts(R"({"a":1})"));
  CHECK(keys.accepts(R"({"b":1})"));
  CHECK_FALSE(keys.accepts(R"({"a":1,"b":2})"));
  CHECK_FALSE(keys.accepts(R"({})"));
  Schema nested = schema_of(R"({"oneOf":[{"type":"string"},{"type":"string","maxLength":3},{"enum":["x",1]}]})");
  CHECK(nested.accepts("\"abcd\""));
  CHECK(nested.accepts("1"));
  CHECK_FALSE(nested.accepts("\"ab\""));
  CHECK_FALSE(nested.accepts("\"x\""));
}

TEST_CASE("uniqueItems over enums (scalars, objects, arrays) and booleans") {
  Schema s = schema_of(R"({"type":"array","items":{"enum":["a","b",1,1.0,null]},"uniqueItems":true,"minItems":1})");
  CHECK(s.accepts(R"(["a"])"));
  CHECK(s.accepts(R"(["b",1,"a",null])"));
  CHECK_FALSE(s.accepts(R"([])"));
  CHECK_FALSE(s.accepts(R"(["a","a"])"));
  CHECK_FALSE(s.accepts(R"([1,1])"));  // 1 and 1.0 are the same value
  CHECK_FALSE(s.accepts(R"(["a","b",1,null,"a"])"));
  Schema b = schema_of(R"({"type":"array","items":{"type":"boolean"},"uniqueItems":true,"maxItems":5})");
  CHECK(b.accepts("[true,false]"));
  CHECK(b.accepts("[]"));
  CHECK_FALSE(b.accepts("[false,false]"));
  // Objects and arrays compare as JSON does: keys in any order, 1 == 1.0.
  Schema objects = schema_of(
      R"({"type":"array","items":{"enum":[{"a":1,"b":2},{"b":2,"a":1.0},[1,{"c":null}],[1.0,{"c":null}],{"a":2}]},"uniqueItems":true})");
  CHECK(objects.accepts(R"([{"a":1,"b":2},[1,{"c":null}],{"a":2}])"));
  CHECK_FALSE(objects.accepts(R"([{"a":1,"b":2},{"a":1,"b":2}])"));
  CHECK_FALSE(objects.accepts(R"([{"a":1,"b":2},{"b":2,"a":1}])"));  // one value, written once
  CHECK_FALSE(objects.accepts(R"([[1,{"c":null}],[1,{"c":null}]])"));
  Schema two = schema_of(R"({"type":"array","items":{"enum":["x","y","z"]},"uniqueItems":true,"maxItems":2})");
  CHECK(two.accepts(R"(["z","x"])"));
  CHECK_FALSE(two.accepts(R"(["z","x","y"])"));
}

TEST_CASE("keywords beside enum / const are decided on each value") {
  Schema s = schema_of(R"({"enum":["a","b"],"additionalProperties":false})");
  CHECK(s.accepts("\"a\""));
  Schema mixed = schema_of(
      R"({"enum":["a","bbb",3,5,{"x":1},{"x":"s"},{"y":2},[1,"q"],[1,2]],"maxLength":2,"minimum":4,"additionalProperties":false,"properties":{"x":{"type":"integer"}},"items":{"type":"integer"}})");
  for (const char* ok : {"\"a\"", "5", R"({"x":1})", "[1,2]"}) CHECK(mixed.accepts(ok));
  for (const char* bad : {"\"bbb\"", "3", R"({"x":"s"})", R"({"y":2})", R"([1,"q"])"}) CHECK_FALSE(mixed.accepts(bad));
}

// Pattern (or format) beside length bounds, checked against the automaton oracle: the pattern's
// search-semantics automaton plus the length test. Exact constructions must agree both ways;
// the capped subsets (a loop beside a large maxLength) may only reject more.
TEST_CASE("pattern with large length bounds: exact or a subset, never wider") {
  struct Case {
    const char* pattern;
    uint64_t min, max;
    bool exact;
  };
  const Case cases[] = {
      // Exact: only the final "anything" state loops.
      {"^ab", 3, 20000, true}, {"^[0-9]{3}", 0, 12000, true}, {"^a.c", 4, 7000, true}, {"^x|^y", 0, 5000, true},
      // Subsets: other self-loops (a search before the match) or longer cycles.
      {"x", 0, 32767, false}, {"\\d", 2, 9000, false}, {"^ab|cd", 0, 5000, false},
      {"^[a-z]+@[a-z]+$", 0, 9000, false}, {"^[a-z]+(-[a-z]+)*$", 0, 9000, false}, {"ab$", 1, 6000, false},
  };
  std::mt19937 rng(5);
  const std::string alphabet = "abcdx-@0129";
  for (const auto& c : cases) {
    Json schema = {{"type", "string"}, {"pattern", c.pattern}, {"minLength", c.min}, {"maxLength", c.max}};
    INFO(schema.dump());
    Schema s = schema_of(schema.dump());
    CHECK(s.text.size() < 200000);
    CharDfa oracle = dfa_from_regex(parse_regex(c.pattern, 100000), true);
    std::vector<uint64_t> lengths = {0, 1, 2, 3, 4, 5, 8, c.max / 2, c.max - 1, c.max, c.max + 1};
    if (c.min > 0) lengths.insert(lengths.end(), {c.min - 1, c.min, c.min + 1});
    int accepted = 0;
    for (int round = 0; round < 6; ++round)
      for (uint64_t n : lengths) {
        // Random text; in most rounds with a piece the patterns look for at the start or end.
        std::string text;
        for (uint64_t i = 0; i < n; ++i) text += alphabet[std::uniform_int_distribution<size_t>(0, alphabet.size() - 1)(rng)];
        static const char* const pieces[] = {"", "ab@", "abc", "123", "7ab", "1-c"};
        if (n >= 3 && round >= 1 && round <= 3) text.replace(0, 3, pieces[round]);
        if (n >= 3 && round >= 4) text.replace(n - 3, 3, pieces[round]);
        bool want = oracle.accepts(utf8_codepoints(text)) && n >= c.min && n <= c.max;
        bool got = s.accepts("\"" + text + "\"");
        accepted += got;
        if (c.exact) CHECK(got == want);
        else CHECK((!got || want));
      }
    CHECK(accepted > 0);
  }
  // The subset keeps long strings: a share of maxLength for each loop.
  Schema loops = schema_of(R"({"type":"string","pattern":"^[a-z]+@[a-z]+$","maxLength":9000})");
  CHECK(loops.accepts("\"" + std::string(2000, 'a') + "@" + std::string(2000, 'b') + "\""));
  CHECK_FALSE(loops.accepts("\"" + std::string(5000, 'a') + "@" + std::string(4000, 'b') + "\""));
}

TEST_CASE("format beside pattern, length bounds and not: the automata intersected") {
  Schema date = schema_of(R"({"type":"string","format":"date","pattern":"^20[0-9]{2}-12"})");
  CHECK(date.accepts("\"2024-12-31\""));
  CHECK_FALSE(date.accepts("\"2024-11-30\""));
  CHECK_FALSE(date.accepts("\"1999-12-31\""));
  CHECK_FALSE(date.accepts("\"2024-12-32\""));
  Schema email = schema_of(R"({"type":"string","format":"email","minLength":6,"maxLength":8})");
  CHECK(email.accepts("\"ab@c.de\""));
  CHECK(email.accepts("\"a@b.cd\""));
  CHECK_FALSE(email.accepts("\"a@b.c\""));
  CHECK_FALSE(email.accepts("\"abc@d.efg\""));
  Schema long_email = schema_of(R"({"type":"string","format":"email","maxLength":254})");
  CHECK(long_email.accepts("\"first.last@example.com\""));
  CHECK_FALSE(long_email.accepts("\"not-an-email\""));
  Schema uuid = schema_of(R"({"type":"string","format":"uuid","pattern":"^[0-9a-f-]+$"})");
  CHECK(uuid.accepts("\"0123abcd-0000-1111-2222-333344445555\""));
  CHECK_FALSE(uuid.accepts("\"0123ABCD-0000-1111-2222-333344445555\""));
  Schema host = schema_of(R"({"type":"string","format":"hostname","not":{"enum":["localhost"]}})");
  CHECK(host.accepts("\"example\""));
  CHECK_FALSE(host.accepts("\"localhost\""));
  Schema uri = schema_of(R"({"type":"string","format":"uri","maxLength":2048,"pattern":"^https://"})");
  CHECK(uri.accepts("\"https://example.com/a?b#c\""));
  CHECK_FALSE(uri.accepts("\"http://example.com/\""));
  // A format and a pattern that share no string: no value.
  CHECK_THROWS_AS(json_schema_to_gbnf(Json::parse(R"({"type":"string","format":"ipv4","pattern":"[a-z]"})")),
                  SchemaError);
}
