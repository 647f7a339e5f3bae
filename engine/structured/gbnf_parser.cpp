// GBNF text -> Grammar IR. llama.cpp's dialect:
//   name ::= alternatives          (names [a-zA-Z0-9_-]+; one rule per line)
//   "literal" with \n \r \t \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH escapes (values are code points)
//   [a-z_] [^"\\] character classes, `.` any code point, ( ) groups, | alternation,
//   postfix * + ? {m} {m,} {m,n} {,n}, # comments to end of line.
// A rule ends at the end of its line, except inside ( ) and after | or ::=; as a superset of
// llama.cpp, a following line starting with | also continues the rule.
#include <cstring>
#include <unordered_map>

#include "engine/structured/grammar_ir.h"

namespace pagoda::structured {

std::string source_location(uint32_t line, uint32_t column) {
  return "line " + std::to_string(line) + ", column " + std::to_string(column) + ": ";
}

namespace {

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

class GbnfParser {
 public:
  GbnfParser(std::string_view text, const GrammarLimits& limits) : text_(text), limits_(limits) {}

  Grammar parse(std::string_view start_rule) {
    if (text_.size() > limits_.max_text_bytes)
      throw GrammarError("grammar text is " + std::to_string(text_.size()) +
                         " bytes, more than the limit of " +
                         std::to_string(limits_.max_text_bytes));
    skip_space(true);
    while (pos_ < text_.size()) {
      parse_rule();
      skip_space(true);
    }
    bool any_defined = false;
    for (const GrammarRule& r : grammar_.rules) any_defined = any_defined || r.defined;
    if (!any_defined) throw GrammarError("empty grammar: no rule is defined");
    for (const GrammarRule& r : grammar_.rules)
      if (!r.defined)
        throw GrammarError(source_location(r.line, r.column) + "undefined rule '" + r.name + "'");
    auto it = index_.find(std::string(start_rule));
    if (it == index_.end())
      throw GrammarError("the grammar has no start rule '" + std::string(start_rule) + "'");
    grammar_.start = it->second;
    return std::move(grammar_);
  }

 private:
  [[noreturn]] void fail(const std::string& problem) const { fail_at(pos_, problem); }
  [[noreturn]] void fail_at(size_t at, const std::string& problem) const {
    uint32_t line, column;
    location(at, line, column);
    throw GrammarError(source_location(line, column) + problem);
  }
  // 1-based line and column (in code points) of byte offset `at`. Offsets are asked for mostly
  // in increasing order, so the scan resumes from the last answer (from the start only when
  // asked for an earlier one): a scan from the start each time made parsing quadratic in the
  // grammar's size (seconds for a schema of a few thousand properties).
  void location(size_t at, uint32_t& line, uint32_t& column) const {
    if (at < loc_at_) loc_at_ = 0, loc_line_ = 1, loc_column_ = 1;
    for (; loc_at_ < at && loc_at_ < text_.size(); ++loc_at_) {
      const char c = text_[loc_at_];
      if (c == '\n') {
        ++loc_line_;
        loc_column_ = 1;
      } else if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) {
        ++loc_column_;
      }
    }
    line = loc_line_;
    column = loc_column_;
  }
  mutable size_t loc_at_ = 0;  // location()'s last offset and its line and column
  mutable uint32_t loc_line_ = 1, loc_column_ = 1;

  bool at_end() const { return pos_ >= text_.size(); }
  char peek(size_t ahead = 0) const {
    return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0';
  }

