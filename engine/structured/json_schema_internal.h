// Internal to the JSON Schema converter: the SchemaConverter class shared by json_schema.cpp
// (dispatch, enum/const, rule table), json_schema_combinators.cpp ($ref, allOf, anyOf/oneOf),
// json_schema_objects.cpp (objects, arrays), json_schema_scalars.cpp (strings, numbers) and
// json_schema_formats.cpp (string formats), json_schema_patterns.cpp / json_schema_lengths.cpp
// (string automata).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "engine/structured/json_schema.h"
#include "engine/structured/regex_dfa.h"

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
// A count keyword (minLength, maxItems, ...): a non-negative integer, nullopt when absent. A
// max* count above `cap` reads as `cap` (a subset: no output gets that long); a min* count
// above it is returned as is, for the size checks to refuse.
std::optional<uint64_t> count_keyword(const Json& schema, const char* key, const std::string& path, uint64_t cap);
// The automaton without lone surrogates (no text), minimal and trimmed: what can be written.
CharDfa writable_dfa(const CharDfa& dfa);
// JSON pointer token escaping (~ -> ~0, / -> ~1).
std::string pointer_escape(const std::string& name);

// Keyword classes: annotations (ignored: title, description, ..., and words that are no
// keyword of any draft) versus supported and refused keywords.
bool is_annotation(const std::string& key);
// True when the schema has keywords besides annotations and those listed in `except`.
bool has_assertions(const Json& schema, std::initializer_list<const char*> except = {});
inline constexpr const char* kAllTypes[] = {"null", "boolean", "object", "array", "number", "string"};
bool json_type_matches(const Json& value, const std::string& type);
std::string type_of_value(const Json& value);
// The `type` keyword as a set (all types when absent); throws SchemaError on unknown names.
std::set<std::string> declared_types(const Json& schema, const std::string& path);
// Whether two type sets share a value ("integer" lies inside "number").
bool types_overlap(const std::set<std::string>& a, const std::set<std::string>& b);

// What an object's keywords say about its property names: `patternProperties` (each pattern's
// automaton and value schema) and `propertyNames` (the names allowed at all).
struct KeyRules {
  struct Pattern {
    Json schema;
    CharDfa dfa;
  };
  std::vector<Pattern> patterns;
  std::optional<CharDfa> names;  // nullopt: any name

  bool any() const { return !patterns.empty() || names.has_value(); }
  bool allowed(const std::string& name) const;
  std::vector<size_t> matching(const std::string& name) const;
  // `base` together with the schemas of the patterns `name` matches.
  Json with_patterns(const std::string& name, const Json& base) const;
  // A schema requiring all of `parts` (true when empty, false when one is false).
  static Json all_of(const std::vector<Json>& parts);
};

// Internal keywords the `not` rewrite adds ("$pagoda-..."): kept through allOf merges.
inline bool is_internal_keyword(const std::string& key) { return key.rfind("$pagoda-", 0) == 0; }
// Internal keyword the `not` rewrite adds: strings (a JSON array) the string must not be.
inline constexpr const char* kExcludedStrings = "$pagoda-excluded-strings";
// Internal keyword the `not` rewrite adds: patterns (a JSON array) the string must not match.
inline constexpr const char* kExcludedPatterns = "$pagoda-excluded-patterns";
// Internal keyword the `not` rewrite adds: numbers must not be integers (written with a
// fraction that has a non-zero digit).
inline constexpr const char* kNonInteger = "$pagoda-non-integer";

class SchemaConverter {
 public:
  SchemaConverter(const Json& root, const SchemaOptions& options);
  std::string convert();                 // the whole grammar, `root` first
  std::string object_only_grammar();     // json_object_gbnf

  // ---- json_schema.cpp (and json_schema_combinators.cpp for $ref / allOf / anyOf / oneOf) ----
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
  Expr contains_array(const Json& schema, const Json& rest_schema, const Expr& rest, uint64_t lo,
                      std::optional<uint64_t> hi, bool has_prefix, const std::string& path);
  // json_schema_unique.cpp: uniqueItems over a finite set of item values (nullopt when
  // the items are not such a set).
  std::optional<Expr> unique_enum_array(const Json& items, uint64_t lo, std::optional<uint64_t> hi,
                                          const std::string& path);
  // Members whose names are none of `known`: "" when none may appear.
  // key_length: only keys of exactly this many code points (distinct lengths make distinct
  // keys, however they are spelled).
  std::string extra_members(const KeyRules& keys, const std::vector<std::string>& known,
                            const Json& extra_schema, const std::string& path,
                            std::optional<uint64_t> key_length = std::nullopt);

