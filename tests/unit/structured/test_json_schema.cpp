// JSON Schema -> GBNF: each keyword's grammar, checked by walking texts through the grammar
// core's matcher (compile_gbnf without a vocabulary, accept_bytes, can_end).
#include <catch2/catch.hpp>

#include <random>

#include "engine/structured/json_schema.h"
#include "engine/structured/structured.h"

using namespace pagoda::structured;
using Json = nlohmann::ordered_json;

namespace {

struct Grammar {
  std::string text;
  std::shared_ptr<const CompiledGrammar> compiled;
  bool accepts(const std::string& output) const {
    GrammarMatcher m(compiled);
    return m.accept_bytes(output) && m.can_end();
  }
};

Grammar grammar_of(const std::string& schema, SchemaOptions options = {}) {
  Grammar g;
  g.text = json_schema_to_gbnf(Json::parse(schema), options);
  INFO(g.text);
  g.compiled = compile_gbnf(g.text, nullptr);
  return g;
}

Grammar compile_text(const std::string& text) {
  return Grammar{text, compile_gbnf(text, nullptr)};
}

// Exact decimal value of a JSON number text (no exponent) times 1000.
long long milli(const std::string& text) {
  bool negative = text[0] == '-';
  std::string body = negative ? text.substr(1) : text;
  size_t dot = body.find('.');
  std::string whole = body.substr(0, dot), frac = dot == std::string::npos ? "" : body.substr(dot + 1);
  frac.resize(3, '0');
  long long v = std::stoll(whole) * 1000 + std::stoll(frac);
  return negative ? -v : v;
}

}  // namespace

TEST_CASE("type: each JSON type, unions, integer vs number") {
  auto any = grammar_of("{}");
  for (const char* ok : {"null", "true", "false", "0", "-12", "3.5e-7", "\"x\"", "[]", "{}",
                         "{\"a\":[1,{\"b\":null}]}", "\"\\u00e9\\n\""})
    CHECK(any.accepts(ok));
  for (const char* bad : {"", "nul", "01", "1.", "[1,]", "{\"a\"}", "\"\\ud800\"", "'x'"})
    CHECK_FALSE(any.accepts(bad));

  auto integer = grammar_of(R"({"type":"integer"})");
  CHECK(integer.accepts("0"));
  CHECK(integer.accepts("-42"));
  CHECK_FALSE(integer.accepts("1.5"));
  CHECK_FALSE(integer.accepts("1e3"));
  CHECK_FALSE(integer.accepts("-"));
  CHECK_FALSE(integer.accepts("007"));

  auto number = grammar_of(R"({"type":"number"})");
  CHECK(number.accepts("1.5"));
  CHECK(number.accepts("-0.25E+10"));
  CHECK_FALSE(number.accepts(".5"));

  auto nullable = grammar_of(R"({"type":["string","null"]})");
  CHECK(nullable.accepts("null"));
  CHECK(nullable.accepts("\"a\""));
  CHECK_FALSE(nullable.accepts("1"));

  auto boolean = grammar_of(R"({"type":"boolean"})");
  CHECK(boolean.accepts("true"));
  CHECK_FALSE(boolean.accepts("null"));
}

TEST_CASE("properties are written in schema order; optional ones may be left out") {
  auto g = grammar_of(R"({"type":"object","properties":{"b":{"type":"integer"},"a":{"type":"string"},
      "c":{"type":"boolean"}},"required":["a"],"additionalProperties":false})");
  CHECK(g.accepts(R"({"a":"x"})"));
  CHECK(g.accepts(R"({"b":1,"a":"x"})"));
  CHECK(g.accepts(R"({"b":1,"a":"x","c":true})"));
  CHECK(g.accepts(R"({"a":"x","c":false})"));
  CHECK_FALSE(g.accepts(R"({"a":"x","b":1})"));   // out of order
  CHECK_FALSE(g.accepts(R"({"b":1})"));           // a is required
  CHECK_FALSE(g.accepts(R"({"a":"x","d":1})"));   // no additional properties
  CHECK_FALSE(g.accepts(R"({"a":1})"));
  CHECK_FALSE(g.accepts(R"({,"a":"x"})"));
  CHECK_FALSE(g.accepts(R"({"a":"x",})"));
}

