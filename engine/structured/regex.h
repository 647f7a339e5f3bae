// Regular expressions (the ECMA-262 subset JSON Schema `pattern` and `--regex` users write) parsed
// into a small syntax tree, and that tree written as GBNF text: either over raw output bytes
// (regex_to_gbnf, the whole output must match) or over the characters inside a JSON string,
// where each character is written as its JSON escape when it needs one (JSON Schema `pattern`).
// Also the code point sets and GBNF quoting helpers the JSON Schema converter shares.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pagoda::structured {

// A regex the parser does not accept (syntax error or an unsupported construct such as a
// lookahead or backreference). `offset` is the byte offset in the pattern.
struct RegexError : std::runtime_error {
  RegexError(const std::string& message, size_t offset)
      : std::runtime_error(message), offset(offset) {}
  size_t offset;
};

inline constexpr uint32_t kMaxCodepoint = 0x10FFFF;

// A set of Unicode code points as sorted, disjoint, non-adjacent inclusive ranges.
class CodepointSet {
 public:
  CodepointSet() = default;
  static CodepointSet of(uint32_t cp) { return range(cp, cp); }
  static CodepointSet range(uint32_t lo, uint32_t hi);
  static CodepointSet all() { return range(0, kMaxCodepoint); }

  void add(uint32_t lo, uint32_t hi);
  void add(const CodepointSet& other);
  CodepointSet complement() const;
  CodepointSet minus(const CodepointSet& other) const;
  CodepointSet intersect(const CodepointSet& other) const;
  bool contains(uint32_t cp) const;
  bool empty() const { return ranges_.empty(); }
  uint64_t count() const;
  const std::vector<std::pair<uint32_t, uint32_t>>& ranges() const { return ranges_; }
  bool operator==(const CodepointSet& other) const { return ranges_ == other.ranges_; }

 private:
  std::vector<std::pair<uint32_t, uint32_t>> ranges_;
};

// Parsed regex. Anchors are kept as nodes; the writers decide where they are allowed.
struct RegexNode {
  enum class Kind { Empty, Chars, Concat, Alternation, Repeat, LineStart, LineEnd };
  Kind kind = Kind::Empty;
  CodepointSet chars;               // Chars
  std::vector<RegexNode> children;  // Concat, Alternation, Repeat (one child)
  uint32_t min = 0;                 // Repeat
  std::optional<uint32_t> max;      // Repeat; nullopt = unbounded
};

// What \d \w \s (and \D \W \S, `.`) match. Ecma: ECMA-262. JSON Schema validators differ
// (Python's `re` reads them over Unicode, `.` there only stops at \n): Narrow is what both
// match (for strings a pattern must match), Wide what either matches (for strings a pattern
// must not match; there `$` also matches before a final newline, as in Python), so the output
// passes either validator.
enum class RegexClasses { Ecma, Narrow, Wide };

// Parses `pattern` (UTF-8). Throws RegexError. Quantifier counts above `max_count` are refused
// (they would expand to huge grammars).
RegexNode parse_regex(std::string_view pattern, uint32_t max_count = 10000,
                      RegexClasses classes = RegexClasses::Ecma);

// Shortest and longest match length in code points (longest nullopt when unbounded).
std::pair<uint64_t, std::optional<uint64_t>> regex_length_range(const RegexNode& node);

// A sub-language of `node` whose strings have at most `max_length` code points (every string
// of the result is one of `node`'s), keeping strings of every part where the budget allows
// (regex_shorten.cpp); nullopt when no string of `node` is that short.
std::optional<RegexNode> regex_within_length(const RegexNode& node, uint64_t max_length);

// Grammar elements the tree grows to once every {m,n} is expanded (saturates at 2^40): regex
// users must not be able to make a small pattern compile into a huge grammar.
uint64_t regex_expanded_size(const RegexNode& node);
inline constexpr uint64_t kMaxRegexExpandedSize = 200000;

// ---- GBNF text helpers ------------------------------------------------------------------

// `"..."` literal matching exactly these bytes (UTF-8 passes through, controls escaped).
std::string gbnf_literal(std::string_view bytes);
// `[...]` class matching one code point of `set` (surrogates dropped); "" when set is empty.
std::string gbnf_class(const CodepointSet& set);
// One character of `set` as it appears inside a JSON string: unescaped where JSON allows it,
// else its escape (\" \\ \n ... or \u00XX, lowercase hex as serializers write it). "" if empty.
std::string gbnf_json_string_char(const CodepointSet& set);
// UTF-8 encoding of one code point.
std::string utf8_encode(uint32_t cp);

// How regex_to_gbnf / the JSON Schema converter write a regex tree.
enum class RegexTarget { RawBytes, JsonStringContent };

// The regex as a GBNF expression (no rule names needed). Anchors must already have been
// removed from the ends (see split_anchors); any left inside throw RegexError.
std::string regex_tree_to_gbnf(const RegexNode& node, RegexTarget target);

// Top-level alternatives with their own anchoring: a pattern like `^a|b$` is split into
// {a, anchored start}, {b, anchored end}. Anchors elsewhere throw RegexError.
struct AnchoredBranch {
  RegexNode body;
  bool anchored_start = false;
  bool anchored_end = false;
};
std::vector<AnchoredBranch> split_anchors(const RegexNode& root);

// Whole-output regex (`--regex`, guided_regex): the output must match the pattern entirely, as
// if wrapped in ^(?:...)$. Returns a complete grammar whose start rule is `root`.
// Throws RegexError (also when the expanded pattern exceeds kMaxRegexExpandedSize).
std::string regex_to_gbnf(std::string_view pattern);

}  // namespace pagoda::structured