  // Skips blanks and comments; newlines too when `newlines`.
  void skip_space(bool newlines) {
    while (pos_ < text_.size()) {
      char c = text_[pos_];
      if (c == ' ' || c == '\t' || (newlines && (c == '\n' || c == '\r'))) {
        ++pos_;
      } else if (c == '#') {
        while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  // After a top-level sequence at a line end: true (and positioned at '|') when the next
  // non-blank line starts with '|'.
  bool continues_on_next_line() {
    size_t saved = pos_;
    skip_space(true);
    if (peek() == '|') return true;
    pos_ = saved;
    return false;
  }

  std::string parse_name() {
    size_t start = pos_;
    while (pos_ < text_.size() && is_name_char(text_[pos_])) ++pos_;
    if (pos_ == start) fail("expected a rule name");
    return std::string(text_.substr(start, pos_ - start));
  }

  uint32_t rule_index(const std::string& name, size_t at) {
    auto it = index_.find(name);
    if (it != index_.end()) return it->second;
    if (grammar_.rules.size() >= limits_.max_rules)
      fail_at(at, "more than " + std::to_string(limits_.max_rules) + " rules");
    GrammarRule r;
    r.name = name;
    location(at, r.line, r.column);
    grammar_.rules.push_back(std::move(r));
    uint32_t id = static_cast<uint32_t>(grammar_.rules.size() - 1);
    index_.emplace(name, id);
    return id;
  }

  void parse_rule() {
    size_t name_at = pos_;
    std::string name = parse_name();
    skip_space(false);
    if (text_.substr(pos_, 3) != "::=") fail("expected '::=' after rule name '" + name + "'");
    pos_ += 3;
    skip_space(true);
    uint32_t id = rule_index(name, name_at);
    if (grammar_.rules[id].defined) fail_at(name_at, "rule '" + name + "' is defined twice");
    uint32_t line, column;
    location(name_at, line, column);
    Expr body = parse_alternates(/*nested=*/false, 0);
    GrammarRule& r = grammar_.rules[id];
    r.defined = true;
    r.body = std::move(body);
    r.line = line;
    r.column = column;
    // The rule must end here: end of line or of text.
    skip_space(false);
    if (!at_end() && peek() != '\n' && peek() != '\r')
      fail(std::string("unexpected '") + peek() + "' after rule '" + name + "'");
  }

  Expr parse_alternates(bool nested, size_t depth) {
    Expr alt;
    alt.kind = Expr::Kind::Alternation;
    location(pos_, alt.line, alt.column);
    alt.children.push_back(parse_sequence(nested, depth));
    for (size_t guard = 0; guard < text_.size() + 1; ++guard) {
      if (peek() != '|' && !(!nested && (peek() == '\n' || peek() == '\r') && continues_on_next_line()))
        break;
      ++pos_;  // '|'
      skip_space(true);
      alt.children.push_back(parse_sequence(nested, depth));
    }
    if (alt.children.size() == 1) return std::move(alt.children[0]);
    return alt;
  }

  Expr parse_sequence(bool nested, size_t depth) {
    Expr seq;
    seq.kind = Expr::Kind::Sequence;
    location(pos_, seq.line, seq.column);
    for (size_t guard = 0; guard < text_.size() + 1; ++guard) {
      skip_space(nested);
      if (at_end()) break;
      char c = peek();
      if (c == '|' || c == ')' || c == '\n' || c == '\r') break;
      size_t item_at = pos_;
      uint32_t item_line, item_column;  // taken before the item moves the scan past it
      location(item_at, item_line, item_column);
      Expr item;
      if (c == '"') {
        item = parse_literal();
      } else if (c == '[') {
        item = parse_class();
      } else if (c == '.') {
        item.kind = Expr::Kind::CharClass;
        item.negated = true;
        ++pos_;
      } else if (c == '(') {
        if (depth + 1 > limits_.max_nesting)
          fail("groups nested deeper than " + std::to_string(limits_.max_nesting));
        ++pos_;
        skip_space(true);
        item = parse_alternates(/*nested=*/true, depth + 1);
        skip_space(true);
        if (peek() != ')') {
          if (at_end()) fail_at(item_at, "unbalanced parenthesis: '(' is never closed");
          fail_at(item_at, std::string("unbalanced parenthesis: '(' is not closed before '") +
                               peek() + "'");
        }
        ++pos_;
      } else if (is_name_char(c)) {
        size_t name_at = pos_;
        std::string name = parse_name();
        size_t after = pos_;
        skip_space(false);
        if (text_.substr(pos_, 3) == "::=") {
          if (nested) fail_at(name_at, "unbalanced parenthesis: a '(' is not closed before rule '" + name + "'");
          fail_at(name_at, "rule '" + name + "' must start on a new line");
        }
        pos_ = after;
        item.kind = Expr::Kind::RuleRef;
        item.rule = rule_index(name, name_at);
      } else if (c == '<') {
        fail("token references (<...>) are not supported");
      } else {
        fail(std::string("unexpected character '") + c + "'");
      }
      item.line = item_line;
      item.column = item_column;
      item = parse_postfix(std::move(item));
      seq.children.push_back(std::move(item));
    }
    if (seq.children.size() == 1) return std::move(seq.children[0]);
    return seq;
  }

  uint32_t parse_count() {
    size_t start = pos_;
    uint64_t v = 0;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      v = v * 10 + static_cast<uint64_t>(text_[pos_] - '0');
      if (v > limits_.max_repeat_count)
        fail_at(start, "repetition count above the limit of " +
                           std::to_string(limits_.max_repeat_count));
      ++pos_;
    }
    return static_cast<uint32_t>(v);
  }

  Expr parse_postfix(Expr item) {
    for (size_t guard = 0; guard < text_.size() + 1; ++guard) {
      char c = peek();
      uint32_t lo = 0, hi = 0;
      size_t op_at = pos_;
      if (c == '*') {
        lo = 0, hi = kUnbounded, ++pos_;
      } else if (c == '+') {
        lo = 1, hi = kUnbounded, ++pos_;
      } else if (c == '?') {
        lo = 0, hi = 1, ++pos_;
      } else if (c == '{') {
        ++pos_;
        skip_space(false);
        bool has_lo = peek() >= '0' && peek() <= '9';
        lo = has_lo ? parse_count() : 0;
        skip_space(false);
        if (peek() == '}') {
          if (!has_lo) fail_at(op_at, "empty repetition '{}'");
          hi = lo;
        } else if (peek() == ',') {
          ++pos_;
          skip_space(false);
          if (peek() >= '0' && peek() <= '9') {
            hi = parse_count();
            if (hi < lo) fail_at(op_at, "repetition {m,n} with n < m");
          } else {
            if (!has_lo) fail_at(op_at, "repetition '{,}' needs a bound");
            hi = kUnbounded;
          }
          skip_space(false);
        } else {
          fail("expected a number, ',' or '}' in repetition");
        }
        if (peek() != '}') fail("expected '}' to close the repetition");
        ++pos_;
      } else {
        return item;
      }
      Expr rep;
      rep.kind = Expr::Kind::Repeat;
      rep.min_count = lo;
      rep.max_count = hi;
      rep.line = item.line;
      rep.column = item.column;
      rep.children.push_back(std::move(item));
      item = std::move(rep);
    }
    return item;
  }

  // One UTF-8 code point from the source text.
  uint32_t decode_utf8() {
    auto b0 = static_cast<unsigned char>(text_[pos_]);
    int n = b0 < 0x80 ? 0 : (b0 >> 5) == 6 ? 1 : (b0 >> 4) == 14 ? 2 : (b0 >> 3) == 30 ? 3 : -1;
    if (n < 0) fail("invalid UTF-8 in grammar text");
    uint32_t cp = n == 0 ? b0 : n == 1 ? (b0 & 0x1F) : n == 2 ? (b0 & 0x0F) : (b0 & 0x07);
    for (int i = 1; i <= n; ++i) {
      if (pos_ + i >= text_.size()) fail("truncated UTF-8 in grammar text");
      auto b = static_cast<unsigned char>(text_[pos_ + i]);
      if ((b & 0xC0) != 0x80) fail("invalid UTF-8 in grammar text");
      cp = (cp << 6) | (b & 0x3F);
    }
    pos_ += static_cast<size_t>(n) + 1;
    return cp;
  }

  uint32_t parse_hex(size_t digits, size_t esc_at) {
    uint32_t v = 0;
    for (size_t i = 0; i < digits; ++i) {
      char c = peek();
      uint32_t d;
      if (c >= '0' && c <= '9') d = static_cast<uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f') d = static_cast<uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') d = static_cast<uint32_t>(c - 'A' + 10);
      else fail_at(esc_at, "bad escape: expected " + std::to_string(digits) + " hex digits");
      v = v * 16 + d;
      ++pos_;
    }
    if (v > kMaxCodepoint) fail_at(esc_at, "bad escape: code point above U+10FFFF");
    return v;
  }

  // One character of a literal or class, escapes decoded.
  uint32_t parse_char() {
    if (at_end()) fail("unterminated literal or class");
    if (peek() != '\\') return decode_utf8();
    size_t esc_at = pos_;
    ++pos_;
    char e = peek();
    ++pos_;
    switch (e) {
      case 'n': return '\n';
      case 'r': return '\r';
      case 't': return '\t';
      case '\\': return '\\';
      case '"': return '"';
      case '[': return '[';
      case ']': return ']';
      case '-': return '-';
      case '^': return '^';
      case '/': return '/';
      case '\'': return '\'';
      case 'x': return parse_hex(2, esc_at);
      case 'u': return parse_hex(4, esc_at);
      case 'U': return parse_hex(8, esc_at);
      default: break;
    }
    if (e == '\0') fail_at(esc_at, "bad escape at end of text");
    fail_at(esc_at, std::string("bad escape '\\") + e + "'");
  }

  Expr parse_literal() {
    size_t start = pos_;
    ++pos_;  // '"'
    Expr lit;
    lit.kind = Expr::Kind::Literal;
    for (size_t guard = 0; guard < text_.size() + 1; ++guard) {
      if (at_end() || peek() == '\n') fail_at(start, "unterminated string literal");
      if (peek() == '"') {
        ++pos_;
        return lit;
      }
      lit.codepoints.push_back(parse_char());
    }
    fail_at(start, "unterminated string literal");
  }

  Expr parse_class() {
    size_t start = pos_;
    ++pos_;  // '['
    Expr cls;
    cls.kind = Expr::Kind::CharClass;
    if (peek() == '^') {
      cls.negated = true;
      ++pos_;
    }
    for (size_t guard = 0; guard < text_.size() + 1; ++guard) {
      if (at_end() || peek() == '\n') fail_at(start, "unterminated character class '['");
      if (peek() == ']') {
        ++pos_;
        return cls;
      }
      uint32_t lo = parse_char();
      uint32_t hi = lo;
      if (peek() == '-' && peek(1) != ']' && pos_ + 1 < text_.size()) {
        size_t range_at = pos_;
        ++pos_;
        hi = parse_char();
        if (hi < lo) fail_at(range_at, "character range with end before start");
      }
      cls.ranges.push_back({lo, hi});
    }
    fail_at(start, "unterminated character class '['");
  }

  std::string_view text_;
  const GrammarLimits& limits_;
  size_t pos_ = 0;
  Grammar grammar_;
  std::unordered_map<std::string, uint32_t> index_;
};

}  // namespace

Grammar parse_gbnf(std::string_view text, const GrammarLimits& limits, std::string_view start_rule) {
  GbnfParser parser(text, limits);
  return parser.parse(start_rule);
}

}  // namespace pagoda::structured
