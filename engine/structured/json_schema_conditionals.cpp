// Conditional keywords rewritten into equal schemas the converter already builds:
// `dependentRequired`, `dependentSchemas` and draft-7 `dependencies` (one trigger name at a
// time: the name absent, or present with its dependency applied) and `if` / `then` / `else`
// (`if` and `then`, or `not: if` and `else`). Where `not: if` cannot be written (visit_not
// refuses it) the whole schema is refused at that path.
#include "engine/structured/json_schema_internal.h"

namespace pagoda::structured::schema_detail {

namespace {

// Most trigger names one schema may split on: each doubles the branches.
constexpr size_t kMaxTriggers = 6;

bool lists_required(const Json& schema, const std::string& name) {
  if (!schema.contains("required") || !schema["required"].is_array()) return false;
  for (const auto& n : schema["required"])
    if (n.is_string() && n.get<std::string>() == name) return true;
  return false;
}

bool forbids(const Json& schema, const std::string& name) {
  if (!schema.contains("properties") || !schema["properties"].is_object()) return false;
  const Json& props = schema["properties"];
  return props.contains(name) && props[name].is_boolean() && !props[name].get<bool>();
}

// `schema` with `extra` added to its allOf.
Json with_all_of(Json schema, const Json& extra) {
  if (!schema.contains("allOf")) schema["allOf"] = Json::array();
  schema["allOf"].push_back(extra);
  return schema;
}

}  // namespace

Expr SchemaConverter::visit_dependencies(const Json& schema, const std::string& path) {
  // Gather (trigger, dependency schema, keyword) from the three spellings.
  struct Dep {
    std::string name, key;
    Json schema;
  };
  std::vector<Dep> deps;
  for (const char* key : {"dependentRequired", "dependentSchemas", "dependencies"}) {
    if (!schema.contains(key)) continue;
    const Json& map = schema[key];
    if (!map.is_object()) throw SchemaError(path + "/" + key, std::string(key) + " must be an object");
    for (const auto& [name, value] : map.items()) {
      const std::string at = path + "/" + key + "/" + pointer_escape(name);
      bool names = value.is_array();
      if (std::string(key) == "dependentRequired" && !names)
        throw SchemaError(at, "dependentRequired values must be arrays of names");
      if (std::string(key) == "dependentSchemas" && names)
        throw SchemaError(at, "dependentSchemas values must be schemas");
      if (names) {
        for (const auto& n : value)
          if (!n.is_string()) throw SchemaError(at, "dependent names must be strings");
        deps.push_back({name, key, value.empty() ? Json(true) : Json{{"required", value}}});
      } else {
        deps.push_back({name, key, value});
      }
    }
  }
  Json rest = schema;
  for (const char* key : {"dependentRequired", "dependentSchemas", "dependencies"}) rest.erase(key);
  // Triggers already required, or forbidden, need no split.
  std::vector<const Dep*> split;
  for (const auto& d : deps) {
    if (forbids(rest, d.name)) continue;
    if (lists_required(rest, d.name)) rest = with_all_of(rest, d.schema);
    else split.push_back(&d);
  }
  if (split.size() > kMaxTriggers)
    throw SchemaError(path + "/" + split[kMaxTriggers]->key,
                      "more than " + std::to_string(kMaxTriggers) + " optional dependency trigger names");
  if (split.empty()) return visit(rest, path);
  // First trigger: absent (forbidden) or present with its dependency; the other triggers are
  // split inside each branch by the recursive visit.
  const Dep& d = *split[0];
  Json later = schema;
  for (const char* key : {"dependentRequired", "dependentSchemas", "dependencies"}) {
    if (!later.contains(key)) continue;
    later[key].erase(d.name);
    if (later[key].empty()) later.erase(key);
  }
  Json absent = later;
  if (!absent.contains("properties")) absent["properties"] = Json::object();
  if (!absent["properties"].is_object()) throw SchemaError(path + "/properties", "properties must be an object");
  absent["properties"][d.name] = false;
  // The dependency first: its required names are written before the trigger.
  Json present = with_all_of(with_all_of(later, d.schema), Json{{"required", Json::array({d.name})}});
  return visit(Json{{"anyOf", Json::array({absent, present})}}, path);
}

Expr SchemaConverter::visit_conditional(const Json& schema, const std::string& path) {
  Json rest = schema;
  for (const char* key : {"if", "then", "else"}) rest.erase(key);
  if (!schema.contains("if")) return visit(rest, path);  // then/else without if: no effect
  const Json& cond = schema["if"];
  Json then_s = schema.contains("then") ? schema["then"] : Json(true);
  Json else_s = schema.contains("else") ? schema["else"] : Json(true);
  if (cond.is_boolean()) return visit(with_all_of(rest, cond.get<bool>() ? then_s : else_s), path);
  Json yes = with_all_of(with_all_of(rest, cond), then_s);
  // A `not` already in rest stays; this one waits under allOf (merges stack them).
  Json no = with_all_of(with_all_of(rest, else_s), Json{{"not", cond}});
  return visit(Json{{"anyOf", Json::array({yes, no})}}, path);
}

}  // namespace pagoda::structured::schema_detail