TEST_CASE("additionalProperties: default true, schema, and never a listed name") {
  auto open = grammar_of(R"({"type":"object","properties":{"a":{"type":"integer"}}})");
  CHECK(open.accepts(R"({})"));
  CHECK(open.accepts(R"({"a":1,"zz":[true],"ab":null})"));
  CHECK(open.accepts(R"({"x":{}})"));
  CHECK_FALSE(open.accepts(R"({"a":1,"a":2})"));  // 'a' again as an extra
  CHECK_FALSE(open.accepts(R"({"x":1,"a":"s"})"));
  CHECK(open.accepts(R"({"":1})"));

  auto typed = grammar_of(R"({"properties":{"a":{}},"additionalProperties":{"type":"string"}})");
  CHECK(typed.accepts(R"({"a":1,"b":"x"})"));
  CHECK_FALSE(typed.accepts(R"({"a":1,"b":2})"));

  // required names not under properties come after them, valued by additionalProperties
  auto req = grammar_of(R"({"type":"object","properties":{"a":{"type":"null"}},"required":["z"],
      "additionalProperties":{"type":"integer"}})");
  CHECK(req.accepts(R"({"z":3})"));
  CHECK(req.accepts(R"({"a":null,"z":3,"q":4})"));
  CHECK_FALSE(req.accepts(R"({"a":null})"));
  CHECK_FALSE(req.accepts(R"({"z":"s"})"));
  // A required name that may not appear: no object fits, other types still do.
  auto closed = grammar_of(R"({"required":["z"],"additionalProperties":false,"properties":{}})");
  CHECK(closed.accepts("1"));
  CHECK_FALSE(closed.accepts(R"({"z":1})"));
  CHECK_FALSE(closed.accepts(R"({})"));
}

TEST_CASE("minProperties / maxProperties") {
  auto g = grammar_of(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},
      "minProperties":1,"maxProperties":2})");
  CHECK_FALSE(g.accepts("{}"));
  CHECK(g.accepts(R"({"a":1})"));
  CHECK(g.accepts(R"({"b":1})"));
  CHECK(g.accepts(R"({"x":1})"));
  CHECK(g.accepts(R"({"a":1,"b":2})"));
  CHECK(g.accepts(R"({"a":1,"x":2})"));
  CHECK_FALSE(g.accepts(R"({"a":1,"b":2,"x":3})"));
  CHECK_FALSE(g.accepts(R"({"x":1,"y":2,"z":3})"));
  auto at_least = grammar_of(R"({"type":"object","minProperties":3})");
  CHECK_FALSE(at_least.accepts(R"({"x":1,"y":2})"));
  // A parser keeps one of each repeated name, so names beyond the listed properties that count
  // towards minProperties have distinct lengths (shortest first); later ones are free.
  CHECK(at_least.accepts(R"({"x":1,"yz":2,"abc":3,"w":4,"w":5})"));
  CHECK_FALSE(at_least.accepts(R"({"":1,"y":2,"zz":3})"));
  CHECK(at_least.accepts(R"({"a":1,"bc":2,"def":3})"));
  CHECK_FALSE(at_least.accepts(R"({"x":1,"x":2,"x":3})"));
  CHECK_FALSE(at_least.accepts(R"({"x":1,"y":2,"z":3,"w":4})"));
  // One listed property plus two more: the two extra names differ.
  auto listed = grammar_of(R"({"properties":{"id":{"type":"integer"}},"required":["id"],"minProperties":3})");
  CHECK(listed.accepts(R"({"id":1,"a":2,"bb":3})"));
  CHECK_FALSE(listed.accepts(R"({"id":1,"a":2,"a":3})"));
  // Names from a pattern: the same rule, within the pattern's names.
  auto pattern = grammar_of(R"({"patternProperties":{"^x-":{"type":"integer"}},"additionalProperties":false,
      "minProperties":2})");
  CHECK(pattern.accepts(R"({"x-":1,"x-a":2})"));
  CHECK(pattern.accepts(R"({"x-":1,"x-a":2,"x-a":3})"));
  CHECK_FALSE(pattern.accepts(R"({"x-a":1,"x-a":2})"));
  CHECK_FALSE(pattern.accepts(R"({"x-":1,"y":2})"));
}

