// JSON Schema patterns as automata (regex_dfa.h) written as GBNF: a string `pattern` the regex
// writer cannot say exactly (anchors inside it, or length bounds it does not imply, or beside a
// `format`: the format's automaton intersected with the pattern's), and the
// key languages of `patternProperties` / `propertyNames` (names matching some patterns, none
// of the others, and none of the listed `properties`).
#include "engine/structured/json_schema_internal.h"
#include "engine/structured/regex_dfa.h"

namespace pagoda::structured::schema_detail {

CharDfa SchemaConverter::pattern_dfa(const Json& pattern, const std::string& path, RegexClasses classes) {
  if (!pattern.is_string()) throw SchemaError(path, "a pattern must be a string");
  try {
    RegexNode tree = parse_regex(pattern.get<std::string>(), options_.max_repeat, classes);
    uint64_t expanded = regex_expanded_size(tree);
    if (expanded > kMaxRegexExpandedSize) throw RegexError("pattern too large once its repetitions are expanded", 0);
    return dfa_from_regex(tree, true);
  } catch (const RegexError& e) {
    throw SchemaError(path, std::string("pattern: ") + e.what() + " (at byte " + std::to_string(e.offset) + ")");
  }
}

CharDfa SchemaConverter::checked(const std::function<CharDfa()>& build, const std::string& path) {
  try {
    return build();
  } catch (const RegexError& e) {
    throw SchemaError(path, std::string("pattern: ") + e.what());
  }
}

namespace {
constexpr size_t kMinimizedStates = 400;
// A format beside maxLength: the exact product is tried below this length and state count.
constexpr uint64_t kExactFormatLength = 64;
constexpr size_t kExactFormatStates = 1024;
}  // namespace

CharDfa writable_dfa(const CharDfa& dfa) {
  // Lone surrogates are no text: drop them before trimming, so no edge is left empty.
  CharDfa without = dfa;
  const CodepointSet surrogates = CodepointSet::range(0xD800, 0xDFFF);
  for (auto& state : without.states)
    for (auto& e : state.edges) e.chars = e.chars.minus(surrogates);
  // Moore refinement takes a round per length a counter distinguishes: large products (a
  // pattern times a length counter, already close to minimal) are only pruned.
  return without.states.size() > kMinimizedStates ? dfa_pruned(without) : dfa_trimmed(without);
}

// One rule per automaton state: a character (as JSON writes it inside a string) and the next
// state, or the end where the state accepts. Returns the start rule; nullopt for no string.
Expr SchemaConverter::dfa_rules(const CharDfa& dfa_in, const std::string& hint) {
  CharDfa dfa = writable_dfa(dfa_in);
  if (dfa.empty()) return std::nullopt;
  std::vector<std::string> names;
  for (size_t s = 0; s < dfa.states.size(); ++s) names.push_back(fresh_name(hint + "-s" + std::to_string(s)));
  for (size_t s = 0; s < dfa.states.size(); ++s) {
    std::vector<std::string> alts;
    if (dfa.states[s].accepting) alts.push_back("");
    for (const auto& e : dfa.states[s].edges) {
      std::string c = gbnf_json_string_char(e.chars);
      alts.push_back(seq({c, names[size_t(e.target)]}));
    }
    Expr body = alternatives(alts);  // every trimmed state accepts or has an edge
    std::string text = body->empty() ? "\"\"" : *body;
    rules_.emplace_back(names[s], text);
    grammar_bytes_ += names[s].size() + text.size() + 6;
    if (grammar_bytes_ > options_.max_grammar_bytes)
      throw SchemaError(hint, "pattern needs a grammar larger than " + std::to_string(options_.max_grammar_bytes) +
                                  " bytes");
  }
  return names[0];
}

Expr SchemaConverter::pattern_string(const Json& schema, std::optional<uint64_t> min_len,
                                     std::optional<uint64_t> max_len, const std::string& path) {
  auto quoted = [&](Expr body) -> Expr {
    if (!body) return std::nullopt;
    return add_rule(path + "-pattern", seq({"\"\\\"\"", *body, "\"\\\"\""}));
  };
  // The pattern and exclusions, intersected with `base` (the format's strings, or any).
  auto constrained = [&](CharDfa dfa) {
    if (schema.contains("pattern")) {
      CharDfa p = pattern_dfa(schema["pattern"], path + "/pattern");
      dfa = checked([&] { return dfa_intersect(dfa, p); }, path + "/pattern");
    }
    if (schema.contains(kExcludedStrings)) {
      std::vector<std::string> excluded;
      for (const auto& s : schema[kExcludedStrings]) excluded.push_back(s.get<std::string>());
      dfa = checked([&] { return dfa_intersect(dfa, dfa_complement(dfa_from_strings(excluded))); }, path + "/not");
    }
    if (schema.contains(kExcludedPatterns))
      for (const auto& p : schema[kExcludedPatterns]) {
        CharDfa matching = pattern_dfa(p, path + "/not/pattern", RegexClasses::Wide);
        dfa = checked([&] { return dfa_intersect(dfa, dfa_complement(matching)); }, path + "/not/pattern");
      }
    return dfa;
  };
  std::optional<std::string> format;
  if (schema.contains("format")) format = schema["format"].get<std::string>();  // build_string checked it
  // The format's strings (all of them), or any string.
  auto base = [&] { return format ? *format_dfa(*format, path + "/format") : dfa_complement(dfa_from_strings({})); };
  if (!format || !max_len) return quoted(bounded_dfa_rules(constrained(base()), min_len.value_or(0), max_len, path));
  // Exact where the product stays small (a format has hundreds of states: no large maximum).
  if (*max_len < kExactFormatLength) try {
      return quoted(dfa_rules(dfa_with_length(constrained(base()), min_len.value_or(0), max_len,
                                              kExactFormatStates),
                              path + "-pattern"));
    } catch (const RegexError&) {
    } catch (const SchemaError&) {
    }
  // Too large for the exact product: the format's strings within maxLength (a subset), which
  // then bound every string. Alone, that is a regex with counted repeats; beside a pattern or
  // exclusions, an automaton: within a smaller length again while it does not fit.
  if (!schema.contains("pattern") && !schema.contains(kExcludedStrings) && !schema.contains(kExcludedPatterns)) {
    if (std::optional<std::string> shorter = format_within(*format, *max_len, min_len.value_or(0)))
      return quoted(*shorter);
  }
  for (uint64_t within = *max_len;; within /= 2) {
    try {
      CharDfa shorter = constrained(*format_dfa(*format, path + "/format", within));
      return quoted(bounded_dfa_rules(shorter, min_len.value_or(0), std::nullopt, path));
    } catch (const SchemaError&) {
      if (within / 2 < min_len.value_or(1)) throw;
    }
  }
}

bool KeyRules::allowed(const std::string& name) const {
  return !names || names->accepts(utf8_codepoints(name));
}

std::vector<size_t> KeyRules::matching(const std::string& name) const {
  std::vector<size_t> out;
  std::vector<uint32_t> cps = utf8_codepoints(name);
  for (size_t i = 0; i < patterns.size(); ++i)
    if (patterns[i].dfa.accepts(cps)) out.push_back(i);
  return out;
}

Json KeyRules::with_patterns(const std::string& name, const Json& base) const {
  std::vector<Json> parts = {base};
  for (size_t i : matching(name)) parts.push_back(patterns[i].schema);
  return all_of(parts);
}

Json KeyRules::all_of(const std::vector<Json>& parts) {
  Json list = Json::array();
  for (const auto& p : parts) {
    if (p.is_boolean() && !p.get<bool>()) return false;
    if (!(p.is_boolean() || (p.is_object() && p.empty()))) list.push_back(p);
  }
  if (list.empty()) return true;
  if (list.size() == 1) return list[0];
  return Json{{"allOf", list}};
}

// `propertyNames` as an automaton over names: a boolean, or a string schema made of type,
// pattern, minLength, maxLength, enum and const (anything else is refused).
static CharDfa names_dfa(SchemaConverter& conv, const Json& schema, const std::string& path) {
  CharDfa any = dfa_complement(dfa_from_strings({}));
  if (schema.is_boolean()) return schema.get<bool>() ? any : dfa_from_strings({});
  if (!schema.is_object()) throw SchemaError(path, "propertyNames must be a schema");
  CharDfa dfa = any;
  for (const auto& [key, value] : schema.items()) {
    if (is_annotation(key)) continue;
    if (key == "type") {
      if (!declared_types(schema, path).count("string")) return dfa_from_strings({});
    } else if (key == "pattern") {
      CharDfa p = conv.pattern_dfa(value, path + "/pattern");
      dfa = conv.checked([&] { return dfa_intersect(dfa, p); }, path + "/pattern");
    } else if (key == "minLength" || key == "maxLength") {
      if (!value.is_number_unsigned() && !(value.is_number_integer() && value.get<long long>() >= 0))
        throw SchemaError(path + "/" + key, key + " must be a non-negative integer");
      uint64_t n = value.get<uint64_t>();
      dfa = conv.checked([&] {
        return key == "minLength" ? dfa_with_length(dfa, n, std::nullopt) : dfa_with_length(dfa, 0, n);
      }, path + "/" + key);
    } else if (key == "enum" || key == "const") {
      std::vector<std::string> names;
      for (const auto& v : key == "enum" ? value : Json::array({value}))
        if (v.is_string()) names.push_back(v.get<std::string>());
      dfa = conv.checked([&] { return dfa_intersect(dfa, dfa_from_strings(names)); }, path + "/" + key);
    } else {
      throw SchemaError(path + "/" + pointer_escape(key),
                        "propertyNames supports only type, pattern, minLength, maxLength, enum and const");
    }
  }
  return dfa;
}

KeyRules SchemaConverter::key_rules(const Json& schema, const std::string& path) {
  KeyRules out;
  if (schema.contains("patternProperties")) {
    const Json& pp = schema["patternProperties"];
    if (!pp.is_object()) throw SchemaError(path + "/patternProperties", "patternProperties must be an object");
    for (const auto& [pattern, sub] : pp.items())
      out.patterns.push_back({sub, pattern_dfa(Json(pattern), path + "/patternProperties/" + pointer_escape(pattern))});
  }
  if (schema.contains("propertyNames")) out.names = names_dfa(*this, schema["propertyNames"], path + "/propertyNames");
  return out;
}

}  // namespace pagoda::structured::schema_detail
