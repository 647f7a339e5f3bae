// JSON Schema -> GBNF grammar text (llama.cpp dialect, start rule `root`), plus the small
// grammars the server needs for response_format json_object and vLLM guided_choice.
//
// The grammar accepts a subset of the instances the schema accepts, written compactly (or with
// bounded whitespace, see SchemaOptions) and with object properties in the order `properties`
// lists them (then required names not listed there, then additional properties). A keyword
// the converter cannot enforce throws SchemaError naming it, so nothing it generates is ever
// rejected by a validator. Annotations (title, description, examples, default, $schema, $id,
// $comment, deprecated, readOnly, writeOnly) and words that are no keyword of any draft
// (vendor extensions such as "x-foo"; the spec treats unknown keywords as annotations) are
// ignored; keywords of some draft that are not enforced here (minContains, unevaluated*,
// nullable, ...) are refused.
//
// Supported: type (incl. unions, "integer" vs "number"), properties, required,
// additionalProperties (true / false / schema; absent = true as the spec says), items,
// prefixItems, draft-7 tuple `items` + additionalItems, minItems, maxItems (any size: large
// counts are lowered as binary counters), uniqueItems (false, true when maxItems <= 1, or
// true over at most 8 item values: an enum / const, objects and arrays too, or booleans / null), enum, const (other keywords beside them decided
// on each value, json_schema_values.cpp), anyOf, oneOf (branches that may overlap made
// disjoint, branch i and not branch j, where not can say it), allOf (merged), $ref to local JSON pointers (#, #/$defs/..,
// #/definitions/.., recursive too), minLength, maxLength, pattern, format (date, time,
// date-time, email, hostname, ipv4, uuid, uri), minimum / maximum / exclusiveMinimum /
// exclusiveMaximum, minProperties, maxProperties, patternProperties (at most 4 patterns; names
// outside `properties` split by the patterns they match, each valued by all of their schemas,
// the rest by additionalProperties; listed properties also get the schemas of the patterns
// they match; not merged under allOf with properties/additionalProperties), propertyNames
// (boolean, or type/pattern/minLength/maxLength/enum/const; a finite name set becomes optional
// listed members), contains (no prefix items, uniqueItems, maxItems or minItems above 1:
// items, one matching item, items), not (of a boolean, type, enum/const over
// null/boolean/string/integer values (integers: the integers between them, plus non-integers
// where no numeric bound is set), or
// required, properties, length / count / numeric bounds, pattern, or several independent
// keywords of those; others refused),
// dependentRequired / dependentSchemas / dependencies (at most 6 optional trigger names;
// dependent names are written before their trigger), if/then/else (where `not` of `if` is
// one of the forms above), multipleOf (a positive integer up to 1000; with bounds when at most
// 256 multiples lie between a bound and 0; only integers are written). Patterns with anchors
// inside, or with length bounds they do not imply, a format beside a pattern, `not` of strings
// or length bounds it does not imply, and names excluded by `not` go through a code point
// automaton (regex_dfa.h, at most 4000 states). Length bounds on an automaton are never
// unrolled past that (json_schema_lengths.cpp): the exact product with a length counter where
// it fits; exact counted repeats where only loop sinks ("anything after the match") loop; a
// share of maxLength per self-loop, or a capped maximum for other cycles, as subsets.
//
// Narrower than the spec, by design (still never invalid): integers are written without a
// fraction or exponent (1, not 1.0); bounded numbers without an exponent; non-integer numbers
// (not of type integer) with a non-zero fraction digit and at most 15 digits; a maximum count
// above 2^31-1 reads as 2^31-1; pattern classes \d \w \s and `.` as both ECMA-262 and
// Python's re read them (regex.h RegexClasses); formats generate a strict subset (no
// leap seconds, no quoted e-mail local parts, URIs with scheme://host), and beside a maxLength
// they do not imply (64 or more, or a product above 1024 states), each part of the format
// within its share of it (regex_within_length); a pattern beside a large length bound is a subset where its automaton
// loops before the match or through groups (above); when two or more names
// beyond `properties` count towards minProperties, those have distinct lengths, 1, 2, 3, ...
// code points in order (a parser keeps one of a repeated name; at most 16 such, names up to
// 64 code points).
//
// Server use: SchemaError -> 400 naming e.path (e.g. param "response_format.json_schema.schema"
// plus the pointer); regex_to_gbnf (regex.h) throws RegexError with a byte offset.
//
// Property order: pass the schema as nlohmann::ordered_json (parse with
// nlohmann::ordered_json::parse) so `properties` keeps the order it was written in; a plain
// nlohmann::json sorts keys alphabetically, and converting it gives that order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace pagoda::structured {

// The schema uses something the converter refuses, is malformed, accepts no value, or needs a
// grammar above the size limits. `path` is the JSON pointer of the offending keyword inside
// the schema (e.g. "/properties/foo/pattern"); what() names the keyword and the reason.
struct SchemaError : std::runtime_error {
  SchemaError(std::string path, const std::string& message)
      : std::runtime_error(path.empty() ? message : path + ": " + message),
        path(std::move(path)) {}
  std::string path;
};

struct SchemaOptions {
  // false: compact JSON (no whitespace at all). true: up to a newline plus 20 spaces/tabs of
  // indentation, or one space, between tokens (bounded, so a model cannot spin on spaces).
  bool flexible_whitespace = false;
  // Draft-7 and earlier: keywords next to $ref are ignored (draft 2019-09+ applies them).
  // Also turned on by a root `$schema` naming draft-04/06/07.
  bool ref_ignores_siblings = false;
  // Size bounds; beyond them SchemaError (a 400) rather than a grammar that stalls compilation.
  size_t max_grammar_bytes = 512 * 1024;
  uint32_t max_repeat = 0x7FFFFFFF;   // largest count in {m,n} (maxLength, maxItems, ...)
  uint64_t max_expanded_cost = 400000;  // estimate of grammar elements after expanding {m,n}
  size_t max_depth = 64;              // schema nesting / $ref inlining depth
  // Schema nodes visited plus allOf merges done: bounds the conversion time of schemas whose
  // $ref/allOf inlining multiplies (a chain of allOf of two refs doubles at each link).
  uint64_t max_work = 200000;
};

// The schema as a complete GBNF grammar with start rule `root`. Throws SchemaError.
std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema,
                                const SchemaOptions& options = {});

// Any JSON object (response_format {"type": "json_object"}).
std::string json_object_gbnf(const SchemaOptions& options = {});

// Exactly one of the given strings, verbatim (vLLM guided_choice). Throws SchemaError when
// the list is empty.
std::string choice_gbnf(const std::vector<std::string>& choices);

}  // namespace pagoda::structured
