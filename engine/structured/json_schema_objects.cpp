// JSON Schema objects and arrays as GBNF: properties in written order with optional ones
// skippable, additional properties after them (keys that are none of the named ones),
// min/maxProperties by counting states, tuple prefixes and min/maxItems.
#include <map>

#include "engine/structured/json_schema_internal.h"
#include "engine/structured/regex.h"

namespace pagoda::structured::schema_detail {

namespace {

// Restores a set on scope exit: objects and arrays consume input, so a $ref reached again
// inside one is ordinary recursion, not a cycle that consumes nothing.
struct SetSwap {
  std::set<std::string>& target;
  std::set<std::string> saved;
  explicit SetSwap(std::set<std::string>& t) : target(t), saved(std::move(t)) { target.clear(); }
  ~SetSwap() { target = std::move(saved); }
};

struct TrieNode {
  bool terminal = false;
  std::map<uint32_t, TrieNode> children;
};

std::vector<uint32_t> codepoints_of(const std::string& s) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < s.size();) {
    unsigned char b = static_cast<unsigned char>(s[i]);
    size_t len = b < 0x80 ? 1 : (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : 4;
    uint32_t cp = len == 1 ? b : len == 2 ? (b & 0x1F) : len == 3 ? (b & 0x0F) : (b & 0x07);
    for (size_t k = 1; k < len && i + k < s.size(); ++k) cp = (cp << 6) | (s[i + k] & 0x3F);
    out.push_back(cp);
    i += len;
  }
  return out;
}

}  // namespace

// A JSON string (quotes included) whose value is none of `names`. Each trie node becomes a
// rule: end the key here (if no name ends here), take a name's next character, or take any
// other character and then anything. Characters are written canonically (one spelling each),
// so a spelled-differently name cannot slip through.
static std::string key_not_in(SchemaConverter& conv, const std::vector<std::string>& names,
                              const std::string& hint) {
  if (names.empty()) return conv.primitive("json-string");
  TrieNode root;
  for (const auto& n : names) {
    TrieNode* node = &root;
    for (uint32_t cp : codepoints_of(n)) node = &node->children[cp];
    node->terminal = true;
  }
  std::string any_rest = seq({conv.primitive("json-char") + "*", "\"\\\"\""});
  // Post-order so children's rule names exist before their parent's body.
  struct Builder {
    SchemaConverter& conv;
    const std::string& any_rest;
    const std::string& hint;
    std::string build(const TrieNode& node, int depth) {
      std::vector<std::string> alts;
      if (!node.terminal) alts.push_back("\"\\\"\"");
      CodepointSet taken;
      for (const auto& [cp, child] : node.children) {
        taken.add(cp, cp);
        alts.push_back(seq({gbnf_json_string_char(CodepointSet::of(cp)), build(child, depth + 1)}));
      }
      std::string other = gbnf_json_string_char(CodepointSet::all().minus(taken));
      if (!other.empty()) alts.push_back(seq({other, any_rest}));
      Expr body = alternatives(alts);
      return conv.add_rule(hint + "-key", *body);
    }
  } builder{conv, any_rest, hint};
  return seq({"\"\\\"\"", builder.build(root, 0)});
}