TEST_CASE("arrays: items, prefixItems, tuple items + additionalItems, min/maxItems") {
  auto list = grammar_of(R"({"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3})");
  CHECK_FALSE(list.accepts("[]"));
  CHECK(list.accepts("[1]"));
  CHECK(list.accepts("[1,2,3]"));
  CHECK_FALSE(list.accepts("[1,2,3,4]"));
  CHECK_FALSE(list.accepts("[1,\"a\"]"));

  auto tuple = grammar_of(R"({"prefixItems":[{"type":"string"},{"type":"integer"}],"items":false})");
  CHECK(tuple.accepts("[]"));
  CHECK(tuple.accepts("[\"a\"]"));
  CHECK(tuple.accepts("[\"a\",1]"));
  CHECK_FALSE(tuple.accepts("[\"a\",1,2]"));
  CHECK_FALSE(tuple.accepts("[1]"));

  auto tuple_min = grammar_of(R"({"prefixItems":[{"type":"string"},{"type":"integer"}],
      "items":{"type":"null"},"minItems":3})");
  CHECK_FALSE(tuple_min.accepts("[\"a\",1]"));
  CHECK(tuple_min.accepts("[\"a\",1,null]"));
  CHECK(tuple_min.accepts("[\"a\",1,null,null]"));

  auto draft7 = grammar_of(R"({"items":[{"type":"integer"}],"additionalItems":{"type":"boolean"}})");
  CHECK(draft7.accepts("[1,true,false]"));
  CHECK_FALSE(draft7.accepts("[1,2]"));

  auto unique_one = grammar_of(R"({"type":"array","uniqueItems":true,"maxItems":1})");
  CHECK(unique_one.accepts("[3]"));
  CHECK_FALSE(unique_one.accepts("[3,3]"));
}

TEST_CASE("enum and const: literal values, numbers written as integers when whole") {
  auto e = grammar_of(R"({"enum":["red",2,null,1.0,{"k":[2.50,true]}]})");
  CHECK(e.accepts("\"red\""));
  CHECK(e.accepts("2"));
  CHECK(e.accepts("1"));
  CHECK(e.accepts("null"));
  CHECK(e.accepts(R"({"k":[2.5,true]})"));
  CHECK_FALSE(e.accepts("\"blue\""));
  CHECK_FALSE(e.accepts("3"));
  auto typed = grammar_of(R"({"type":"string","enum":["a",1]})");
  CHECK(typed.accepts("\"a\""));
  CHECK_FALSE(typed.accepts("1"));
  auto c = grammar_of(R"({"const":"he said \"hi\"\n"})");
  CHECK(c.accepts(R"("he said \"hi\"\n")"));
  auto both = grammar_of(R"({"enum":[1,2],"const":2})");
  CHECK(both.accepts("2"));
  CHECK_FALSE(both.accepts("1"));
}

TEST_CASE("anyOf, oneOf of distinct branches, allOf merged") {
  auto any = grammar_of(R"({"anyOf":[{"type":"integer","minimum":10},{"type":"string","maxLength":1}]})");
  CHECK(any.accepts("12"));
  CHECK(any.accepts("\"a\""));
  CHECK_FALSE(any.accepts("9"));
  CHECK_FALSE(any.accepts("\"ab\""));

  auto tagged = grammar_of(R"({"oneOf":[
      {"type":"object","properties":{"kind":{"const":"a"},"x":{"type":"integer"}},"required":["kind"]},
      {"type":"object","properties":{"kind":{"const":"b"},"y":{"type":"string"}},"required":["kind"]}]})");
  CHECK(tagged.accepts(R"({"kind":"a","x":1})"));
  CHECK(tagged.accepts(R"({"kind":"b","y":"s"})"));
  CHECK_FALSE(tagged.accepts(R"({"kind":"c"})"));

  // The second branch forbids everything but b while the first requires a: no object fits,
  // and the first branch allows nothing else, so the schema accepts no value: refused.
  CHECK_THROWS_AS(grammar_of(R"({"allOf":[
      {"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]},
      {"properties":{"b":{"type":"string"}},"required":["b"],"additionalProperties":false}]})"),
                  SchemaError);

  auto merged = grammar_of(R"({"allOf":[
      {"type":"object","properties":{"a":{"type":"integer","minimum":0}},"required":["a"]},
      {"properties":{"a":{"maximum":5},"b":{"type":"string"}},"required":["b"]}]})");
  CHECK(merged.accepts(R"({"a":3,"b":"x"})"));
  CHECK_FALSE(merged.accepts(R"({"a":6,"b":"x"})"));
  CHECK_FALSE(merged.accepts(R"({"a":3})"));

  // items of one side still checks the positions the other side's prefixItems covers.
  auto items_prefix = grammar_of(R"({"allOf":[{"type":"array","items":{"type":"string"}},
      {"prefixItems":[{"minLength":2}],"maxItems":2}]})");
  CHECK(items_prefix.accepts(R"(["ab","c"])"));
  CHECK_FALSE(items_prefix.accepts(R"([1])"));
  CHECK_FALSE(items_prefix.accepts(R"(["a"])"));
  CHECK_FALSE(items_prefix.accepts(R"(["ab",2])"));

  // Keywords beside anyOf apply to every branch.
  auto shared = grammar_of(R"({"type":"object","properties":{"id":{"type":"integer"}},"required":["id"],
      "anyOf":[{"required":["x"]},{"required":["y"]}]})");
  CHECK(shared.accepts(R"({"id":1,"x":0})"));
  CHECK(shared.accepts(R"({"id":1,"y":0})"));
  CHECK_FALSE(shared.accepts(R"({"id":1})"));
}

