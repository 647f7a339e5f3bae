// JSON Schema `not`, where its complement is decidable: rewritten into an equivalent schema
// without it. `not` of a boolean; of `type` (types removed); of `enum` / `const` (values
// removed: from a sibling enum, or by type for null and booleans, from the numbers as the
// integers between them plus the non-integers, or from the string language by automaton); of `required` (objects with some listed name left out: the name forbidden,
// one branch per name); of `properties` (objects with a listed name present and its value in
// the complement of its schema, one branch per name); of a length / count / numeric bound
// (the opposite bound, within the bound's type); of `pattern` (strings outside the pattern's
// automaton); of several independent keywords (one branch per keyword's
// complement). Any other `not` is refused at its path.
#include <algorithm>

#include "engine/structured/json_schema_internal.h"

namespace pagoda::structured::schema_detail {

namespace {

// The keywords of `not`'s schema besides annotations.
std::vector<std::string> assertion_keys(const Json& schema) {
  std::vector<std::string> out;
  for (const auto& [key, value] : schema.items())
    if (!is_annotation(key)) out.push_back(key);
  return out;
}

Json without_types(const Json& schema, const std::set<std::string>& removed, const std::string& path) {
  std::set<std::string> types = declared_types(schema, path);
  // Numbers without the integers: written with a non-zero fraction digit (bounds aside).
  bool non_integer = types.count("number") && removed.count("integer") && !removed.count("number");
  if (non_integer)
    for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "enum", "const"})
      if (schema.contains(k))
        throw SchemaError(path + "/not", std::string("not: {type: integer} beside numbers with '") + k +
                                             "' is not supported");
  Json left = Json::array();
  for (const auto& t : types) {
    bool gone = removed.count(t) || (t == "integer" && removed.count("number"));
    if (!gone) left.push_back(t);
  }
  Json out = schema;
  if (left.empty()) return false;
  out["type"] = left.size() == 1 ? left[0] : left;
  if (non_integer) out[kNonInteger] = true;
  return out;
}

// A bound's complement within its type: the opposite bound (minLength k -> maxLength k - 1,
// minimum v -> exclusiveMaximum v, ...).
struct Flip {
  const char* key;
  const char* type;
  const char* opposite;
  int shift;  // added to a count (0 for numeric bounds, which flip exclusiveness instead)
};
constexpr Flip kFlips[] = {
    {"minLength", "string", "maxLength", -1},     {"maxLength", "string", "minLength", 1},
    {"minItems", "array", "maxItems", -1},        {"maxItems", "array", "minItems", 1},
    {"minProperties", "object", "maxProperties", -1}, {"maxProperties", "object", "minProperties", 1},
    {"minimum", "number", "exclusiveMaximum", 0}, {"exclusiveMinimum", "number", "maximum", 0},
    {"maximum", "number", "exclusiveMinimum", 0}, {"exclusiveMaximum", "number", "minimum", 0},
};

}  // namespace

// not {bound}: values of the bound's type on the other side of it; not {pattern}: strings the
// pattern does not match (an automaton complement). Other types satisfy both, so fail `not`.
// Nullopt (and nothing registered) when `key` is none of these.
std::optional<Expr> SchemaConverter::visit_not_bound(const Json& rest, const std::string& key, const Json& value,
                                      const std::string& path) {
  const std::string at = path + "/not/" + key;
  Json inside = Json::object();
  std::string type;
  if (key == "pattern") {
    if (!value.is_string()) throw SchemaError(at, "pattern must be a string");
    pattern_dfa(value, at);  // refused here, at its path, when it does not compile
    type = "string";
    inside["type"] = "string";
  } else {
    const Flip* flip = nullptr;
    for (const Flip& f : kFlips)
      if (key == f.key) flip = &f;
    if (!flip) return std::optional<Expr>();
    type = flip->type;
    inside["type"] = type;
    if (flip->shift == 0) {
      if (!value.is_number()) throw SchemaError(at, key + " must be a number");
      inside[flip->opposite] = value;
    } else {
      std::optional<uint64_t> k = count_keyword(Json{{key, value}}, key.c_str(), path + "/not", UINT64_MAX);
      if (flip->shift < 0 && *k == 0) inside = false;  // nothing of the type is shorter than 0
      else if (flip->shift < 0) inside[flip->opposite] = *k - 1;
      else if (*k == UINT64_MAX) inside = false;
      else inside[flip->opposite] = *k + 1;
    }
  }
  // Values of other types satisfy the bound, so they fail its `not`.
  if (inside.is_boolean()) return Expr();
  Json same = merge(rest, inside, path + "/not", 0);
  if (same.is_boolean()) return same.get<bool>() ? visit(inside, path) : Expr();
  if (key == "pattern") {
    Json excluded = same.contains(kExcludedPatterns) ? same[kExcludedPatterns] : Json::array();
    excluded.push_back(value);
    same[kExcludedPatterns] = excluded;
  }
  return visit(same, path);
}