// Without pattern or name rules, one key rule excludes the known names; with them, the names
// left are split by which patterns they match (each region valued by those patterns' schemas,
// the region matching none by additionalProperties), so every key is valued exactly.
std::string SchemaConverter::extra_members(const KeyRules& keys, const std::vector<std::string>& known,
                                           const Json& extra_schema, const std::string& path,
                                           std::optional<uint64_t> key_length) {
  auto member = [&](const std::string& key, const std::string& value) {
    return seq({key, ws(), "\":\"", ws(), value});
  };
  if (!keys.any() && !key_length) {
    Expr v = visit(extra_schema, path + "/additionalProperties");
    return v ? member(key_not_in(*this, known, path), *v) : "";
  }
  const size_t k = keys.patterns.size();
  if (k > 4) throw SchemaError(path + "/patternProperties", "more than 4 patterns are not supported");
  const std::string at = path + "/patternProperties";
  CharDfa base = dfa_complement(dfa_from_strings(known));
  if (keys.names) base = checked([&] { return dfa_intersect(base, *keys.names); }, path + "/propertyNames");
  if (key_length) base = checked([&] { return dfa_with_length(base, *key_length, *key_length); }, path);
  std::vector<std::string> alts;
  for (size_t mask = 0; mask < (size_t(1) << k); ++mask) {
    CharDfa region = base;
    std::vector<Json> parts;
    for (size_t i = 0; i < k; ++i) {
      bool in = (mask >> i) & 1;
      const CharDfa& p = keys.patterns[i].dfa;
      region = checked([&] { return dfa_intersect(region, in ? p : dfa_complement(p)); }, at);
      if (in) parts.push_back(keys.patterns[i].schema);
    }
    if (dfa_trimmed(region).empty()) continue;
    Expr value = mask ? visit(KeyRules::all_of(parts), at) : visit(extra_schema, path + "/additionalProperties");
    if (!value) continue;
    Expr key = dfa_rules(region, path + (key_length ? "-key" + std::to_string(*key_length) : "-key"));
    if (key) alts.push_back(member(seq({"\"\\\"\"", *key, "\"\\\"\""}), *value));
  }
  Expr all = alternatives(alts);
  if (!all) return "";
  return alts.size() > 1 ? add_rule(path + "-extra", *all) : *all;
}