TEST_CASE("$ref: $defs, definitions, recursion, pointer escapes, siblings") {
  auto tree = grammar_of(R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},
      "kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["v"],"additionalProperties":false}},
      "$ref":"#/$defs/node"})");
  CHECK(tree.accepts(R"({"v":1})"));
  CHECK(tree.accepts(R"({"v":1,"kids":[{"v":2},{"v":3,"kids":[]}]})"));
  CHECK_FALSE(tree.accepts(R"({"v":1,"kids":[{}]})"));

  auto old = grammar_of(R"({"definitions":{"a/b":{"type":"integer"},"m~n":{"type":"string"},"p%q":{"type":"null"}},
      "type":"array","prefixItems":[{"$ref":"#/definitions/a~1b"},{"$ref":"#/definitions/m~0n"},
      {"$ref":"#/definitions/p%25q"}]})");
  CHECK(old.accepts("[1,\"s\",null]"));
  CHECK_FALSE(old.accepts("[\"s\"]"));

  auto self = grammar_of(R"({"type":"object","properties":{"next":{"$ref":"#"}},"additionalProperties":false})");
  CHECK(self.accepts(R"({"next":{"next":{}}})"));

  // 2020-12: keywords beside $ref apply; draft 7: they are ignored.
  const char* beside = R"({"$defs":{"s":{"type":"string"}},"$ref":"#/$defs/s","maxLength":2})";
  CHECK_FALSE(grammar_of(beside).accepts("\"abc\""));
  SchemaOptions draft7;
  draft7.ref_ignores_siblings = true;
  CHECK(grammar_of(beside, draft7).accepts("\"abc\""));
}

TEST_CASE("strings: minLength/maxLength count code points; escapes stay valid JSON") {
  auto g = grammar_of(R"({"type":"string","minLength":2,"maxLength":3})");
  CHECK(g.accepts("\"ab\""));
  CHECK(g.accepts("\"\xC3\xA9\xE2\x82\xAC\""));  // two code points, five bytes
  CHECK(g.accepts("\"\\n\\\"x\""));               // three characters, escaped
  CHECK(g.accepts("\"\\u00e9a\""));
  CHECK_FALSE(g.accepts("\"a\""));
  CHECK_FALSE(g.accepts("\"abcd\""));
  CHECK_FALSE(g.accepts("\"a\nb\""));  // raw control character
  CHECK_FALSE(g.accepts("\"\\ud83d\\ude00\""));  // surrogate escapes are not generated
}

