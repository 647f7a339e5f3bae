// JSON Schema `uniqueItems: true` where the items come from a small finite set of values
// (an enum / const, objects and arrays too, or type boolean / null): arrays of
// distinct values, one rule per set of values already written (at most 2^8 of them), within
// minItems / maxItems. Items of any other kind are refused: distinctness of unbounded values
// is not something a context-free grammar can keep.
#include "engine/structured/json_schema_internal.h"

namespace pagoda::structured::schema_detail {

namespace {

constexpr size_t kMaxUniqueValues = 8;

// The item schema's values when they form a finite set; nullopt otherwise.
std::optional<std::vector<Json>> finite_values(const Json& items, const std::string& path) {
  if (!items.is_object()) return std::nullopt;
  for (const auto& [key, value] : items.items())
    if (!is_annotation(key) && key != "enum" && key != "const" && key != "type") return std::nullopt;
  std::set<std::string> types = declared_types(items, path);
  std::vector<Json> candidates;
  if (items.contains("const")) {
    candidates.push_back(items["const"]);
    if (items.contains("enum") && (!items["enum"].is_array() ||
                                   std::find(items["enum"].begin(), items["enum"].end(), items["const"]) ==
                                       items["enum"].end()))
      candidates.clear();
  } else if (items.contains("enum")) {
    if (!items["enum"].is_array()) return std::nullopt;
    for (const auto& v : items["enum"]) candidates.push_back(v);
  } else {
    if (!items.contains("type")) return std::nullopt;
    for (const auto& t : types) {
      if (t == "boolean") candidates.push_back(true), candidates.push_back(false);
      else if (t == "null") candidates.push_back(nullptr);
      else return std::nullopt;
    }
  }
  std::vector<Json> out;
  std::vector<nlohmann::json> seen;  // values as JSON compares them: keys unordered, 1 == 1.0
  for (const auto& v : candidates) {
    bool typed = false;
    for (const auto& t : types) typed |= json_type_matches(v, t);
    nlohmann::json plain = nlohmann::json::parse(v.dump());
    // Equal values count once.
    if (typed && std::find(seen.begin(), seen.end(), plain) == seen.end()) out.push_back(v), seen.push_back(plain);
  }
  return out;
}

}  // namespace

std::optional<Expr> SchemaConverter::unique_enum_array(const Json& items, uint64_t lo, std::optional<uint64_t> hi,
                                                         const std::string& path) {
  std::optional<std::vector<Json>> values = finite_values(items, path + "/items");
  if (!values) return std::nullopt;
  if (values->size() > kMaxUniqueValues)
    throw SchemaError(path + "/uniqueItems", "uniqueItems over more than " + std::to_string(kMaxUniqueValues) +
                                                 " distinct values is not supported");
  const size_t k = values->size();
  uint64_t most = std::min<uint64_t>(hi.value_or(k), k);
  if (lo > most) return Expr();
  std::vector<std::string> literals;
  for (const auto& v : *values) literals.push_back(literal(v));
  // after(S): the items after those in S (a bit set) were written, each after a comma.
  std::map<uint32_t, Expr> memo;
  auto after = [&](auto&& self, uint32_t used) -> Expr {
    if (auto it = memo.find(used); it != memo.end()) return it->second;
    uint64_t count = uint64_t(__builtin_popcount(used));
    std::vector<std::string> alts;
    if (count >= lo) alts.push_back("");
    if (count < most)
      for (size_t i = 0; i < k; ++i) {
        if (used & (1u << i)) continue;
        Expr rest = self(self, used | (1u << i));
        if (rest) alts.push_back(seq({sep(), literals[i], *rest}));
      }
    Expr body = alternatives(alts);
    if (body && body->find(' ') != std::string::npos)
      body = add_rule(path + "-unique-" + std::to_string(used), *body);
    memo[used] = body;
    return body;
  };
  std::vector<std::string> first;
  if (lo == 0) first.push_back("");
  if (most > 0)
    for (size_t i = 0; i < k; ++i)
      if (Expr rest = after(after, 1u << i)) first.push_back(seq({literals[i], *rest}));
  Expr body = alternatives(first);
  if (!body) return Expr();
  return Expr(add_rule(path + "-unique", seq({"\"[\"", ws(), body->empty() ? "" : "(" + *body + ")", ws(), "\"]\""})));
}

}  // namespace pagoda::structured::schema_detail