Expr SchemaConverter::build_object(const Json& schema, const std::string& path) {
  SetSwap consumed(refs_in_progress_);
  struct Member {
    std::string name;
    Expr value;
    bool required;
  };
  std::vector<Member> members;
  std::vector<std::string> known_names;
  std::set<std::string> required;
  if (schema.contains("required")) {
    const Json& r = schema["required"];
    if (!r.is_array()) throw SchemaError(path + "/required", "required must be an array of strings");
    for (const auto& n : r) {
      if (!n.is_string()) throw SchemaError(path + "/required", "required must be an array of strings");
      required.insert(n.get<std::string>());
    }
  }
  KeyRules keys = key_rules(schema, path);
  if (schema.contains("properties")) {
    const Json& props = schema["properties"];
    if (!props.is_object()) throw SchemaError(path + "/properties", "properties must be an object");
    for (const auto& [name, sub] : props.items()) {
      std::string sub_path = path + "/properties/" + pointer_escape(name);
      Expr value = keys.allowed(name) ? visit(keys.with_patterns(name, sub), sub_path) : std::nullopt;
      known_names.push_back(name);
      members.push_back({name, value, required.count(name) > 0});
    }
  }
  Json extra_schema = schema.contains("additionalProperties") ? schema["additionalProperties"] : Json(true);
  // Required names that `properties` does not list: they appear after the listed ones, valued
  // by the patterns they match, else by additionalProperties.
  if (schema.contains("required")) {
    std::set<std::string> seen(known_names.begin(), known_names.end());
    for (const auto& n : schema["required"]) {
      std::string name = n.get<std::string>();
      if (seen.insert(name).second) {
        Expr value;
        if (keys.allowed(name))
          value = keys.matching(name).empty() ? visit(extra_schema, path + "/additionalProperties")
                                              : visit(keys.with_patterns(name, true), path + "/patternProperties");
        known_names.push_back(name);
        members.push_back({name, value, true});
      }
    }
  }
  // Names restricted to a few strings: each becomes an optional listed member, so no name
  // can appear twice (a repeated extra name would count once against minProperties).
  bool names_listed = false;
  if (keys.names) {
    if (auto finite = dfa_finite_strings(*keys.names, 64)) {
      names_listed = true;
      std::set<std::string> seen(known_names.begin(), known_names.end());
      for (const auto& name : *finite) {
        if (!seen.insert(name).second) continue;
        Json value_schema = keys.matching(name).empty() ? extra_schema : keys.with_patterns(name, true);
        members.push_back({name, visit(value_schema, path + "/propertyNames"), false});
        known_names.push_back(name);
      }
    }
  }
  std::vector<Member> usable;
  for (auto& m : members) {
    if (m.value) usable.push_back(m);
    else if (m.required) return std::nullopt;  // a required property no value satisfies
  }
  std::optional<uint64_t> min_props = count_keyword(schema, "minProperties", path, options_.max_repeat);
  std::optional<uint64_t> max_props = count_keyword(schema, "maxProperties", path, options_.max_repeat);
  uint64_t lo = min_props.value_or(0);
  const size_t n = usable.size();

  std::string extra_member = names_listed ? "" : extra_members(keys, known_names, extra_schema, path);
  std::vector<std::string> member_text;
  for (const auto& m : usable)
    member_text.push_back(seq({gbnf_literal(Json(m.name).dump()), ws(), "\":\"", ws(), *m.value}));

  // State (i, c): members before i decided, c emitted so far (saturating at `cap`; only
  // "none yet" vs "some" matters without min/maxProperties). Rules are memoized per state.
  uint64_t cap = std::max<uint64_t>({1, lo, max_props.value_or(0)});
  if (cap > options_.max_repeat) throw SchemaError(path + "/maxProperties", "count too large");
  // c never exceeds the number of listed members, whatever the bounds.
  if ((std::min<uint64_t>(cap, n) + 1) * (n + 1) > 20000)
    throw SchemaError(path, "minProperties/maxProperties with this many properties needs too large a grammar");
  // Extra members whose names have distinct lengths (one per length from 1 on), made
  // as states ask for more; a length no extra name can have is skipped.
  std::vector<std::string> distinct;
  uint64_t next_length = 1;  // (an empty name would be an odd first choice)
  bool distinct_short = false;
  constexpr uint64_t kMaxDistinctExtras = 16, kMaxKeyLength = 64;
  auto distinct_extras = [&](uint64_t want) -> const std::vector<std::string>& {
    want = std::min(want, kMaxDistinctExtras);
    while (distinct.size() < want && next_length <= kMaxKeyLength) {
      std::string m = extra_members(keys, known_names, extra_schema, path, next_length++);
      if (!m.empty()) distinct.push_back(m);
    }
    return distinct;
  };
  std::map<std::pair<size_t, uint64_t>, Expr> memo;
  std::string hint = path.empty() ? "root-obj" : path;
  auto state = [&](auto&& self, size_t i, uint64_t c) -> Expr {
    auto key = std::make_pair(i, c);
    if (auto it = memo.find(key); it != memo.end()) return it->second;
    Expr result;
    if (i == n) {
      uint64_t need = (c >= lo) ? 0 : lo - c;
      std::optional<uint64_t> room;
      if (max_props) room = *max_props >= c ? *max_props - c : 0;
      if (extra_member.empty() || (room && *room == 0)) {
        result = need == 0 ? Expr("") : std::nullopt;
      } else if (room && need > *room) {
        result = std::nullopt;
      } else if (need >= 2) {
        // Several extra members count towards minProperties: a repeated name would count once
        // in the parsed object, so the counted ones get names of distinct lengths (shortest
        // first), and any further ones are free.
        const std::vector<std::string>& counted = distinct_extras(need);
        if (counted.size() < need) {
          result = std::nullopt;
          distinct_short = true;
        } else {
          std::string text;
          for (size_t j = 0; j < need; ++j) text = seq({text, c > 0 || j > 0 ? sep() : "", counted[j]});
          std::optional<uint64_t> more_max;
          if (room) more_max = *room - need;
          if (!more_max || *more_max > 0) {
            if (room) charge_repeat(*room, extra_member, path + "/maxProperties");
            text = seq({text, std::string("(") + seq({sep(), extra_member}) + ")" + repeat_suffix(0, more_max)});
          }
          result = text;
        }
      } else {
        // The first extra member of an empty object carries no comma: one fewer repeated.
        uint64_t more_min = (c == 0 && need > 0) ? need - 1 : need;
        std::optional<uint64_t> more_max;
        if (room) more_max = c == 0 ? *room - 1 : *room;
        if (room) charge_repeat(*room, extra_member, path + "/maxProperties");
        std::string tail;  // further members, each after a comma
        if (!more_max || *more_max > 0) {
          tail = std::string("(") + seq({sep(), extra_member}) + ")";
          std::string suffix = repeat_suffix(more_min, more_max);
          if (!suffix.empty()) tail = std::string("(") + tail + suffix + ")";
        }
        if (c > 0) result = tail;
        else if (need == 0) result = std::string("(") + seq({extra_member, tail}) + ")?";
        else result = seq({extra_member, tail});
      }
    } else {
      std::vector<std::string> alts;
      bool any = false;
      if (!max_props || c < *max_props) {
        Expr rest = self(self, i + 1, std::min(c + 1, cap));
        if (rest) {
          alts.push_back(seq({c > 0 ? sep() : "", member_text[i], *rest}));
          any = true;
        }
      }
      if (!usable[i].required) {
        Expr rest = self(self, i + 1, c);
        if (rest) {
          alts.push_back(*rest);
          any = true;
        }
      }
      result = any ? alternatives(alts) : std::nullopt;
      if (result && result->find(' ') != std::string::npos)
        result = add_rule(hint + "-p" + std::to_string(i), *result);
    }
    memo[key] = result;
    return result;
  };
  Expr body = state(state, 0, 0);
  if (!body && distinct_short)
    throw SchemaError(path + "/minProperties",
                      "minProperties needs more than " + std::to_string(kMaxDistinctExtras) +
                          " properties beyond the listed ones (or names of more distinct lengths than the "
                          "name rules allow)");
  if (!body) return std::nullopt;
  return add_rule(hint + "-obj", seq({"\"{\"", ws(), *body, ws(), "\"}\""}));
}