TEST_CASE("pattern: unanchored ends, anchors, JSON escapes inside") {
  auto contains = grammar_of(R"({"type":"string","pattern":"a[0-9]+"})");
  CHECK(contains.accepts("\"xa12y\""));
  CHECK(contains.accepts("\"a1\""));
  CHECK_FALSE(contains.accepts("\"xay\""));
  auto anchored = grammar_of(R"({"type":"string","pattern":"^\\d{3}-[A-Z]{2}$"})");
  CHECK(anchored.accepts("\"123-AB\""));
  CHECK_FALSE(anchored.accepts("\"123-AB \""));
  CHECK_FALSE(anchored.accepts("\"x123-AB\""));
  auto quotes = grammar_of(R"({"type":"string","pattern":"^[\"\\\\]+\\t$"})");
  CHECK(quotes.accepts(R"("\"\\\t")"));
  CHECK_FALSE(quotes.accepts("\"\"\""));
  auto start_only = grammar_of(R"({"type":"string","pattern":"^ab"})");
  CHECK(start_only.accepts("\"abc\""));
  CHECK_FALSE(start_only.accepts("\"cab\""));
  auto lengths = grammar_of(R"({"type":"string","pattern":"^x[a-z]*$","minLength":3,"maxLength":4})");
  CHECK(lengths.accepts("\"xab\""));
  CHECK(lengths.accepts("\"xabc\""));
  CHECK_FALSE(lengths.accepts("\"xa\""));
  CHECK_FALSE(lengths.accepts("\"xabcd\""));
  auto non_string = grammar_of(R"({"pattern":"^a$"})");
  CHECK(non_string.accepts("12"));  // pattern only constrains strings
}

TEST_CASE("formats") {
  auto date = grammar_of(R"({"type":"string","format":"date"})");
  CHECK(date.accepts("\"2024-02-29\""));
  CHECK(date.accepts("\"2000-02-29\""));
  CHECK_FALSE(date.accepts("\"1900-02-29\""));
  CHECK_FALSE(date.accepts("\"2023-02-29\""));
  CHECK_FALSE(date.accepts("\"2023-04-31\""));
  CHECK_FALSE(date.accepts("\"2023-13-01\""));
  auto dt = grammar_of(R"({"type":"string","format":"date-time"})");
  CHECK(dt.accepts("\"2023-01-31T23:59:59.123+05:30\""));
  CHECK(dt.accepts("\"2023-01-31T00:00:00Z\""));
  CHECK_FALSE(dt.accepts("\"2023-01-31T24:00:00Z\""));
  CHECK_FALSE(dt.accepts("\"2023-01-31 00:00:00Z\""));
  auto time = grammar_of(R"({"type":"string","format":"time"})");
  CHECK(time.accepts("\"08:30:06Z\""));
  CHECK_FALSE(time.accepts("\"08:30Z\""));
  auto uuid = grammar_of(R"({"type":"string","format":"uuid"})");
  CHECK(uuid.accepts("\"123e4567-e89b-12d3-a456-426614174000\""));
  CHECK_FALSE(uuid.accepts("\"123e4567e89b12d3a456426614174000\""));
  auto email = grammar_of(R"({"type":"string","format":"email"})");
  CHECK(email.accepts("\"first.last+tag@example.co.uk\""));
  CHECK_FALSE(email.accepts("\"no-at-sign\""));
  CHECK_FALSE(email.accepts("\"a@@b\""));
  auto uri = grammar_of(R"({"type":"string","format":"uri"})");
  CHECK(uri.accepts("\"https://example.com/a/b?x=1&y=%20#frag\""));
  CHECK(uri.accepts("\"http://localhost:8080\""));
  CHECK_FALSE(uri.accepts("\"example.com\""));
  CHECK_FALSE(uri.accepts("\"http://a b\""));
  auto ipv4 = grammar_of(R"({"type":"string","format":"ipv4"})");
  CHECK(ipv4.accepts("\"192.168.0.255\""));
  CHECK_FALSE(ipv4.accepts("\"256.1.1.1\""));
  CHECK_FALSE(ipv4.accepts("\"01.1.1.1\""));
  auto host = grammar_of(R"({"type":"string","format":"hostname"})");
  CHECK(host.accepts("\"a-b.example\""));
  CHECK_FALSE(host.accepts("\"-a.example\""));
}

TEST_CASE("integer ranges are exact (brute force over a window)") {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> pick(-1200, 1200);
  for (int round = 0; round < 40; ++round) {
    int a = pick(rng), b = pick(rng);
    if (a > b) std::swap(a, b);
    bool has_lo = round % 5 != 1, has_hi = round % 5 != 2;
    bool excl_lo = round % 3 == 0, excl_hi = round % 4 == 0;
    Json schema = {{"type", "integer"}};
    if (has_lo) schema[excl_lo ? "exclusiveMinimum" : "minimum"] = a;
    if (has_hi) schema[excl_hi ? "exclusiveMaximum" : "maximum"] = b;
    Grammar g{json_schema_to_gbnf(schema), nullptr};
    g.compiled = compile_gbnf(g.text, nullptr);
    INFO(schema.dump() << "\n" << g.text);
    for (int x = -1500; x <= 1500; ++x) {
      bool in = (!has_lo || (excl_lo ? x > a : x >= a)) && (!has_hi || (excl_hi ? x < b : x <= b));
      if (in != g.accepts(std::to_string(x))) FAIL("x = " << x);
    }
    CHECK(g.accepts("0") == ((!has_lo || (excl_lo ? 0 > a : 0 >= a)) && (!has_hi || (excl_hi ? 0 < b : 0 <= b))));
  }
  auto big = grammar_of(R"({"type":"integer","minimum":-9007199254740993,"maximum":123456789012})");
  CHECK(big.accepts("-9007199254740993"));
  CHECK_FALSE(big.accepts("-9007199254740994"));
  CHECK(big.accepts("123456789012"));
  CHECK_FALSE(big.accepts("123456789013"));
  auto fractional = grammar_of(R"({"type":"integer","minimum":1.5,"maximum":3.5})");
  CHECK(fractional.accepts("2"));
  CHECK(fractional.accepts("3"));
  CHECK_FALSE(fractional.accepts("1"));
  CHECK_FALSE(fractional.accepts("4"));
}

TEST_CASE("number bounds are exact for decimals (brute force over a grid)") {
  // Bounds in tenths, instances in thousandths written several ways.
  const double bounds[][2] = {{-2.5, 3.7}, {0, 1}, {-1, 0}, {0.1, 2}, {-10, -0.5}, {-0.3, 0.3}, {1.25, 7},
                              {0.25, 0.75}, {1.2, 1.35}, {-1.35, -1.2}, {0.05, 0.1}, {2, 2}};
  int round = 0;
  for (const auto& bb : bounds) {
    for (int mode = 0; mode < 4; ++mode, ++round) {
      bool excl_lo = mode & 1, excl_hi = mode & 2;
      Json schema = {{"type", "number"}};
      schema[excl_lo ? "exclusiveMinimum" : "minimum"] = bb[0];
      schema[excl_hi ? "exclusiveMaximum" : "maximum"] = bb[1];
      std::string gbnf;
      try {
        gbnf = json_schema_to_gbnf(schema);
      } catch (const SchemaError& e) {
        if (bb[0] == bb[1] && (excl_lo || excl_hi)) continue;  // empty range: refused
        FAIL(schema.dump() << ": " << e.what());
      }
      auto compiled = compile_gbnf(gbnf, nullptr);
      Grammar g{gbnf, compiled};
      INFO(schema.dump() << "\n" << gbnf);
      long long lo = llround(bb[0] * 1000), hi = llround(bb[1] * 1000);
      for (long long m = -11000; m <= 11000; m += 5) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%s%lld.%03lld", m < 0 ? "-" : "", std::llabs(m) / 1000, std::llabs(m) % 1000);
        std::string text = buf;
        for (const std::string& form : {text, text.substr(0, text.find_last_not_of('0') + 1)}) {
          std::string f = form.back() == '.' ? form.substr(0, form.size() - 1) : form;
          if (f == "-0") continue;
          long long v = milli(f);
          bool in = (excl_lo ? v > lo : v >= lo) && (excl_hi ? v < hi : v <= hi);
          if (in != g.accepts(f)) FAIL(f << " expected " << in);
        }
      }
    }
  }
  auto positive = grammar_of(R"({"type":"number","exclusiveMinimum":0})");
  CHECK(positive.accepts("0.001"));
  CHECK(positive.accepts("12"));
  CHECK_FALSE(positive.accepts("0"));
  CHECK_FALSE(positive.accepts("0.000"));
  CHECK_FALSE(positive.accepts("-0.5"));
}

