// Internal to the JSON Schema converter: the SchemaConverter class shared by json_schema.cpp
// (dispatch, $ref, allOf/anyOf/oneOf, enum/const, rule table), json_schema_objects.cpp
// (objects, arrays) and json_schema_scalars.cpp (strings, formats, numbers).
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "engine/structured/json_schema.h"

namespace pagoda::structured::schema_detail {

using Json = nlohmann::ordered_json;
// A GBNF expression; nullopt where the schema accepts no value at all (e.g. `false`).
using Expr = std::optional<std::string>;

// Joins GBNF pieces with spaces, skipping empty ones.
std::string seq(std::initializer_list<std::string> pieces);
// "( a | b )" of the non-empty alternatives (a lone one is returned as is); nullopt if none.
Expr alternatives(const std::vector<std::string>& alts);
// GBNF repetition suffix for min..max (max nullopt = unbounded): "*", "+", "?", "{m}", "{m,}",
// "{m,n}"; "" for exactly one.
std::string repeat_suffix(uint64_t min, std::optional<uint64_t> max);
// JSON pointer token escaping (~ -> ~0, / -> ~1).
std::string pointer_escape(const std::string& name);

class SchemaConverter {
 public:
  SchemaConverter(const Json& root, const SchemaOptions& options);
  std::string convert();                 // the whole grammar, `root` first
  std::string object_only_grammar();     // json_object_gbnf

  // ---- json_schema.cpp ----
  Expr visit(const Json& schema, const std::string& path);
  std::string add_rule(const std::string& hint, const std::string& body);
  std::string ws();                      // "" (compact) or "ws"
  std::string sep();                     // between members / items
  std::string value_rule();              // any JSON value
  std::string primitive(const std::string& name);  // json-string, json-number, json-char ...
  void charge_repeat(uint64_t count, const std::string& item, const std::string& path);
  const SchemaOptions& options() const { return options_; }

  // ---- json_schema_objects.cpp ----
  Expr build_object(const Json& schema, const std::string& path);
  Expr build_array(const Json& schema, const std::string& path);

  // ---- json_schema_scalars.cpp ----
  Expr build_string(const Json& schema, const std::string& path);
  Expr build_number(const Json& schema, const std::string& path, bool integer_only);

 private:
  Expr visit_ref(const Json& schema, const std::string& path);
  Expr visit_enum(const Json& schema, const std::string& path);
  Expr visit_branches(const Json& schema, const std::string& key, const std::string& path);
  std::string literal(const Json& value);
  const Json& resolve_ref(const std::string& ref, const std::string& path);
  Json inline_ref(const Json& schema, const std::string& path, size_t depth);
  Json merge(const Json& a, const Json& b, const std::string& path, size_t depth);
  Json merge_properties(const Json& a, const Json& b, const std::string& path, size_t depth);
  bool provably_disjoint(const Json& a, const Json& b, const std::string& path);
  std::set<std::string> value_types(const Json& schema, const std::string& path, size_t depth);
  void check_keywords(const Json& schema, const std::string& path);
  std::string fresh_name(const std::string& hint);

  const Json& root_;
  SchemaOptions options_;
  std::vector<std::pair<std::string, std::string>> rules_;  // name, body in output order
  std::map<std::string, std::string> name_by_body_;
  std::set<std::string> used_names_;
  std::map<std::string, std::string> ref_rules_;  // $ref string -> rule name
  std::set<std::string> refs_in_progress_;        // being compiled: a cycle reaches them
  std::set<std::string> primitives_;
  size_t grammar_bytes_ = 0;
  uint64_t expanded_cost_ = 0;
  size_t depth_ = 0;
  uint64_t work_ = 0;
  void count_work(const std::string& path);
  bool nested_ids_ = false;  // a subschema has its own $id: refs may be relative to it
};

}  // namespace pagoda::structured::schema_detail