Expr SchemaConverter::build_array(const Json& schema, const std::string& path) {
  SetSwap consumed(refs_in_progress_);
  std::vector<Expr> prefix;
  Json rest_schema = true;
  std::string rest_path = path + "/items";
  if (schema.contains("prefixItems")) {
    const Json& p = schema["prefixItems"];
    if (!p.is_array()) throw SchemaError(path + "/prefixItems", "prefixItems must be an array");
    if (schema.contains("additionalItems"))
      throw SchemaError(path + "/additionalItems", "additionalItems next to prefixItems (use items)");
    for (size_t i = 0; i < p.size(); ++i)
      prefix.push_back(visit(p[i], path + "/prefixItems/" + std::to_string(i)));
    if (schema.contains("items")) {
      if (schema["items"].is_array())
        throw SchemaError(path + "/items", "items must be a schema when prefixItems is present");
      rest_schema = schema["items"];
    }
  } else if (schema.contains("items") && schema["items"].is_array()) {
    // Draft 7 tuple form.
    const Json& p = schema["items"];
    for (size_t i = 0; i < p.size(); ++i)
      prefix.push_back(visit(p[i], path + "/items/" + std::to_string(i)));
    if (schema.contains("additionalItems")) {
      rest_schema = schema["additionalItems"];
      rest_path = path + "/additionalItems";
    }
  } else if (schema.contains("items")) {
    rest_schema = schema["items"];
  }
  Expr rest = visit(rest_schema, rest_path);
  uint64_t lo = count_keyword(schema, "minItems", path, options_.max_repeat).value_or(0);
  std::optional<uint64_t> hi = count_keyword(schema, "maxItems", path, options_.max_repeat);
  if (schema.contains("contains")) return contains_array(schema, rest_schema, rest, lo, hi, !prefix.empty(), path);
  if (schema.contains("uniqueItems")) {
    const Json& u = schema["uniqueItems"];
    if (!u.is_boolean()) throw SchemaError(path + "/uniqueItems", "uniqueItems must be a boolean");
    if (u.get<bool>() && !(hi && *hi <= 1)) {
      if (prefix.empty() && !(schema.contains("items") && schema["items"].is_array()))
        if (std::optional<Expr> unique = unique_enum_array(rest_schema, lo, hi, path)) return *unique;
      throw SchemaError(path + "/uniqueItems",
                        "uniqueItems: true is only supported over a few values (an enum / const, or type "
                        "boolean / null), or with maxItems <= 1");
    }
  }
  if (hi && lo > *hi) return std::nullopt;
  const uint64_t k = prefix.size();

  // Items after the prefix: between r_lo and r_hi of `rest`, first one without a comma when
  // nothing came before.
  auto tail = [&](bool first) -> Expr {
    uint64_t r_lo = lo > k ? lo - k : 0;
    std::optional<uint64_t> r_hi;
    if (hi) r_hi = *hi > k ? *hi - k : 0;
    if (!rest || (r_hi && *r_hi == 0)) return r_lo == 0 ? Expr("") : std::nullopt;
    if (r_hi) charge_repeat(*r_hi, *rest, path + "/maxItems");
    if (r_lo > 0) charge_repeat(r_lo, *rest, path + "/minItems");
    auto count = [](uint64_t a, std::optional<uint64_t> b) { return repeat_suffix(a, b); };
    std::string item_after = std::string("(") + seq({sep(), *rest}) + ")";
    if (!first) {
      if (r_hi && *r_hi == r_lo && r_lo == 1) return seq({sep(), *rest});
      return item_after + count(r_lo, r_hi);
    }
    std::optional<uint64_t> more_hi;
    if (r_hi) more_hi = *r_hi - 1;
    std::string more = (more_hi && *more_hi == 0) ? "" : item_after + count(r_lo > 0 ? r_lo - 1 : 0, more_hi);
    std::string some = seq({*rest, more});
    return r_lo == 0 ? std::string("(") + some + ")?" : some;
  };
  // seq_from(i): the items from position i on, i items already written.
  Expr after = tail(k == 0);
  for (uint64_t i = k; i-- > 0;) {
    std::vector<std::string> alts;
    bool any = false;
    bool can_stop = i >= lo;
    if ((!hi || i < *hi) && prefix[i] && after) {
      alts.push_back(seq({i > 0 ? sep() : "", *prefix[i], *after}));
      any = true;
    }
    if (can_stop) {
      alts.push_back("");
      any = true;
    }
    after = any ? alternatives(alts) : std::nullopt;
  }
  if (!after) return std::nullopt;
  return add_rule((path.empty() ? "root" : path) + "-arr", seq({"\"[\"", ws(), *after, ws(), "\"]\""}));
}