TEST_CASE("flexible whitespace") {
  SchemaOptions flexible;
  flexible.flexible_whitespace = true;
  auto g = grammar_of(R"({"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"}},
      "b":{"enum":[{"x":1}]}},"required":["a"]})", flexible);
  CHECK(g.accepts(R"({"a":[1,2]})"));
  CHECK(g.accepts("{ \"a\" : [ 1 , 2 ] , \"b\": {\"x\": 1} }"));
  CHECK(g.accepts("{\n  \"a\": [\n    1\n  ]\n}"));
  CHECK_FALSE(g.accepts("{  \"a\":[]}"));  // two spaces: only one space or a newline + indent
  auto compact = grammar_of(R"({"type":"object","properties":{"a":{"type":"integer"}}})");
  CHECK_FALSE(compact.accepts("{ \"a\":1}"));
}

TEST_CASE("json_object_gbnf and choice_gbnf") {
  auto object = compile_text(json_object_gbnf());
  CHECK(object.accepts(R"({"a":[1,{"b":"c"}]})"));
  CHECK(object.accepts("{}"));
  CHECK_FALSE(object.accepts("[]"));
  CHECK_FALSE(object.accepts("\"s\""));
  SchemaOptions flexible;
  flexible.flexible_whitespace = true;
  CHECK(compile_text(json_object_gbnf(flexible)).accepts("{ \"a\": 1 }"));

  auto choice = compile_text(choice_gbnf({"yes", "no", "say \"maybe\"\n"}));
  CHECK(choice.accepts("yes"));
  CHECK(choice.accepts("say \"maybe\"\n"));
  CHECK_FALSE(choice.accepts("ye"));
  CHECK_FALSE(choice.accepts("yesno"));
  CHECK_THROWS_AS(choice_gbnf({}), SchemaError);
}