Expr SchemaConverter::visit_not(const Json& schema, const std::string& path) {
  const Json& n = schema["not"];
  const std::string at = path + "/not";
  Json rest = schema;
  rest.erase("not");
  if (n.is_boolean()) return n.get<bool>() ? std::nullopt : visit(rest, path);
  if (!n.is_object()) throw SchemaError(at, "not must be a schema");
  std::vector<std::string> keys = assertion_keys(n);
  if (keys.empty()) return std::nullopt;  // not {} rejects everything
  if (rest.contains("allOf")) rest = merge_all_of(rest, path);
  if (rest.is_boolean()) {  // the merge decided it
    if (!rest.get<bool>()) return std::nullopt;
    rest = Json::object();
  }
  if (keys.size() > 1) {
    // Keywords that assert independently of each other: not (A and B) = not A or not B.
    for (const auto& k : keys)
      for (const char* linked : {"additionalProperties", "additionalItems", "items", "then", "else",
                                 "minContains", "maxContains", "unevaluatedProperties",
                                 "unevaluatedItems", "$ref", "allOf", "anyOf", "oneOf", "not"})
        if (k == linked)
          throw SchemaError(at + "/" + pointer_escape(k),
                            "not: '" + k + "' beside other keywords is not supported");
    Json branches = Json::array();
    for (const auto& k : keys) {
      Json branch = rest;
      Json one = Json{{k, n[k]}};
      if (!branch.contains("not")) branch["not"] = one;  // else it waits under allOf
      else if (branch.contains("allOf") && branch["allOf"].is_array()) branch["allOf"].push_back(Json{{"not", one}});
      else branch["allOf"] = Json::array({Json{{"not", one}}});
      branches.push_back(branch);
    }
    return visit(Json{{"anyOf", branches}}, path);
  }
  const std::string& key = keys[0];
  if (key == "properties") {
    // Objects with some listed name present whose value fails that name's schema.
    const Json& props = n["properties"];
    if (!props.is_object()) throw SchemaError(at + "/properties", "properties must be an object");
    Json objects = without_types(rest, {"null", "boolean", "array", "number", "string"}, path);
    if (objects.is_boolean()) return std::nullopt;
    Json branches = Json::array();
    for (const auto& [name, value] : props.items()) {
      if (value.is_boolean() && value.get<bool>()) continue;
      Json need = Json{{"required", Json::array({name})},
                       {"properties", Json{{name, Json{{"not", value}}}}}};
      Json branch = objects;
      if (!branch.contains("allOf")) branch["allOf"] = Json::array();
      branch["allOf"].push_back(need);
      branches.push_back(branch);
    }
    if (branches.empty()) return std::nullopt;
    return branches.size() == 1 ? visit(branches[0], path) : visit(Json{{"anyOf", branches}}, path);
  }
  if (key == "type") {
    std::set<std::string> removed = declared_types(n, at);
    return visit(without_types(rest, removed, path), path);
  }
  if (key == "required") {
    const Json& names = n["required"];
    if (!names.is_array()) throw SchemaError(at + "/required", "required must be an array of strings");
    // `required` holds for every non-object, so its complement is objects only, with at least
    // one listed name absent: one branch per name, that name forbidden.
    if (names.empty()) return std::nullopt;
    Json objects = without_types(rest, {"null", "boolean", "array", "number", "string"}, path);
    if (objects.is_boolean()) return std::nullopt;
    Json branches = Json::array();
    for (const auto& name : names) {
      if (!name.is_string()) throw SchemaError(at + "/required", "required must be an array of strings");
      Json branch = objects;
      if (!branch.contains("properties")) branch["properties"] = Json::object();
      if (!branch["properties"].is_object()) throw SchemaError(path + "/properties", "properties must be an object");
      branch["properties"][name.get<std::string>()] = false;
      branches.push_back(branch);
    }
    return branches.size() == 1 ? visit(branches[0], path) : visit(Json{{"anyOf", branches}}, path);
  }
  if (key == "enum" || key == "const") {
    Json excluded = key == "const" ? Json::array({n["const"]}) : n["enum"];
    if (!excluded.is_array()) throw SchemaError(at + "/enum", "enum must be an array");
    auto is_excluded = [&](const Json& v) {
      for (const auto& e : excluded)
        if (e == v) return true;
      return false;
    };
    if (rest.contains("enum") || rest.contains("const")) {
      Json values = rest.contains("enum") ? rest["enum"] : Json::array({rest["const"]});
      if (rest.contains("enum") && rest.contains("const")) {
        bool listed = values.is_array() && std::find(values.begin(), values.end(), rest["const"]) != values.end();
        values = listed ? Json::array({rest["const"]}) : Json::array();
      }
      Json kept = Json::array();
      if (values.is_array())
        for (const auto& v : values)
          if (!is_excluded(v)) kept.push_back(v);
      rest.erase("const");
      rest["enum"] = kept;
      return visit(rest, path);
    }
    std::set<std::string> types = declared_types(rest, path);
    std::set<std::string> removed;
    std::vector<std::string> strings;
    std::vector<Json> integers;
    bool true_left = true, false_left = true;
    for (const auto& v : excluded) {
      std::string t = type_of_value(v);
      bool applies = types.count(t) || (t == "integer" && types.count("number"));
      if (!applies) continue;
      if (t == "null") removed.insert("null");
      else if (t == "boolean") (v.get<bool>() ? true_left : false_left) = false;
      else if (t == "string") strings.push_back(v.get<std::string>());
      else if (t == "integer" && (v.is_number_integer() || v.is_number_unsigned())) integers.push_back(v);
      else throw SchemaError(at + "/" + key, "not: excluding a " + t + " value is not supported");
    }
    if (!true_left || !false_left) removed.insert("boolean");
    // Excluded integers: the numbers between them (exclusive bounds), and where numbers are
    // allowed, the non-integers (written with a non-zero fraction digit, so never one of them).
    std::vector<Json> numeric;
    if (!integers.empty()) {
      std::sort(integers.begin(), integers.end(), [](const Json& a, const Json& b) { return a.get<double>() < b.get<double>(); });
      Json numbers = without_types(rest, {"null", "boolean", "object", "array", "string"}, path);
      for (size_t i = 0; i <= integers.size() && !numbers.is_boolean(); ++i) {
        Json gap = Json::object();
        if (i > 0) gap["exclusiveMinimum"] = integers[i - 1];
        if (i < integers.size()) gap["exclusiveMaximum"] = integers[i];
        numeric.push_back(Json{{"type", "integer"}, {"allOf", Json::array({numbers, gap})}});
      }
      bool plain = !numbers.is_boolean();
      for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "enum", "const"})
        plain = plain && !numbers.contains(k);
      // Beside bounds, only the integers between them are written (a subset).
      if (plain && declared_types(numbers, path).count("number"))
        numeric.push_back(without_types(numbers, {"integer"}, path));
      removed.insert("number");
    }
    Json base = removed.empty() ? rest : without_types(rest, removed, path);
    if (!strings.empty() && !base.is_boolean()) {
      // The exclusion is read by the string builder: keep it away from merges and branches.
      for (const char* k : {"allOf", "anyOf", "oneOf", "$ref"})
        if (base.contains(k))
          throw SchemaError(at, std::string("not: excluding strings beside '") + k + "' is not supported");
      base[kExcludedStrings] = strings;
    }
    Json branches = Json::array({base});
    for (const auto& n : numeric) branches.push_back(n);
    if (true_left != false_left && types.count("boolean")) {
      // The boolean left, with every other keyword of the schema still applying to it.
      Json one = without_types(rest, {"null", "object", "array", "number", "string"}, path);
      if (!one.is_boolean()) {
        one["const"] = true_left;
        branches.push_back(one);
      }
    }
    return branches.size() == 1 ? visit(base, path) : visit(Json{{"anyOf", branches}}, path);
  }
  if (std::optional<Expr> flipped = visit_not_bound(rest, key, n[key], path)) return *flipped;
  throw SchemaError(at + "/" + pointer_escape(key),
                    "not: '" + key + "' is not supported (only type, enum, const, required, properties, "
                    "bounds, lengths, counts or pattern)");
}

}  // namespace pagoda::structured::schema_detail
