// JSON Schema -> GBNF: entry points, the rule table, keyword classes, dispatch by `type` and
// enum/const literals. $ref, allOf, anyOf/oneOf are in json_schema_combinators.cpp, objects
// and arrays in json_schema_objects.cpp, strings and numbers in json_schema_scalars.cpp.
#include "engine/structured/json_schema.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <string_view>

#include "engine/structured/structured.h"
#include "engine/structured/json_schema_internal.h"
#include "engine/structured/regex.h"

namespace pagoda::structured {
namespace schema_detail {

namespace {

const std::set<std::string>& annotation_keywords() {
  static const std::set<std::string> words = {
      "title", "description", "examples", "default", "$schema", "$id", "$comment",
      "deprecated", "readOnly", "writeOnly", "$defs", "definitions"};
  return words;
}

const std::set<std::string>& supported_keywords() {
  static const std::set<std::string> words = {
      "type", "enum", "const", "properties", "required", "additionalProperties", "items",
      "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems", "anyOf", "oneOf",
      "allOf", "$ref", "minLength", "maxLength", "pattern", "format", "minimum", "maximum",
      "exclusiveMinimum", "exclusiveMaximum", "minProperties", "maxProperties",
      "patternProperties", "propertyNames", "not", "multipleOf", "dependencies",
      "dependentRequired", "dependentSchemas", "if", "then", "else", "contains"};
  return words;
}

// Keywords of some JSON Schema draft (or OpenAPI) that constrain values but are not enforced
// here: refused. Words that are no keyword at all are annotations by the spec and ignored.
const std::set<std::string>& refused_keywords() {
  static const std::set<std::string> words = {
      "minContains", "maxContains", "unevaluatedProperties", "unevaluatedItems", "$anchor",
      "$dynamicRef", "$dynamicAnchor", "$recursiveRef", "$recursiveAnchor", "$vocabulary",
      "contentMediaType", "contentEncoding", "contentSchema", "nullable", "discriminator",
      "extends", "disallow", "divisibleBy"};
  return words;
}

}  // namespace

bool is_annotation(const std::string& key) {
  return annotation_keywords().count(key) ||
         (!refused_keywords().count(key) && !supported_keywords().count(key));
}

// True when the schema has keywords besides annotations and those listed in `except`.
bool has_assertions(const Json& schema, std::initializer_list<const char*> except) {
  if (!schema.is_object()) return !(schema.is_boolean() && schema.get<bool>());
  for (const auto& [key, value] : schema.items()) {
    if (is_annotation(key) && !is_internal_keyword(key)) continue;
    bool skipped = false;
    for (const char* e : except) skipped |= key == e;
    if (!skipped) return true;
  }
  return false;
}


bool json_type_matches(const Json& value, const std::string& type) {
  if (type == "null") return value.is_null();
  if (type == "boolean") return value.is_boolean();
  if (type == "object") return value.is_object();
  if (type == "array") return value.is_array();
  if (type == "string") return value.is_string();
  if (type == "number") return value.is_number();
  if (type == "integer") {
    if (value.is_number_integer()) return true;
    if (!value.is_number_float()) return false;
    double d = value.get<double>();
    return d == static_cast<double>(static_cast<long long>(d)) && d > -9.2e18 && d < 9.2e18;
  }
  return false;
}

std::string type_of_value(const Json& value) {
  if (value.is_null()) return "null";
  if (value.is_boolean()) return "boolean";
  if (value.is_object()) return "object";
  if (value.is_array()) return "array";
  if (value.is_string()) return "string";
  return json_type_matches(value, "integer") ? "integer" : "number";
}

// The `type` keyword as a set; integer is kept apart from number ("number" covers it).
std::set<std::string> declared_types(const Json& schema, const std::string& path) {
  std::set<std::string> out;
  if (!schema.is_object() || !schema.contains("type")) {
    for (const char* t : kAllTypes) out.insert(t);
    return out;
  }
  const Json& type = schema["type"];
  auto add = [&](const Json& name) {
    static const std::set<std::string> known = {"null", "boolean", "object", "array",
                                                "number", "string", "integer"};
    if (!name.is_string() || !known.count(name.get<std::string>()))
      throw SchemaError(path + "/type", std::string("unknown type ") + name.dump());
    out.insert(name.get<std::string>());
  };
  if (type.is_array()) {
    for (const auto& t : type) add(t);
  } else {
    add(type);
  }
  return out;
}

bool types_overlap(const std::set<std::string>& a, const std::set<std::string>& b) {
  for (const auto& t : a) {
    if (b.count(t)) return true;
    if (t == "integer" && b.count("number")) return true;
    if (t == "number" && b.count("integer")) return true;
  }
  return false;
}

// Numbers written as JSON writes integers when they are whole (1.0 -> 1), so enum/const
// literals match what a model would naturally print.
namespace {

Json normalize_numbers(const Json& value) {
  if (value.is_number_float() && json_type_matches(value, "integer"))
    return Json(static_cast<long long>(value.get<double>()));
  if (value.is_array()) {
    Json out = Json::array();
    for (const auto& v : value) out.push_back(normalize_numbers(v));
    return out;
  }
  if (value.is_object()) {
    Json out = Json::object();
    for (const auto& [k, v] : value.items()) out[k] = normalize_numbers(v);
    return out;
  }
  return value;
}

}  // namespace

std::string seq(std::initializer_list<std::string> pieces) {
  std::string out;
  for (const auto& p : pieces) {
    if (p.empty()) continue;
    if (!out.empty()) out += ' ';
    out += p;
  }
  return out;
}

Expr alternatives(const std::vector<std::string>& alts) {
  std::vector<std::string> unique;
  bool has_empty = false;
  for (const auto& a : alts) {
    if (a.empty()) { has_empty = true; continue; }
    if (std::find(unique.begin(), unique.end(), a) == unique.end()) unique.push_back(a);
  }
  if (unique.empty()) return has_empty ? Expr("") : std::nullopt;
  std::string out;
  if (unique.size() == 1 && !has_empty) return unique[0];
  for (size_t i = 0; i < unique.size(); ++i) out += (i ? " | " : "") + unique[i];
  return "(" + out + ")" + (has_empty ? "?" : "");
}

std::optional<uint64_t> count_keyword(const Json& schema, const char* key, const std::string& path, uint64_t cap) {
  if (!schema.contains(key)) return std::nullopt;
  const Json& v = schema[key];
  uint64_t n = 0;
  if (v.is_number_unsigned() || (v.is_number_integer() && v.get<long long>() >= 0)) {
    n = v.get<uint64_t>();
  } else if (v.is_number_float() && v.get<double>() >= 0 && v.get<double>() == std::floor(v.get<double>())) {
    n = v.get<double>() >= 1.8e19 ? UINT64_MAX : uint64_t(v.get<double>());
  } else {
    throw SchemaError(path + "/" + key, std::string(key) + " must be a non-negative integer");
  }
  if (std::string_view(key).substr(0, 3) == "max") n = std::min(n, cap);
  return n;
}

std::string repeat_suffix(uint64_t min, std::optional<uint64_t> max) {
  if (!max) return min == 0 ? "*" : min == 1 ? "+" : std::string("{") + std::to_string(min).append(",}");
  if (min == 0 && *max == 1) return "?";
  if (min == 1 && *max == 1) return "";
  std::string out = "{";
  out += std::to_string(min);
  if (*max != min) out.append(",").append(std::to_string(*max));
  return out + "}";
}

std::string pointer_escape(const std::string& name) {
  std::string out;
  for (char c : name) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

// ---- rule table ------------------------------------------------------------------------

SchemaConverter::SchemaConverter(const Json& root, const SchemaOptions& options)
    : root_(root), options_(options) {
  if (root.is_object() && root.contains("$schema") && root["$schema"].is_string()) {
    const std::string& uri = root["$schema"].get_ref<const std::string&>();
    for (const char* old : {"draft-04", "draft-06", "draft-07"})
      if (uri.find(old) != std::string::npos) options_.ref_ignores_siblings = true;
  }
  // Any $id below the root changes what relative references mean: refuse $ref then.
  std::vector<std::pair<const Json*, int>> stack = {{&root, 0}};
  for (size_t guard = 0; !stack.empty() && guard < 1000000; ++guard) {
    auto [node, level] = stack.back();
    stack.pop_back();
    if (!node->is_object()) continue;
    if (level > 0 && node->contains("$id")) nested_ids_ = true;
    for (const auto& [key, value] : node->items()) {
      if (key == "enum" || key == "const" || key == "examples" || key == "default") continue;
      if (key == "properties" || key == "$defs" || key == "definitions" ||
          key == "patternProperties" || key == "dependencies") {
        if (value.is_object())
          for (const auto& [k, v] : value.items()) stack.push_back({&v, level + 1});
      } else if (value.is_array()) {
        for (const auto& v : value) stack.push_back({&v, level + 1});
      } else if (value.is_object()) {
        stack.push_back({&value, level + 1});
      }
    }
  }
}

Json SchemaConverter::merge_all_of(const Json& schema, const std::string& path) {
  const Json& all = schema["allOf"];
  if (!all.is_array() || all.empty())
    throw SchemaError(path + "/allOf", "allOf must be a non-empty array");
  Json merged = schema;
  merged.erase("allOf");
  for (size_t i = 0; i < all.size(); ++i)
    merged = merge(merged, all[i], path + "/allOf/" + std::to_string(i), 0);
  return merged;
}

std::string SchemaConverter::fresh_name(const std::string& hint) {
  std::string base;
  for (char c : hint) {
    if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) base += c;
    else if (c >= 'A' && c <= 'Z') base += char(c - 'A' + 'a');
    else if (!base.empty() && base.back() != '-') base += '-';
  }
  while (!base.empty() && base.back() == '-') base.pop_back();
  if (base.size() > 40) base = base.substr(base.size() - 40);
  while (!base.empty() && base.front() == '-') base.erase(0, 1);
  if (base.empty()) base = "r";
  std::string name = base;
  for (int i = 2; used_names_.count(name) || name == "root"; ++i) name = base + "-" + std::to_string(i);
  used_names_.insert(name);
  return name;
}

std::string SchemaConverter::add_rule(const std::string& hint, const std::string& body) {
  auto found = name_by_body_.find(body);
  if (found != name_by_body_.end()) return found->second;
  std::string name = fresh_name(hint);
  grammar_bytes_ += name.size() + body.size() + 6;
  if (grammar_bytes_ > options_.max_grammar_bytes)
    throw SchemaError("", "schema needs a grammar larger than " +
                              std::to_string(options_.max_grammar_bytes) + " bytes");
  rules_.emplace_back(name, body);
  name_by_body_[body] = name;
  return name;
}

void SchemaConverter::charge_repeat(uint64_t count, const std::string& item, const std::string& path) {
  if (count > options_.max_repeat)
    throw SchemaError(path, std::string("count ") + std::to_string(count) + " is above the limit of " +
                                std::to_string(options_.max_repeat));
  expanded_cost_ += repeat_lowered_copies(count) * (1 + item.size() / 8);
  if (expanded_cost_ > options_.max_expanded_cost)
    throw SchemaError(path, "schema needs too large a grammar (repetition counts too high)");
}

void SchemaConverter::count_work(const std::string& path) {
  if (++work_ > options_.max_work)
    throw SchemaError(path, "schema too complex to convert (more than " + std::to_string(options_.max_work) +
                                " steps of $ref/allOf expansion)");
}

std::string SchemaConverter::ws() {
  if (!options_.flexible_whitespace) return "";
  return primitive("ws");
}

std::string SchemaConverter::sep() { return seq({ws(), "\",\"", ws()}); }

std::string SchemaConverter::value_rule() { return primitive("json-value"); }

std::string SchemaConverter::primitive(const std::string& name) {
  if (primitives_.count(name)) return name;
  primitives_.insert(name);
  used_names_.insert(name);
  std::string body;
  if (name == "ws") body = "( \" \" | \"\\n\" [ \\t]{0,20} )?";
  else if (name == "json-hex") body = "[0-9a-fA-F]";
  else if (name == "json-char")
    // Any string character; \u escapes of surrogates are left out (a lone one is not text,
    // and a pair would count as two characters against minLength).
    body = "[^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" ( [0-9a-cA-Ce-fE-F] " +
           primitive("json-hex") + "{3} | [dD] [0-7] " + primitive("json-hex") + "{2} ) )";
  else if (name == "json-string") body = std::string("\"\\\"\" ") + primitive("json-char") + "* \"\\\"\"";
  else if (name == "json-integer") body = "\"-\"? ( \"0\" | [1-9] [0-9]* )";
  else if (name == "json-number")
    body = "\"-\"? ( \"0\" | [1-9] [0-9]* ) ( \".\" [0-9]+ )? ( [eE] [+\\x2D]? [0-9]+ )?";
  else if (name == "json-boolean") body = "\"true\" | \"false\"";
  else if (name == "json-null") body = "\"null\"";
  else if (name == "json-member")
    body = seq({primitive("json-string"), ws(), "\":\"", ws(), primitive("json-value")});
  else if (name == "json-object")
    body = seq({"\"{\"", ws(), "(", primitive("json-member"), "(", sep(), primitive("json-member"),
                ")* )?", ws(), "\"}\""});
  else if (name == "json-array")
    body = seq({"\"[\"", ws(), "(", primitive("json-value"), "(", sep(), primitive("json-value"),
                ")* )?", ws(), "\"]\""});
  else if (name == "json-value")
    body = "json-object | json-array | json-string | json-number | json-boolean | json-null";
  if (name == "json-value")
    for (const char* dep : {"json-object", "json-array", "json-string", "json-number",
                            "json-boolean", "json-null"})
      primitive(dep);
  rules_.emplace_back(name, body);
  grammar_bytes_ += name.size() + body.size() + 6;
  return name;
}

std::string SchemaConverter::convert() {
  Expr root = visit(root_, "");
  if (!root) throw SchemaError("", "schema accepts no value");
  std::string out = std::string("root ::= ") + (root->empty() ? std::string("\"\"") : *root) + "\n";
  for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
  return out;
}

std::string SchemaConverter::object_only_grammar() {
  std::string object = primitive("json-object");
  std::string out = std::string("root ::= ") + object + "\n";
  for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
  return out;
}

// ---- dispatch --------------------------------------------------------------------------

void SchemaConverter::check_keywords(const Json& schema, const std::string& path) {
  for (const auto& [key, value] : schema.items()) {
    if (is_annotation(key) || supported_keywords().count(key)) continue;
    throw SchemaError(path + "/" + pointer_escape(key),
                      std::string("keyword '") + key + "' is not supported for structured output");
  }
}

Expr SchemaConverter::visit(const Json& schema, const std::string& path) {
  if (depth_ >= options_.max_depth)
    throw SchemaError(path, std::string("schema nested deeper than ") + std::to_string(options_.max_depth));
  struct DepthGuard {
    size_t& d;
    explicit DepthGuard(size_t& d) : d(d) { ++d; }
    ~DepthGuard() { --d; }
  } guard(depth_);
  count_work(path);

  if (schema.is_boolean()) return schema.get<bool>() ? Expr(value_rule()) : std::nullopt;
  if (!schema.is_object()) throw SchemaError(path, "a schema must be an object or a boolean");
  if (schema.contains("$ref")) return visit_ref(schema, path);
  check_keywords(schema, path);
  if (schema.contains("dependentRequired") || schema.contains("dependentSchemas") ||
      schema.contains("dependencies"))
    return visit_dependencies(schema, path);
  if (schema.contains("if") || schema.contains("then") || schema.contains("else"))
    return visit_conditional(schema, path);
  if (schema.contains("not")) return visit_not(schema, path);

  if (schema.contains("allOf")) return visit(merge_all_of(schema, path), path);
  if (schema.contains("anyOf")) return visit_branches(schema, "anyOf", path);
  if (schema.contains("oneOf")) return visit_branches(schema, "oneOf", path);
  if (schema.contains("enum") || schema.contains("const")) return visit_enum(schema, path);

  std::set<std::string> types = declared_types(schema, path);
  if (types.count("number")) types.erase("integer");
  std::vector<std::string> alts;
  // Fixed order so equal schemas give equal grammars.
  for (const char* type : {"object", "array", "string", "integer", "number", "boolean", "null"}) {
    if (!types.count(type)) continue;
    std::string t = type;
    Expr e;
    if (t == "object") e = build_object(schema, path);
    else if (t == "array") e = build_array(schema, path);
    else if (t == "string") e = build_string(schema, path);
    else if (t == "integer") e = build_number(schema, path, true);
    else if (t == "number") e = build_number(schema, path, false);
    else if (t == "boolean") e = primitive("json-boolean");
    else e = primitive("json-null");
    if (e) alts.push_back(*e);
  }
  return alternatives(alts);
}

// ---- enum / const ----------------------------------------------------------------------

std::string SchemaConverter::literal(const Json& value_in) {
  Json value = normalize_numbers(value_in);
  if (!options_.flexible_whitespace || (!value.is_object() && !value.is_array()) || value.empty())
    return gbnf_literal(value.dump());
  std::string out;
  if (value.is_object()) {
    out = std::string("\"{\" ") + ws();
    size_t i = 0;
    for (const auto& [k, v] : value.items()) {
      if (i++) out += std::string(" ") + sep();
      out += std::string(" ") + seq({gbnf_literal(Json(k).dump()), ws(), "\":\"", ws(), literal(v)});
    }
    return out + " " + ws() + " \"}\"";
  }
  out = std::string("\"[\" ") + ws();
  for (size_t i = 0; i < value.size(); ++i) {
    if (i) out += std::string(" ") + sep();
    out += std::string(" ") + literal(value[i]);
  }
  return out + " " + ws() + " \"]\"";
}

Expr SchemaConverter::visit_enum(const Json& schema, const std::string& path) {
  std::vector<std::string> checked_keys;  // decided on each value below
  for (const auto& [key, value] : schema.items()) {
    if (is_annotation(key) || key == "enum" || key == "const" || key == "type") continue;
    checked_keys.push_back(key);
  }
  Json values;
  if (schema.contains("enum")) {
    values = schema["enum"];
    if (!values.is_array()) throw SchemaError(path + "/enum", "enum must be an array");
  }
  if (schema.contains("const")) {
    Json c = schema["const"];
    if (schema.contains("enum")) {
      Json both = Json::array();
      if (std::find(values.begin(), values.end(), c) != values.end()) both.push_back(c);
      values = both;
    } else {
      values = Json::array({c});
    }
  }
  std::set<std::string> types = declared_types(schema, path);
  std::vector<std::string> alts;
  for (const auto& v : values) {
    bool typed = false;
    for (const auto& t : types) typed |= json_type_matches(v, t);
    if (typed && !value_passes_exclusions(schema, v, path)) typed = false;
    for (const auto& key : checked_keys) {
      if (!typed) break;
      std::optional<bool> passes = value_passes(schema, key, v, path);
      if (!passes)
        throw SchemaError(path + "/" + pointer_escape(key),
                          std::string("'") + key + "' together with enum/const is not supported on value " +
                              v.dump());
      typed = *passes;
    }
    if (typed) alts.push_back(literal(v));
  }
  Expr out = alternatives(alts);
  if (out && out->size() > 60) return add_rule(path + "-enum", *out);
  return out;
}

}  // namespace schema_detail

std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema, const SchemaOptions& options) {
  schema_detail::SchemaConverter converter(schema, options);
  return converter.convert();
}

std::string json_object_gbnf(const SchemaOptions& options) {
  schema_detail::SchemaConverter converter(nlohmann::ordered_json::object(), options);
  return converter.object_only_grammar();
}

std::string choice_gbnf(const std::vector<std::string>& choices) {
  if (choices.empty()) throw SchemaError("", "guided_choice needs at least one choice");
  std::vector<std::string> literals;
  for (const auto& c : choices) literals.push_back(gbnf_literal(c));
  schema_detail::Expr body = schema_detail::alternatives(literals);
  return "root ::= " + (body && !body->empty() ? *body : std::string("\"\"")) + "\n";
}

}  // namespace pagoda::structured