TEST_CASE("a realistic nested schema (tool arguments) compiles and accepts its examples") {
  auto g = grammar_of(R"({
    "type":"object",
    "properties":{
      "location":{"type":"string","description":"City"},
      "unit":{"type":"string","enum":["celsius","fahrenheit"]},
      "days":{"type":"integer","minimum":1,"maximum":14},
      "when":{"type":"string","format":"date"},
      "tags":{"type":"array","items":{"type":"string","pattern":"^[a-z]{1,8}$"},"maxItems":4},
      "owner":{"$ref":"#/$defs/person"}
    },
    "required":["location","unit"],
    "additionalProperties":false,
    "$defs":{"person":{"type":"object","properties":{"name":{"type":"string"},"email":{"type":"string","format":"email"}},
                       "required":["name"],"additionalProperties":false}}})");
  CHECK(g.accepts(R"({"location":"Paris","unit":"celsius"})"));
  CHECK(g.accepts(R"({"location":"Paris","unit":"celsius","days":14,"when":"2025-12-31","tags":["a","bc"],"owner":{"name":"N","email":"n@x.org"}})"));
  CHECK_FALSE(g.accepts(R"({"location":"Paris","unit":"kelvin"})"));
  CHECK_FALSE(g.accepts(R"({"location":"Paris","unit":"celsius","days":15})"));
  CHECK_FALSE(g.accepts(R"({"location":"Paris","unit":"celsius","tags":["A"]})"));
}

TEST_CASE("long and ambiguous outputs stay within the matcher's limits") {
  // Unanchored pattern: the match may start at any position.
  auto search = grammar_of(R"({"type":"string","pattern":"a+b"})");
  std::string long_match = std::string(1, '"').append(3000, 'a').append("b").append(500, 'c').append("\"");
  std::string no_match = std::string(1, '"').append(3000, 'a').append("\"");
  CHECK(search.accepts(long_match));
  CHECK_FALSE(search.accepts(no_match));
  // Deep generic JSON.
  auto any = grammar_of("{}");
  CHECK(any.accepts(std::string(200, '[') + std::string(200, ']')));
  // Many optional properties, all present or only the last.
  Json wide = {{"type", "object"}, {"properties", Json::object()}, {"additionalProperties", false}};
  std::string all = "{", last;
  for (int i = 0; i < 60; ++i) {
    std::string name = "p";
    name += std::to_string(i);
    wide["properties"][name] = {{"type", "integer"}};
    all += (i ? ",\"" : "\"") + name + "\":" + std::to_string(i);
    last = "{\"" + name + "\":1}";
  }
  auto wide_g = grammar_of(wide.dump());
  CHECK(wide_g.accepts(all + "}"));
  CHECK(wide_g.accepts(last));
  // anyOf of many objects that look alike until late.
  Json branches = Json::array();
  for (int i = 0; i < 30; ++i)
    branches.push_back({{"type", "object"}, {"properties", {{"k", {{"const", std::string(40, 'x') + std::to_string(i)}}}}}, {"required", {"k"}}});
  auto alike = grammar_of(Json{{"anyOf", branches}}.dump());
  CHECK(alike.accepts("{\"k\":\"" + std::string(40, 'x') + "17\",\"extra\":[1,2,3]}"));
}

