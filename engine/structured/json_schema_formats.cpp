// JSON Schema string formats: date, time, date-time (RFC 3339), uuid, hostname, email, ipv4,
// uri, each defined once, as a regex over the characters inside the quotes. Alone, a format is
// written as that regex's GBNF; beside a pattern, length bounds or `not` exclusions, as its
// code point automaton (regex_dfa.h), intersected with theirs (beside a maxLength too large
// for the exact product, the format's strings within it: regex_within_length, a subset). Each is a strict subset of what
// the format allows (e.g. no leap seconds, no quoted e-mail local parts, URIs with an
// authority), so whatever is generated validates.
#include <string_view>

#include "engine/structured/json_schema_internal.h"
#include "engine/structured/regex_dfa.h"

namespace pagoda::structured::schema_detail {

namespace {

// Joins regex pieces (appends, rather than a chain of operator+).
std::string cat(std::initializer_list<std::string_view> pieces) {
  std::string out;
  for (std::string_view p : pieces) out.append(p);
  return out;
}

// Pieces shared by several formats (no JSON escape is needed by any of their characters).
constexpr std::string_view kDate =
    "([0-9]{4}-((01|03|05|07|08|10|12)-(0[1-9]|1[0-9]|2[0-9]|3[01])"
    "|(04|06|09|11)-(0[1-9]|1[0-9]|2[0-9]|30)"
    "|02-(0[1-9]|1[0-9]|2[0-8]))"
    // Leap years: divisible by 4 and not by 100, or by 400.
    "|([0-9][0-9](0[48]|[2468][048]|[13579][26])|([02468][048]|[13579][26])00)-02-29)";
// RFC 3339 full-time; leap seconds (:60) left out.
constexpr std::string_view kTime =
    "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,9})?(Z|[+\\-]([01][0-9]|2[0-3]):[0-5][0-9])";
constexpr std::string_view kHex = "[0-9a-fA-F]";
// Labels of at most 63 characters, at most 4 of them (total under 253).
constexpr std::string_view kLabel = "[a-zA-Z0-9]([a-zA-Z0-9\\-]{0,61}[a-zA-Z0-9])?";
constexpr std::string_view kAtom = "[a-zA-Z0-9!#$%&'*+/=?^_`{|}~\\-]+";
constexpr std::string_view kOctet = "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])";

struct Format {
  const char* name;
  std::string regex;  // the whole string content must match
};

const std::vector<Format>& formats() {
  static const std::vector<Format> list = [] {
    const std::string hostname = cat({kLabel, "(\\.", kLabel, "){0,3}"});
    // RFC 3986 path characters (none needs an escape in JSON).
    const std::string pchar = cat({"([a-zA-Z0-9._~!$&'()*+,;=:@\\-]|%", kHex, kHex, ")"});
    return std::vector<Format>{
        {"date", std::string(kDate)},
        {"time", std::string(kTime)},
        {"date-time", cat({kDate, "T", kTime})},
        {"uuid", cat({kHex, "{8}-", kHex, "{4}-", kHex, "{4}-", kHex, "{4}-", kHex, "{12}"})},
        {"hostname", hostname},
        {"email", cat({kAtom, "(\\.", kAtom, ")*@", hostname})},
        {"ipv4", cat({kOctet, "(\\.", kOctet, "){3}"})},
        // scheme://host[:port]/path?query#fragment
        {"uri", cat({"[a-zA-Z][a-zA-Z0-9+.\\-]*://", hostname, "(:[0-9]{1,5})?(/", pchar, "*)*(\\?(", pchar,
                     "|[/?])*)?(#(", pchar, "|[/?])*)?"})},
    };
  }();
  return list;
}

const Format* find_format(const std::string& name) {
  for (const auto& f : formats())
    if (name == f.name) return &f;
  return nullptr;
}

}  // namespace

std::optional<SchemaConverter::FormatRule> SchemaConverter::format_rule(const std::string& name) {
  const Format* format = find_format(name);
  if (!format) return std::nullopt;
  RegexNode tree = parse_regex(format->regex, options_.max_repeat, RegexClasses::Narrow);
  auto [min_len, max_len] = regex_length_range(tree);
  std::string rule = cat({"fmt-", name});
  if (primitives_.insert(rule).second) {
    used_names_.insert(rule);
    std::string body = regex_tree_to_gbnf(tree, RegexTarget::JsonStringContent);
    rules_.emplace_back(rule, body);
    grammar_bytes_ += rule.size() + body.size() + 6;
  }
  return FormatRule{rule, min_len, max_len};
}

std::optional<std::string> SchemaConverter::format_within(const std::string& name, uint64_t max_len,
                                                          uint64_t min_len) {
  const Format* format = find_format(name);
  if (!format) return std::nullopt;
  std::optional<RegexNode> tree =
      regex_within_length(parse_regex(format->regex, options_.max_repeat, RegexClasses::Narrow), max_len);
  if (!tree || regex_length_range(*tree).first < min_len) return std::nullopt;
  // Counted repeats: charged like any other (they are lowered as binary counters).
  charge_repeat(max_len, "x", "/maxLength");
  return cat({"(", regex_tree_to_gbnf(*tree, RegexTarget::JsonStringContent), ")"});
}

std::optional<CharDfa> SchemaConverter::format_dfa(const std::string& name, const std::string& path,
                                                   std::optional<uint64_t> within) {
  const Format* format = find_format(name);
  if (!format) return std::nullopt;
  return checked([&] {
    RegexNode tree = parse_regex(format->regex, options_.max_repeat, RegexClasses::Narrow);
    if (within) {
      std::optional<RegexNode> shorter = regex_within_length(tree, *within);
      if (!shorter) return dfa_from_strings({});
      tree = std::move(*shorter);
    }
    return dfa_from_regex(tree, false);
  }, path);
}

}  // namespace pagoda::structured::schema_detail
