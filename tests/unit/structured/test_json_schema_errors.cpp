// JSON Schema -> GBNF refusals: each unsupported keyword, malformed value and size limit throws
// SchemaError whose path points at the keyword and whose message names it; annotations are
// ignored; random malformed schemas never escape as anything but SchemaError, and whatever
// converts also compiles.
#include <catch2/catch.hpp>

#include <chrono>
#include <random>

#include "engine/structured/json_schema.h"
#include "engine/structured/structured.h"

using namespace pagoda::structured;
using Json = nlohmann::ordered_json;

namespace {

struct Refusal {
  std::string path, message;
};

Refusal refusal_of(const std::string& schema, const SchemaOptions& options = {}) {
  try {
    std::string g = json_schema_to_gbnf(Json::parse(schema), options);
    return {"<none>", std::string("accepted:\n") + g};
  } catch (const SchemaError& e) {
    return {e.path, e.what()};
  }
}

}  // namespace

TEST_CASE("unsupported keywords are refused at their path, by name") {
  struct Case {
    const char* schema;
    const char* path;
    const char* word;
  };
  const Case cases[] = {
      {R"j({"properties":{"a":{"not":{"multipleOf":3}}}})j", "/properties/a/not/multipleOf", "not: 'multipleOf'"},
      {R"j({"type":"number","minimum":1,"not":{"type":"integer"}})j", "/not", "beside numbers with 'minimum'"},
      {R"j({"type":"number","not":{"const":1.5}})j", "/not/const", "number value"},
      {R"j({"not":{"type":"object","additionalProperties":false}})j", "/not/additionalProperties", "beside other keywords"},
      {R"j({"type":"number","multipleOf":1.5})j", "/multipleOf", "positive integer"},
      {R"j({"type":"integer","multipleOf":3,"minimum":1})j", "/multipleOf", "positive minimum"},
      {R"j({"type":"integer","multipleOf":3,"minimum":-100000,"maximum":0})j", "/multipleOf", "more than 256"},
      {R"j({"unevaluatedProperties":false})j", "/unevaluatedProperties", "'unevaluatedProperties'"},
      {R"j({"type":"object","patternProperties":{"a":{},"b":{},"c":{},"d":{},"e":{}}})j", "/patternProperties", "more than 4"},
      {R"j({"type":"object","patternProperties":{"a(?=b)":{}}})j", "/patternProperties/a(?=b)", "lookaround"},
      {R"j({"propertyNames":{"format":"email"}})j", "/propertyNames/format", "propertyNames supports only"},
      {R"j({"allOf":[{"patternProperties":{"a":{}}},{"properties":{"b":{}}}]})j", "/allOf/1/patternProperties", "patternProperties"},
      {R"j({"items":{"unevaluatedItems":false}})j", "/items/unevaluatedItems", "'unevaluatedItems'"},
      {R"j({"maxContains":2})j", "/maxContains", "'maxContains'"},
      {R"j({"unevaluatedProperties":false})j", "/unevaluatedProperties", "'unevaluatedProperties'"},
      {R"j({"type":"string","nullable":true})j", "/nullable", "'nullable'"},
      {R"j({"$defs":{"a/b":{"minContains":1}},"$ref":"#/$defs/a~1b"})j", "/$defs/a~1b/minContains", "'minContains'"},
      {R"j({"type":"array","uniqueItems":true})j", "/uniqueItems", "uniqueItems"},
      {R"j({"type":"array","items":{"type":"string"},"uniqueItems":true})j", "/uniqueItems", "a few values"},
      {R"j({"type":"string","format":"ipv6"})j", "/format", "format 'ipv6'"},
      {R"j({"type":"string","format":"date","pattern":"(x"})j", "/pattern", "pattern"},
      {R"j({"properties":{"p":{"type":"string","pattern":"a(?!b)"}}})j", "/properties/p/pattern", "lookaround"},
      {R"j({"type":"string","pattern":"(a)\\1"})j", "/pattern", "backreference"},
      {R"j({"type":"string","pattern":"^(ab|c)+$","minLength":9000})j", "/minLength", "automaton"},
      {R"j({"$ref":"http://example.com/s.json"})j", "/$ref", "only local $ref"},
      {R"j({"$ref":"#/$defs/missing"})j", "/$ref", "does not resolve"},
      {R"j({"$ref":"#node"})j", "/$ref", "anchors"},
      {R"j({"anyOf":[{"$ref":"#"},{"type":"null"}]})j", "/anyOf/0/$ref", "refers to itself"},
      {R"j({"oneOf":[{"type":"integer"},{"minimum":2}]})j", "/oneOf", "may both match"},
      {R"j({"type":"number","exclusiveMinimum":true,"minimum":1})j", "/exclusiveMinimum", "draft 4"},
      {R"j({"type":"number","minimum":1e30})j", "/minimum", "1e18"},
      {R"j({"enum":["a","bb"],"format":"email"})j", "/format", "enum"},
      {R"j({"allOf":[{"pattern":"a"},{"pattern":"b"}]})j", "/allOf/1/pattern", "'pattern'"},
      {R"j({"type":"strnig"})j", "/type", "unknown type"},
      {R"j({"required":"a"})j", "/required", "array"},
      {R"j({"type":"string","minLength":-1})j", "/minLength", "non-negative"},
      {R"j({"properties":[]})j", "/properties", "object"},
      {R"j({"type":"object","properties":{"a":5}})j", "/properties/a", "object or a boolean"},
      {R"j(false)j", "", "accepts no value"},
      {R"j({"type":"integer","minimum":5,"maximum":4})j", "", "accepts no value"},
      {R"j({"type":"array","items":{"type":"integer"},"minItems":3000000000})j", "/minItems", "limit"},
      {R"j({"type":"string","minLength":3000000000})j", "/minLength", "limit"},
  };
  for (const auto& c : cases) {
    Refusal r = refusal_of(c.schema);
    INFO(c.schema << "\n  -> path " << r.path << ": " << r.message);
    CHECK(r.path == c.path);
    CHECK_THAT(r.message, Catch::Contains(c.word));
  }
}

TEST_CASE("size limits: grammar bytes, nesting depth, expansion") {
  SchemaOptions small;
  small.max_grammar_bytes = 2000;
  Json many = {{"enum", Json::array()}};
  for (int i = 0; i < 500; ++i) many["enum"].push_back(std::string("value-") + std::to_string(i));
  try {
    json_schema_to_gbnf(many, small);
    FAIL("accepted");
  } catch (const SchemaError& e) {
    CHECK_THAT(e.what(), Catch::Contains("larger than 2000 bytes"));
  }
  CHECK_NOTHROW(json_schema_to_gbnf(many));

  Json deep = {{"type", "integer"}};
  for (int i = 0; i < 100; ++i) deep = Json{{"type", "object"}, {"properties", {{"a", deep}}}};
  Refusal r;
  try {
    json_schema_to_gbnf(deep);
  } catch (const SchemaError& e) {
    r = {e.path, e.what()};
  }
  CHECK_THAT(r.message, Catch::Contains("nested deeper"));
  CHECK_THAT(r.path, Catch::StartsWith("/properties/a/properties/a"));

  // Counts that add up: 100 arrays of up to 30 items (unrolled: small counts are), under a
  // small budget. Large counts cost a few copies per binary digit, so 100 arrays of 65,535
  // strings of 65,535 characters fit the default one.
  Json wide = {{"type", "object"}, {"properties", Json::object()}};
  Json huge = wide;
  for (int i = 0; i < 100; ++i) {
    std::string name = "p";
    name += std::to_string(i);
    wide["properties"][name] = {{"type", "array"}, {"items", {{"type", "string"}, {"maxLength", 30}}}, {"maxItems", 30}};
    huge["properties"][name] = {{"type", "array"}, {"items", {{"type", "string"}, {"maxLength", 65535}}}, {"maxItems", 65535}};
  }
  SchemaOptions budget;
  budget.max_expanded_cost = 5000;
  CHECK_THROWS_WITH(json_schema_to_gbnf(wide, budget), Catch::Contains("too large a grammar"));
  CHECK_NOTHROW(compile_gbnf(json_schema_to_gbnf(huge), nullptr));
}

TEST_CASE("work bound: $ref inlining that doubles at each link") {
  Json schema = {{"$defs", Json::object()}};
  for (int i = 0; i < 40; ++i) {
    std::string next = "#/$defs/d";
    next += std::to_string(i + 1);
    // Both branches carry keywords beside $ref, so both inline the next link.
    std::string name = "d";
    name += std::to_string(i);
    schema["$defs"][name] = {{"anyOf", {{{"$ref", next}, {"minimum", -i}}, {{"$ref", next}, {"maximum", 1000 + i}}}}};
  }
  schema["$defs"]["d40"] = {{"type", "integer"}};
  schema["$ref"] = "#/$defs/d0";
  auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(json_schema_to_gbnf(schema), Catch::Contains("too complex"));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
}

TEST_CASE("annotations and unknown words are ignored") {
  std::string plain = json_schema_to_gbnf(Json::parse(R"({"type":"object","properties":{"a":{"type":"integer"}}})"));
  std::string annotated = json_schema_to_gbnf(Json::parse(R"({
    "$schema":"https://json-schema.org/draft/2020-12/schema","$id":"https://example.com/s","title":"T",
    "description":"D","$comment":"c","x-vendor":{"not":{}},"type":"object","examples":[{"a":1}],
    "properties":{"a":{"type":"integer","default":3,"deprecated":true,"readOnly":true,"writeOnly":false,
                       "description":"an integer"}}})"));
  CHECK(plain == annotated);
}

TEST_CASE("random malformed schemas: only SchemaError, and every accepted one compiles") {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> pick(0, 999);
  const char* const keywords[] = {"type", "properties", "required", "additionalProperties", "items",
                                  "prefixItems", "minItems", "maxItems", "enum", "const", "anyOf",
                                  "oneOf", "allOf", "$ref", "minLength", "maxLength", "pattern",
                                  "format", "minimum", "maximum", "exclusiveMinimum",
                                  "exclusiveMaximum", "minProperties", "maxProperties", "$defs",
                                  "additionalItems", "uniqueItems", "title", "patternProperties",
                                  "propertyNames"};
  std::function<Json(int)> value;
  std::function<Json(int)> schema = [&](int depth) -> Json {
    if (pick(rng) < 100) return pick(rng) < 800;
    Json s = Json::object();
    int n = pick(rng) % 4;
    for (int i = 0; i < n; ++i) s[keywords[size_t(pick(rng)) % std::size(keywords)]] = value(depth + 1);
    return s;
  };
  value = [&](int depth) -> Json {
    switch (depth > 3 ? pick(rng) % 6 : pick(rng) % 10) {
      case 0: return pick(rng) % 20 - 5;
      case 1: return pick(rng) / 100.0 - 3;
      case 2: {
        const char* strings[] = {"string", "object", "integer", "#", "#/$defs/a", "^a+$", "date", "[", "number", "null"};
        return strings[pick(rng) % 10];
      }
      case 3: return nullptr;
      case 4: return pick(rng) < 500;
      case 5: return Json::array({"a", "b"});
      case 6: return Json::array({schema(depth), schema(depth)});
      case 7: return Json{{"a", schema(depth)}, {"b", schema(depth)}};
      default: return schema(depth);
    }
  };
  int accepted = 0, refused = 0;
  for (int i = 0; i < 3000; ++i) {
    Json s = schema(0);
    std::string gbnf;
    try {
      gbnf = json_schema_to_gbnf(s);
    } catch (const SchemaError&) {
      ++refused;
      continue;
    } catch (const std::exception& e) {
      FAIL(s.dump() << ": " << e.what());
    }
    ++accepted;
    try {
      compile_gbnf(gbnf, nullptr);
    } catch (const GrammarError& e) {
      FAIL(s.dump() << ": grammar does not compile: " << e.what() << "\n" << gbnf);
    }
  }
  INFO(accepted << " accepted, " << refused << " refused");
  CHECK(accepted > 300);
  CHECK(refused > 300);
}