  // ---- json_schema_scalars.cpp ----
  Expr build_string(const Json& schema, const std::string& path);
  Expr build_number(const Json& schema, const std::string& path, bool integer_only);
  // Integer multipleOf within integer bounds [lo, hi] (nullopt: open).
  Expr multiple_of(const Json& schema, const std::string& path, std::optional<long long> lo,
                   std::optional<long long> hi);

  // ---- json_schema_patterns.cpp ----
  KeyRules key_rules(const Json& object_schema, const std::string& path);
  // The strings a `pattern` matches anywhere (JSON Schema semantics); SchemaError at `path`.
  // Narrow classes for strings that must match, Wide for strings that must not (regex.h).
  CharDfa pattern_dfa(const Json& pattern, const std::string& path, RegexClasses classes = RegexClasses::Narrow);
  // Runs an automaton construction, its size errors as SchemaError at `path`.
  CharDfa checked(const std::function<CharDfa()>& build, const std::string& path);
  // The automaton's strings as JSON string content (no quotes): a start rule, or nullopt.
  Expr dfa_rules(const CharDfa& dfa, const std::string& hint);
  // A string (quotes included) of schema["format"] (if any), matching schema["pattern"] (if
  // any) with these length bounds, none of the kExcludedStrings and none of the
  // kExcludedPatterns.
  Expr pattern_string(const Json& schema, std::optional<uint64_t> min_len, std::optional<uint64_t> max_len,
                      const std::string& path);

  // ---- json_schema_lengths.cpp ----
  // The automaton's strings with min..max code points, as JSON string content (no quotes): a
  // start rule, or nullopt when there is none. Large bounds are not unrolled (see there).
  Expr bounded_dfa_rules(const CharDfa& dfa, uint64_t min_len, std::optional<uint64_t> max_len,
                         const std::string& path);
  Expr counted_loops(const CharDfa& dfa, uint64_t min_len, std::optional<uint64_t> max_len,
                     const std::string& path);

  // ---- json_schema_formats.cpp ----
  struct FormatRule {
    std::string rule;  // rule name matching the string's characters (quotes excluded)
    uint64_t min_len;  // length range of what it matches, in characters
    std::optional<uint64_t> max_len;
  };
  // Registers the format's rules; nullopt for a format not supported.
  std::optional<FormatRule> format_rule(const std::string& name);
  // The format's strings as an automaton (size errors as SchemaError at `path`); nullopt for a
  // format not supported. within: only strings of at most that many code points (a subset of
  // those, with every part of the format kept short: regex_within_length).
  std::optional<CharDfa> format_dfa(const std::string& name, const std::string& path,
                                    std::optional<uint64_t> within = std::nullopt);
  // The format's strings within max_len code points (a subset, as format_dfa's `within`) as a
  // GBNF expression; nullopt when none is that short or all are shorter than min_len.
  std::optional<std::string> format_within(const std::string& name, uint64_t max_len, uint64_t min_len);

 private:
  Expr visit_ref(const Json& schema, const std::string& path);
 public:
  std::string literal(const Json& value);  // a JSON value as written (numbers normalized)
 private:
  Expr visit_not(const Json& schema, const std::string& path);  // json_schema_not.cpp
  std::optional<Expr> visit_not_bound(const Json& rest, const std::string& key, const Json& value,
                                      const std::string& path);
  // json_schema_conditionals.cpp: dependentRequired / dependentSchemas / dependencies, and
  // if / then / else, rewritten into anyOf branches.
  Expr visit_dependencies(const Json& schema, const std::string& path);
  Expr visit_conditional(const Json& schema, const std::string& path);
  Json merge_all_of(const Json& schema, const std::string& path);  // allOf merged away
  Expr visit_enum(const Json& schema, const std::string& path);
  // json_schema_values.cpp: does enum/const value `value` pass schema[key]? nullopt when that
  // cannot be decided here.
  std::optional<bool> value_passes(const Json& schema, const std::string& key, const Json& value,
                                   const std::string& path);
  // Is `value` valid under `schema` (type, enum, const and value_passes' keywords)? nullopt
  // when that cannot be decided here.
  std::optional<bool> value_valid(const Json& schema, const Json& value, const std::string& path);
  // Does `value` pass the internal exclusions the `not` rewrite left (kNonInteger,
  // kExcludedStrings, kExcludedPatterns)?
  bool value_passes_exclusions(const Json& schema, const Json& value, const std::string& path);
  Expr visit_branches(const Json& schema, const std::string& key, const std::string& path);
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
