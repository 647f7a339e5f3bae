// Keywords beside enum / const, decided on each listed value: a value the keyword rejects is
// dropped from the list, so `{"enum": [...], "maxLength": 3}` or an `additionalProperties`
// next to an enum of strings (where it asserts nothing) compile. A keyword applies only to
// values of its type (others pass it, as the spec says); subschemas (properties, items, ...)
// are checked on the members they reach with the same small validator; where it cannot decide
// (a format, $ref or a combinator inside), the keyword is refused.
#include <cmath>

#include "engine/structured/json_schema_internal.h"
#include "engine/structured/regex_dfa.h"

namespace pagoda::structured::schema_detail {

namespace {

const char* keyword_type(const std::string& key) {
  static const std::map<std::string, const char*> types = {
      {"minLength", "string"},          {"maxLength", "string"},         {"pattern", "string"},
      {"format", "string"},             {"minimum", "number"},           {"maximum", "number"},
      {"exclusiveMinimum", "number"},   {"exclusiveMaximum", "number"},  {"multipleOf", "number"},
      {"properties", "object"},         {"required", "object"},          {"additionalProperties", "object"},
      {"patternProperties", "object"},  {"propertyNames", "object"},     {"minProperties", "object"},
      {"maxProperties", "object"},      {"items", "array"},              {"prefixItems", "array"},
      {"additionalItems", "array"},     {"minItems", "array"},           {"maxItems", "array"},
      {"uniqueItems", "array"}};
  auto it = types.find(key);
  return it == types.end() ? nullptr : it->second;
}



}  // namespace

std::optional<bool> SchemaConverter::value_passes(const Json& schema, const std::string& key, const Json& v,
                                                  const std::string& path) {
  const Json& kw = schema[key];
  const char* type = keyword_type(key);
  if (!type) return std::nullopt;
  if (!json_type_matches(v, type)) return true;
  const std::string at = path + "/" + pointer_escape(key);
  auto count = [&](uint64_t n) -> std::optional<bool> {
    std::optional<uint64_t> k = count_keyword(Json{{key, kw}}, key.c_str(), path, UINT64_MAX);
    return key.rfind("min", 0) == 0 ? n >= *k : n <= *k;
  };
  if (key == "minLength" || key == "maxLength") return count(utf8_codepoints(v.get<std::string>()).size());
  if (key == "minItems" || key == "maxItems" || key == "minProperties" || key == "maxProperties") return count(v.size());
  if (key == "pattern") return pattern_dfa(kw, at).accepts(utf8_codepoints(v.get<std::string>()));
  if (key == "minimum" || key == "maximum" || key == "exclusiveMinimum" || key == "exclusiveMaximum") {
    if (!kw.is_number()) throw SchemaError(at, key + " must be a number");
    // Exact for integers within 2^53 and for the doubles a validator compares.
    double x = v.get<double>(), b = kw.get<double>();
    if (key == "minimum") return x >= b;
    if (key == "maximum") return x <= b;
    if (key == "exclusiveMinimum") return x > b;
    return x < b;
  }
  if (key == "multipleOf") {
    if (!kw.is_number_integer() || !v.is_number_integer() || kw.get<long long>() <= 0) return std::nullopt;
    return v.get<long long>() % kw.get<long long>() == 0;
  }
  if (key == "required") {
    if (!kw.is_array()) throw SchemaError(at, "required must be an array of strings");
    for (const auto& n : kw)
      if (!n.is_string() || !v.contains(n.get<std::string>())) return false;
    return true;
  }
  if (key == "uniqueItems") {
    if (!kw.is_boolean()) throw SchemaError(at, "uniqueItems must be a boolean");
    if (!kw.get<bool>()) return true;
    for (size_t i = 0; i < v.size(); ++i)
      for (size_t j = i + 1; j < v.size(); ++j)
        if (v[i] == v[j]) return false;
    return true;
  }
  // Subschemas: each member / item the keyword reaches must be valid under its schema.
  std::optional<bool> all = true;
  auto check = [&](const Json& sub, const Json& member) {
    if (all && *all) all = value_valid(sub, member, at);
  };
  if (key == "properties") {
    if (!kw.is_object()) throw SchemaError(at, "properties must be an object");
    for (const auto& [name, sub] : kw.items())
      if (v.contains(name)) check(sub, v[name]);
    return all;
  }
  if (key == "patternProperties" || key == "additionalProperties") {
    KeyRules keys = key_rules(schema, path);
    for (const auto& [name, member] : v.items()) {
      std::vector<size_t> matched = keys.matching(name);
      if (key == "patternProperties") {
        for (size_t i : matched) check(keys.patterns[i].schema, member);
      } else {
        bool listed = schema.contains("properties") && schema["properties"].is_object() &&
                      schema["properties"].contains(name);
        if (!listed && matched.empty()) check(kw, member);
      }
    }
    return all;
  }
  if (key == "items" && !kw.is_array()) {
    for (const auto& item : v) check(kw, item);
    return all;
  }
  if (key == "items" || key == "prefixItems" || key == "additionalItems") return v.empty() ? all : std::nullopt;
  return std::nullopt;  // format, propertyNames on a value of their type
}

bool SchemaConverter::value_passes_exclusions(const Json& schema, const Json& v, const std::string& path) {
  if (schema.contains(kNonInteger) && json_type_matches(v, "integer")) return false;
  if (!v.is_string()) return true;
  if (schema.contains(kExcludedStrings))
    for (const auto& s : schema[kExcludedStrings])
      if (s == v) return false;
  if (schema.contains(kExcludedPatterns))
    for (const auto& p : schema[kExcludedPatterns])
      if (pattern_dfa(p, path + "/not/pattern", RegexClasses::Wide).accepts(utf8_codepoints(v.get<std::string>()))) return false;
  return true;
}

std::optional<bool> SchemaConverter::value_valid(const Json& schema, const Json& v, const std::string& path) {
  if (schema.is_boolean()) return schema.get<bool>();
  if (!schema.is_object()) throw SchemaError(path, "a schema must be an object or a boolean");
  std::optional<bool> result = true;
  for (const auto& [key, kw] : schema.items()) {
    if (is_annotation(key) || is_internal_keyword(key)) continue;
    std::optional<bool> passes;
    if (key == "type") {
      bool any = false;
      for (const auto& t : declared_types(schema, path)) any |= json_type_matches(v, t);
      passes = any;
    } else if (key == "enum") {
      passes = kw.is_array() && std::find(kw.begin(), kw.end(), v) != kw.end();
    } else if (key == "const") {
      passes = kw == v;
    } else {
      passes = value_passes(schema, key, v, path);
    }
    if (passes && !*passes) return false;
    if (!passes) result = std::nullopt;
  }
  if (!value_passes_exclusions(schema, v, path)) return false;
  return result;
}

}  // namespace pagoda::structured::schema_detail