// `contains`: some item matches both the items schema and `contains`. Written as items, then
// the matching one, then items (the grammar may read an item either way; only an array with a
// matching item gets through). Only without prefix items, uniqueItems and item counts beyond
// "at least one".
Expr SchemaConverter::contains_array(const Json& schema, const Json& rest_schema, const Expr& rest, uint64_t lo,
                                     std::optional<uint64_t> hi, bool has_prefix, const std::string& path) {
  const std::string at = path + "/contains";
  if (has_prefix) throw SchemaError(at, "contains beside prefixItems or tuple items is not supported");
  if (lo > 1 || hi) throw SchemaError(at, "contains beside minItems above 1 or maxItems is not supported");
  if (schema.contains("uniqueItems") && !(schema["uniqueItems"].is_boolean() && !schema["uniqueItems"].get<bool>()))
    throw SchemaError(at, "contains beside uniqueItems is not supported");
  Expr match = visit(KeyRules::all_of({rest_schema, schema["contains"]}), at);
  if (!match) return std::nullopt;
  std::string before, after;
  if (rest) before.append("(").append(seq({*rest, sep()})).append(")*");
  if (rest) after.append("(").append(seq({sep(), *rest})).append(")*");
  return add_rule((path.empty() ? "root" : path) + "-arr", seq({"\"[\"", ws(), before, *match, after, ws(), "\"]\""}));
}

}  // namespace pagoda::structured::schema_detail