TEST_CASE("patternProperties with properties and additionalProperties; propertyNames") {
  auto g = grammar_of(R"({"type":"object","properties":{"x-a":{"type":"string"}},
    "patternProperties":{"^x-":{"maxLength":2},"n$":{"type":"integer"}},"additionalProperties":false})");
  CHECK(g.accepts(R"({"x-a":"ab"})"));
  CHECK_FALSE(g.accepts(R"({"x-a":"abc"})"));       // the listed name also matches ^x-
  CHECK_FALSE(g.accepts(R"({"x-a":1})"));
  CHECK(g.accepts(R"({"x-b":"q","n":3})"));
  CHECK_FALSE(g.accepts(R"({"x-n":"q"})"));         // matches both: a string is no integer
  CHECK(g.accepts(R"({"x-n":7})"));
  CHECK_FALSE(g.accepts(R"({"other":1})"));         // additionalProperties false
  auto names = grammar_of(R"({"propertyNames":{"pattern":"^[a-c]+$","maxLength":2},"additionalProperties":{"type":"null"}})");
  CHECK(names.accepts(R"({"ab":null,"c":null})"));
  CHECK_FALSE(names.accepts(R"({"abc":null})"));
  CHECK_FALSE(names.accepts(R"({"d":null})"));
  CHECK_FALSE(names.accepts(R"({"a":1})"));
}

TEST_CASE("pattern with length bounds it does not imply, and anchors inside the pattern") {
  auto g = grammar_of(R"({"type":"string","pattern":"^(ab|c)+$","minLength":3,"maxLength":5})");
  CHECK(g.accepts(R"("abc")"));
  CHECK(g.accepts(R"("ccccc")"));
  CHECK_FALSE(g.accepts(R"("ab")"));
  CHECK_FALSE(g.accepts(R"("cccccc")"));
  CHECK_FALSE(g.accepts(R"("abd")"));
  auto inner = grammar_of(R"j({"type":"string","pattern":"(^a|b$)"})j");
  CHECK(inner.accepts(R"("ax")"));
  CHECK(inner.accepts(R"("xb")"));
  CHECK_FALSE(inner.accepts(R"("xa")"));
  CHECK_FALSE(inner.accepts(R"("bx")"));
  auto never = grammar_of(R"({"type":["string","null"],"pattern":"a^b"})");
  CHECK(never.accepts("null"));
  CHECK_FALSE(never.accepts(R"("a^b")"));
}

TEST_CASE("not over type, enum/const and required") {
  auto types = grammar_of(R"({"type":["string","null","boolean"],"not":{"type":"null"}})");
  CHECK(types.accepts(R"("a")"));
  CHECK(types.accepts("true"));
  CHECK_FALSE(types.accepts("null"));
  auto values = grammar_of(R"({"type":["string","boolean","null"],"not":{"enum":["a","",true,null]}})");
  CHECK(values.accepts(R"("b")"));
  CHECK(values.accepts(R"("aa")"));
  CHECK(values.accepts("false"));
  CHECK_FALSE(values.accepts(R"("a")"));
  CHECK_FALSE(values.accepts(R"("")"));
  CHECK_FALSE(values.accepts("true"));
  CHECK_FALSE(values.accepts("null"));
  auto from_enum = grammar_of(R"({"enum":["x","y",3],"not":{"const":"y"}})");
  CHECK(from_enum.accepts(R"("x")"));
  CHECK(from_enum.accepts("3"));
  CHECK_FALSE(from_enum.accepts(R"("y")"));
  auto required = grammar_of(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},
    "not":{"required":["a","b"]}})");
  CHECK(required.accepts(R"({"a":1})"));
  CHECK(required.accepts(R"({"b":1})"));
  CHECK(required.accepts("{}"));
  CHECK_FALSE(required.accepts(R"({"a":1,"b":2})"));
  auto one = grammar_of(R"({"type":"object","not":{"required":["x"]}})");
  CHECK(one.accepts(R"({"y":1})"));
  CHECK_FALSE(one.accepts(R"({"x":1})"));
  CHECK_THROWS_WITH(grammar_of(R"({"type":"string","not":{"type":"string"}})"), Catch::Contains("accepts no value"));
}

TEST_CASE("multipleOf: integers by remainder") {
  auto g = grammar_of(R"({"type":"integer","multipleOf":7})");
  for (int v = -30; v <= 200; ++v) {
    CAPTURE(v);
    CHECK(g.accepts(std::to_string(v)) == (v % 7 == 0));
  }
  CHECK(g.accepts("700000000000000000007"));
  CHECK_FALSE(g.accepts("07"));
  auto numbers = grammar_of(R"({"type":"number","multipleOf":2})");
  CHECK(numbers.accepts("-4"));
  CHECK_FALSE(numbers.accepts("4.0"));  // integers are written
}
