// JSON Schema combinators as GBNF: local $ref (JSON pointers, recursion through named rules,
// inlining when keywords sit beside it), allOf merged into one schema, anyOf/oneOf as
// alternatives (oneOf only when its branches provably cannot both match).
#include <algorithm>
#include <cctype>

#include "engine/structured/json_schema_internal.h"

namespace pagoda::structured::schema_detail {

// ---- $ref ------------------------------------------------------------------------------

const Json& SchemaConverter::resolve_ref(const std::string& ref, const std::string& path) {
  if (ref.empty() || ref[0] != '#')
    throw SchemaError(path, std::string("only local $ref (\"#...\") is supported, not ") + ref);
  if (nested_ids_)
    throw SchemaError(path, "$ref in a schema whose subschemas declare $id is not supported");
  // Percent-decoding first (URI fragment), then JSON pointer tokens.
  std::string pointer;
  for (size_t i = 1; i < ref.size(); ++i) {
    if (ref[i] == '%' && i + 2 < ref.size() && std::isxdigit(static_cast<unsigned char>(ref[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(ref[i + 2]))) {
      int value = std::stoi(ref.substr(i + 1, 2), nullptr, 16);
      pointer += char(value);
      i += 2;
    } else {
      pointer += ref[i];
    }
  }
  const Json* node = &root_;
  if (pointer.empty()) return *node;
  if (pointer[0] != '/') throw SchemaError(path, std::string("$ref anchors (\"#name\") are not supported: ") + ref);
  size_t pos = 1;
  for (int guard = 0; guard < 10000; ++guard) {
    size_t next = pointer.find('/', pos);
    std::string token = pointer.substr(pos, next == std::string::npos ? std::string::npos : next - pos);
    std::string name;
    for (size_t i = 0; i < token.size(); ++i) {
      if (token[i] == '~' && i + 1 < token.size() && token[i + 1] == '1') name += '/', ++i;
      else if (token[i] == '~' && i + 1 < token.size() && token[i + 1] == '0') name += '~', ++i;
      else name += token[i];
    }
    if (node->is_object() && node->contains(name)) {
      node = &(*node)[name];
    } else if (node->is_array() && !name.empty() &&
               std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
               name.size() < 9 && std::stoul(name) < node->size()) {
      node = &(*node)[std::stoul(name)];
    } else {
      throw SchemaError(path, std::string("$ref ") + ref + " does not resolve inside this schema");
    }
    if (next == std::string::npos) return *node;
    pos = next + 1;
  }
  throw SchemaError(path, "$ref pointer too long");
}

Expr SchemaConverter::visit_ref(const Json& schema, const std::string& path) {
  const Json& ref_value = schema["$ref"];
  if (!ref_value.is_string()) throw SchemaError(path + "/$ref", "$ref must be a string");
  const std::string ref = ref_value.get<std::string>();
  if (!options_.ref_ignores_siblings && has_assertions(schema, {"$ref"})) {
    // Draft 2019-09+: the keywords beside $ref apply too.
    Json rest = schema;
    rest.erase("$ref");
    Json merged = merge(resolve_ref(ref, path + "/$ref"), rest, path, 0);
    return visit(merged, path);
  }
  if (refs_in_progress_.count(ref))
    throw SchemaError(path + "/$ref", std::string("$ref ") + ref + " refers to itself without an object or array in between");
  auto found = ref_rules_.find(ref);
  if (found != ref_rules_.end()) return found->second;
  const Json& target = resolve_ref(ref, path + "/$ref");
  std::string name = fresh_name(std::string("ref-") + ref.substr(1));
  ref_rules_[ref] = name;
  refs_in_progress_.insert(ref);
  Expr body;
  try {
    body = visit(target, ref.substr(1));
  } catch (...) {
    refs_in_progress_.erase(ref);
    throw;
  }
  refs_in_progress_.erase(ref);
  if (!body) throw SchemaError(path + "/$ref", std::string("$ref ") + ref + " accepts no value");
  rules_.emplace_back(name, body->empty() ? "\"\"" : *body);
  grammar_bytes_ += name.size() + body->size() + 6;
  return name;
}

Json SchemaConverter::inline_ref(const Json& schema, const std::string& path, size_t depth) {
  if (!schema.is_object() || !schema.contains("$ref")) return schema;
  if (depth > options_.max_depth)
    throw SchemaError(path, "$ref chain too deep to merge (recursive schema under allOf?)");
  const Json& ref = schema["$ref"];
  if (!ref.is_string()) throw SchemaError(path + "/$ref", "$ref must be a string");
  const Json& target = resolve_ref(ref.get<std::string>(), path + "/$ref");
  if (options_.ref_ignores_siblings || !has_assertions(schema, {"$ref"}))
    return inline_ref(target, path, depth + 1);
  Json rest = schema;
  rest.erase("$ref");
  return merge(inline_ref(target, path, depth + 1), rest, path, depth + 1);
}

// ---- allOf -----------------------------------------------------------------------------

Json SchemaConverter::merge_properties(const Json& a, const Json& b, const std::string& path,
                                       size_t depth) {
  // A name listed in one schema's properties is checked by the other's properties entry or,
  // when the other does not list it, by the other's additionalProperties.
  auto schema_for = [](const Json& s, const std::string& name) -> Json {
    if (s.contains("properties") && s["properties"].is_object() && s["properties"].contains(name))
      return s["properties"][name];
    if (s.contains("additionalProperties")) return s["additionalProperties"];
    return Json(true);
  };
  Json props = Json::object();
  for (const Json* side : {&a, &b}) {
    if (!side->contains("properties")) continue;
    if (!(*side)["properties"].is_object())
      throw SchemaError(path + "/properties", "properties must be an object");
    for (const auto& [name, unused] : (*side)["properties"].items()) {
      if (props.contains(name)) continue;
      Json sa = schema_for(a, name), sb = schema_for(b, name);
      if (sa == Json(true)) props[name] = sb;
      else if (sb == Json(true)) props[name] = sa;
      else props[name] = Json{{"allOf", Json::array({sa, sb})}};
    }
  }
  return props;
}

Json SchemaConverter::merge(const Json& a_in, const Json& b_in, const std::string& path,
                            size_t depth) {
  if (depth > options_.max_depth) throw SchemaError(path, "allOf nested too deeply");
  count_work(path);
  Json a = inline_ref(a_in, path, depth);
  Json b = inline_ref(b_in, path, depth);
  if (a.is_boolean()) return a.get<bool>() ? b : a;
  if (b.is_boolean()) return b.get<bool>() ? a : b;
  if (!a.is_object() || !b.is_object()) throw SchemaError(path, "a schema must be an object or a boolean");
  check_keywords(b, path);
  // then / else pair with the `if` of their own schema only: without one they assert nothing,
  // and must not meet another branch's `if` in the merge.
  if (!b.contains("if") && (b.contains("then") || b.contains("else"))) b.erase("then"), b.erase("else");
  if (b.contains("if") && (a.contains("if") || a.contains("then") || a.contains("else")))
    throw SchemaError(path + "/if", "allOf of two if/then/else is not supported");
  Json out = a;
  bool objects_touched = a.contains("properties") || b.contains("properties") ||
                         a.contains("additionalProperties") || b.contains("additionalProperties");
  for (const auto& [key, vb] : b.items()) {
    if (is_internal_keyword(key)) {
      // The `not` rewrite's exclusions: both sides' hold (lists joined).
      if (!out.contains(key)) out[key] = vb;
      else if (out[key].is_array() && vb.is_array())
        for (const auto& v : vb) out[key].push_back(v);
      continue;
    }
    if (is_annotation(key)) continue;
    const std::string kpath = path + "/" + pointer_escape(key);
    if (!out.contains(key)) { out[key] = vb; continue; }
    const Json va = out[key];
    if (va == vb) continue;
    if (key == "type") {
      std::set<std::string> ta = declared_types(a, path), tb = declared_types(b, path);
      Json both = Json::array();
      for (const auto& t : ta) {
        if (tb.count(t)) both.push_back(t);
        else if (t == "integer" && tb.count("number")) both.push_back(t);
        else if (t == "number" && tb.count("integer")) both.push_back("integer");
      }
      if (both.empty()) return Json(false);
      out[key] = both;
    } else if (key == "minimum" || key == "exclusiveMinimum" || key == "minLength" ||
               key == "minItems" || key == "minProperties") {
      if (!va.is_number() || !vb.is_number()) throw SchemaError(kpath, key + " must be a number");
      out[key] = va.get<double>() >= vb.get<double>() ? va : vb;
    } else if (key == "maximum" || key == "exclusiveMaximum" || key == "maxLength" ||
               key == "maxItems" || key == "maxProperties") {
      if (!va.is_number() || !vb.is_number()) throw SchemaError(kpath, key + " must be a number");
      out[key] = va.get<double>() <= vb.get<double>() ? va : vb;
    } else if (key == "required") {
      if (!va.is_array() || !vb.is_array()) throw SchemaError(kpath, "required must be an array");
      Json names = va;
      for (const auto& n : vb)
        if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
      out[key] = names;
    } else if (key == "enum") {
      if (!va.is_array() || !vb.is_array()) throw SchemaError(kpath, "enum must be an array");
      Json common = Json::array();
      for (const auto& v : va)
        if (std::find(vb.begin(), vb.end(), v) != vb.end()) common.push_back(v);
      out[key] = common;
    } else if (key == "const") {
      return Json(false);  // two different constants
    } else if (key == "items" || key == "prefixItems" || key == "additionalItems") {
      continue;  // merged together below
    } else if (key == "properties" || key == "additionalProperties") {
      continue;  // merged together below
    } else if (key == "not") {
      // Both exclusions hold: the second waits under allOf until the first is rewritten away.
      Json all = out.contains("allOf") && out["allOf"].is_array() ? out["allOf"] : Json::array();
      all.push_back(Json{{"not", vb}});
      out["allOf"] = all;
    } else if (key == "allOf") {
      Json all = va;
      for (const auto& s : vb) all.push_back(s);
      out[key] = all;
    } else if (key == "anyOf") {
      if (!va.is_array() || !vb.is_array()) throw SchemaError(kpath, "anyOf must be an array");
      if (va.size() * vb.size() > 64)
        throw SchemaError(kpath, "allOf of two anyOf lists with more than 64 combinations");
      Json product = Json::array();
      for (const auto& x : va)
        for (const auto& y : vb) product.push_back(Json{{"allOf", Json::array({x, y})}});
      out[key] = product;
    } else {
      throw SchemaError(kpath, std::string("allOf with two different '") + key + "' values is not supported");
    }
  }
  bool arrays_touched = false;
  for (const char* k : {"items", "prefixItems", "additionalItems"})
    arrays_touched |= a.contains(k) || b.contains(k);
  if (arrays_touched) {
    // Item i is checked by each side's prefix entry for i or, past its prefix, by its rest
    // schema: the merged prefix is as long as the longer one, every position both sides'.
    auto split = [&](const Json& s) {
      std::vector<Json> prefix;
      Json rest = true;
      if (s.contains("prefixItems")) {
        if (!s["prefixItems"].is_array()) throw SchemaError(path + "/prefixItems", "prefixItems must be an array");
        for (const auto& item : s["prefixItems"]) prefix.push_back(item);
        if (s.contains("items")) rest = s["items"];
      } else if (s.contains("items") && s["items"].is_array()) {
        for (const auto& item : s["items"]) prefix.push_back(item);
        if (s.contains("additionalItems")) rest = s["additionalItems"];
      } else if (s.contains("items")) {
        rest = s["items"];
      }
      return std::make_pair(prefix, rest);
    };
    auto both = [](const Json& x, const Json& y) -> Json {
      if (x == Json(true)) return y;
      if (y == Json(true) || x == y) return x;
      return Json{{"allOf", Json::array({x, y})}};
    };
    auto [prefix_a, rest_a] = split(a);
    auto [prefix_b, rest_b] = split(b);
    Json prefix = Json::array();
    for (size_t i = 0; i < std::max(prefix_a.size(), prefix_b.size()); ++i)
      prefix.push_back(both(i < prefix_a.size() ? prefix_a[i] : rest_a, i < prefix_b.size() ? prefix_b[i] : rest_b));
    Json rest = both(rest_a, rest_b);
    for (const char* k : {"items", "prefixItems", "additionalItems"}) out.erase(k);
    if (!prefix.empty()) out["prefixItems"] = prefix;
    if (rest != Json(true)) out["items"] = rest;
  }
  if (objects_touched && (a.contains("patternProperties") || b.contains("patternProperties")))
    // Which keys are "additional" differs between the sides: not merged.
    throw SchemaError(path + "/patternProperties",
                      "allOf of patternProperties with properties/additionalProperties on another branch is not supported");
  if (objects_touched) {
    Json props = merge_properties(a, b, path, depth);
    if (!props.empty()) out["properties"] = props;
    Json apa = a.contains("additionalProperties") ? a["additionalProperties"] : Json(true);
    Json apb = b.contains("additionalProperties") ? b["additionalProperties"] : Json(true);
    Json ap;
    if (apa == Json(true)) ap = apb;
    else if (apb == Json(true)) ap = apa;
    else if (apa == Json(false) || apb == Json(false)) ap = false;
    else ap = Json{{"allOf", Json::array({apa, apb})}};
    if (ap != Json(true)) out["additionalProperties"] = ap;
    else out.erase("additionalProperties");
  }
  return out;
}

// ---- anyOf / oneOf ---------------------------------------------------------------------

std::set<std::string> SchemaConverter::value_types(const Json& schema_in, const std::string& path,
                                                   size_t depth) {
  std::set<std::string> all;
  for (const char* t : kAllTypes) all.insert(t);
  all.insert("integer");
  if (depth > 8) return all;
  Json schema = inline_ref(schema_in, path, 0);
  if (schema.is_boolean()) return schema.get<bool>() ? all : std::set<std::string>{};
  if (!schema.is_object()) return all;
  std::set<std::string> types = declared_types(schema, path);
  if (types.count("number")) types.insert("integer");
  auto restrict_to = [&](const std::set<std::string>& allowed) {
    std::set<std::string> out;
    for (const auto& t : types)
      if (allowed.count(t) || (t == "integer" && allowed.count("number"))) out.insert(t);
    types = out;
  };
  for (const char* key : {"enum", "const"}) {
    if (!schema.contains(key)) continue;
    std::set<std::string> of_values;
    Json values = std::string(key) == "enum" ? schema[key] : Json::array({schema[key]});
    if (!values.is_array()) continue;
    for (const auto& v : values) of_values.insert(type_of_value(v));
    restrict_to(of_values);
  }
  for (const char* key : {"anyOf", "oneOf"}) {
    if (!schema.contains(key) || !schema[key].is_array()) continue;
    std::set<std::string> of_branches;
    for (const auto& branch : schema[key])
      for (const auto& t : value_types(branch, path, depth + 1)) of_branches.insert(t);
    restrict_to(of_branches);
  }
  if (schema.contains("allOf") && schema["allOf"].is_array())
    for (const auto& branch : schema["allOf"]) restrict_to(value_types(branch, path, depth + 1));
  return types;
}

bool SchemaConverter::provably_disjoint(const Json& a_in, const Json& b_in, const std::string& path) {
  Json a = inline_ref(a_in, path, 0), b = inline_ref(b_in, path, 0);
  if (!types_overlap(value_types(a, path, 0), value_types(b, path, 0))) return true;
  if (!a.is_object() || !b.is_object()) return false;
  auto values_of = [](const Json& s) -> std::optional<Json> {
    if (!s.is_object()) return std::nullopt;
    if (s.contains("const")) return Json::array({s["const"]});
    if (s.contains("enum") && s["enum"].is_array()) return s["enum"];
    return std::nullopt;
  };
  auto disjoint_values = [](const Json& x, const Json& y) {
    for (const auto& v : x)
      if (std::find(y.begin(), y.end(), v) != y.end()) return false;
    return true;
  };
  if (auto va = values_of(a), vb = values_of(b); va && vb) return disjoint_values(*va, *vb);
  // Objects told apart by a required property: different constant values, or required in one
  // and forbidden in the other.
  std::set<std::string> common_types;
  auto ta = value_types(a, path, 0), tb = value_types(b, path, 0);
  for (const auto& t : ta)
    if (tb.count(t) || (t == "integer" && tb.count("number")) || (t == "number" && tb.count("integer")))
      common_types.insert(t);
  if (common_types != std::set<std::string>{"object"}) return false;
  auto required = [](const Json& s) {
    std::set<std::string> out;
    if (s.contains("required") && s["required"].is_array())
      for (const auto& n : s["required"]) if (n.is_string()) out.insert(n.get<std::string>());
    return out;
  };
  auto property = [&](const Json& s, const std::string& name) -> std::optional<Json> {
    if (s.contains("properties") && s["properties"].is_object() && s["properties"].contains(name))
      return inline_ref(s["properties"][name], path, 0);
    if (s.contains("additionalProperties")) return inline_ref(s["additionalProperties"], path, 0);
    return std::nullopt;
  };
  auto ra = required(a), rb = required(b);
  for (const auto& name : ra) {
    auto pb = property(b, name);
    if (pb && *pb == Json(false)) return true;
    if (!rb.count(name)) continue;
    auto pa = property(a, name);
    if (!pa || !pb) continue;
    auto va = values_of(*pa), vb = values_of(*pb);
    if (va && vb && disjoint_values(*va, *vb)) return true;
  }
  for (const auto& name : rb) {
    auto pa = property(a, name);
    if (pa && *pa == Json(false)) return true;
  }
  return false;
}

Expr SchemaConverter::visit_branches(const Json& schema, const std::string& key, const std::string& path) {
  const Json& list = schema[key];
  if (!list.is_array() || list.empty())
    throw SchemaError(path + "/" + key, key + " must be a non-empty array");
  Json base = schema;
  base.erase(key);
  bool base_matters = has_assertions(base);
  std::vector<Json> branches;
  for (size_t i = 0; i < list.size(); ++i) {
    std::string bpath = path + "/" + key + "/" + std::to_string(i);
    branches.push_back(base_matters ? merge(base, list[i], bpath, 0) : list[i]);
  }
  if (key == "oneOf") {
    // Branches that may overlap are made disjoint: each keeps only the values none of the
    // others it may overlap with accepts (branch i and not branch j, by `not`'s rewrites).
    std::vector<std::vector<size_t>> overlapping(branches.size());
    std::optional<std::pair<size_t, size_t>> first_overlap;
    for (size_t i = 0; i < branches.size(); ++i)
      for (size_t j = i + 1; j < branches.size(); ++j)
        if (!provably_disjoint(branches[i], branches[j], path + "/oneOf")) {
          overlapping[i].push_back(j);
          overlapping[j].push_back(i);
          if (!first_overlap) first_overlap = std::make_pair(i, j);
        }
    if (first_overlap) {
      Json cut = Json::array();
      for (size_t i = 0; i < branches.size(); ++i) {
        Json parts = Json::array({branches[i]});
        for (size_t j : overlapping[i]) parts.push_back(Json{{"not", list[j]}});
        cut.push_back(parts.size() == 1 ? branches[i] : Json{{"allOf", parts}});
      }
      try {
        return visit(Json{{"anyOf", cut}}, path);
      } catch (const SchemaError& e) {
        throw SchemaError(path + "/oneOf", std::string("oneOf branches ") + std::to_string(first_overlap->first) +
                                              " and " + std::to_string(first_overlap->second) +
                                              " may both match a value, and the overlap cannot be cut out (" +
                                              e.what() + "); use anyOf if overlap is fine");
      }
    }
  }
  std::vector<std::string> alts;
  for (size_t i = 0; i < branches.size(); ++i) {
    Expr e = visit(branches[i], path + "/" + key + "/" + std::to_string(i));
    if (e) alts.push_back(e->empty() ? "\"\"" : *e);
  }
  Expr out = alternatives(alts);
  if (out && out->find(' ') != std::string::npos) return add_rule(path + "-" + key, *out);
  return out;
}

}  // namespace pagoda::structured::schema_detail
