// ECMA-262 regex subset parser (recursive descent over code points) and measures of the tree.
// Code point sets are in regex_codepoints.cpp; writing GBNF text in regex_gbnf.cpp.
#include "engine/structured/regex.h"

#include <algorithm>

namespace pagoda::structured {

// ---- parser ----------------------------------------------------------------------------

namespace {

struct Codepoint {
  uint32_t value;
  size_t offset;  // byte offset in the pattern, for error messages
};

std::vector<Codepoint> decode_utf8(std::string_view text) {
  std::vector<Codepoint> out;
  size_t i = 0;
  while (i < text.size()) {
    unsigned char b = static_cast<unsigned char>(text[i]);
    uint32_t cp;
    size_t len;
    if (b < 0x80) { cp = b; len = 1; }
    else if ((b & 0xE0) == 0xC0) { cp = b & 0x1F; len = 2; }
    else if ((b & 0xF0) == 0xE0) { cp = b & 0x0F; len = 3; }
    else if ((b & 0xF8) == 0xF0) { cp = b & 0x07; len = 4; }
    else throw RegexError("pattern is not valid UTF-8", i);
    if (i + len > text.size()) throw RegexError("pattern is not valid UTF-8", i);
    for (size_t k = 1; k < len; ++k) {
      unsigned char c = static_cast<unsigned char>(text[i + k]);
      if ((c & 0xC0) != 0x80) throw RegexError("pattern is not valid UTF-8", i);
      cp = (cp << 6) | (c & 0x3F);
    }
    out.push_back({cp, i});
    i += len;
  }
  return out;
}

CodepointSet digit_set() { return CodepointSet::range('0', '9'); }

CodepointSet word_set() {
  CodepointSet s = CodepointSet::range('a', 'z');
  s.add('A', 'Z');
  s.add('0', '9');
  s.add('_', '_');
  return s;
}

// ECMA-262 WhiteSpace and LineTerminator.
CodepointSet space_set() {
  CodepointSet s = CodepointSet::range(0x09, 0x0D);
  for (uint32_t cp : {0x20u, 0xA0u, 0x1680u, 0x2028u, 0x2029u, 0x202Fu, 0x205Fu, 0x3000u, 0xFEFFu})
    s.add(cp, cp);
  s.add(0x2000, 0x200A);
  return s;
}

// `.` matches everything but line terminators.
CodepointSet dot_set() {
  CodepointSet terminators = CodepointSet::of('\n');
  terminators.add('\r', '\r');
  terminators.add(0x2028, 0x2029);
  return terminators.complement();
}

// The classes by RegexClasses mode (see regex.h). Narrow: what ECMA-262 and Python's
// Unicode-aware `re` both match; Wide: what either matches (non-ASCII taken whole where
// Python's Unicode tables would be needed).
CodepointSet class_set(char escape, RegexClasses mode) {
  CodepointSet non_ascii = CodepointSet::range(0x80, kMaxCodepoint);
  auto narrow_or_wide = [&](char e, bool wide) -> CodepointSet {
    CodepointSet s;
    if (e == 'd') {
      s = digit_set();
      if (wide) s.add(non_ascii);
    } else if (e == 'w') {
      s = word_set();
      if (wide) s.add(non_ascii);
    } else if (e == 's') {
      s = space_set();
      if (wide) s.add(0x1C, 0x1F), s.add(0x85, 0x85);  // Python's str.isspace() extras
      else s = s.minus(CodepointSet::of(0xFEFF));        // not a space to Python
    } else {  // '.'
      s = wide ? CodepointSet::of('\n').complement() : dot_set();
    }
    return s;
  };
  char lower = char(escape >= 'A' && escape <= 'Z' ? escape - 'A' + 'a' : escape);
  bool upper = lower != escape;
  if (mode == RegexClasses::Ecma) {
    CodepointSet s = lower == 'd' ? digit_set() : lower == 'w' ? word_set() : lower == 's' ? space_set() : dot_set();
    return upper ? s.complement() : s;
  }
  bool wide = mode == RegexClasses::Wide;
  // \D is the complement of \d: narrow \D = not (wide \d), and the other way round.
  return upper ? narrow_or_wide(lower, !wide).complement() : narrow_or_wide(lower, wide);
}

int hex_value(uint32_t c) {
  if (c >= '0' && c <= '9') return int(c - '0');
  if (c >= 'a' && c <= 'f') return int(c - 'a' + 10);
  if (c >= 'A' && c <= 'F') return int(c - 'A' + 10);
  return -1;
}

class RegexParser {
 public:
  RegexParser(std::string_view pattern, uint32_t max_count, RegexClasses classes)
      : cps_(decode_utf8(pattern)), end_offset_(pattern.size()), max_count_(max_count), classes_(classes) {}

  RegexNode parse() {
    RegexNode node = parse_alternation(0);
    if (pos_ < cps_.size()) fail("unmatched ')'");
    return node;
  }

 private:
  static constexpr int kMaxNesting = 100;

  [[noreturn]] void fail(const std::string& message) const {
    throw RegexError(message, pos_ < cps_.size() ? cps_[pos_].offset : end_offset_);
  }
  bool at_end() const { return pos_ >= cps_.size(); }
  uint32_t peek(size_t ahead = 0) const {
    return pos_ + ahead < cps_.size() ? cps_[pos_ + ahead].value : 0xFFFFFFFFu;
  }

  RegexNode parse_alternation(int depth) {
    if (depth > kMaxNesting) fail("groups nested too deeply");
    RegexNode first = parse_concat(depth);
    if (peek() != '|') return first;
    RegexNode alt;
    alt.kind = RegexNode::Kind::Alternation;
    alt.children.push_back(std::move(first));
    while (peek() == '|') {
      ++pos_;
      alt.children.push_back(parse_concat(depth));
    }
    return alt;
  }

  RegexNode parse_concat(int depth) {
    RegexNode concat;
    concat.kind = RegexNode::Kind::Concat;
    while (!at_end() && peek() != '|' && peek() != ')') {
      RegexNode atom = parse_atom(depth);
      concat.children.push_back(parse_quantifiers(std::move(atom)));
    }
    if (concat.children.empty()) return RegexNode{};
    if (concat.children.size() == 1) return std::move(concat.children[0]);
    return concat;
  }

  // Reads `{n}`, `{n,}` or `{n,m}` at pos_ when it is one; otherwise leaves pos_ (Annex B:
  // a `{` that does not start a quantifier is a literal).
  bool read_braces(uint32_t& min, std::optional<uint32_t>& max) {
    size_t save = pos_;
    ++pos_;
    auto read_number = [&](uint64_t& value) {
      size_t start = pos_;
      value = 0;
      while (!at_end() && peek() >= '0' && peek() <= '9') {
        value = std::min<uint64_t>(value * 10 + (peek() - '0'), uint64_t(1) << 40);
        ++pos_;
      }
      return pos_ > start;
    };
    uint64_t lo = 0, hi = 0;
    if (!read_number(lo)) { pos_ = save; return false; }
    bool has_comma = false, has_hi = false;
    if (peek() == ',') {
      has_comma = true;
      ++pos_;
      has_hi = read_number(hi);
    }
    if (peek() != '}') { pos_ = save; return false; }
    ++pos_;
    if (!has_comma) hi = lo, has_hi = true;
    if (lo > max_count_ || (has_hi && hi > max_count_))
      fail(std::string("repetition count above ") + std::to_string(max_count_));
    if (has_hi && hi < lo) fail("repetition {m,n} with n < m");
    min = uint32_t(lo);
    max = has_hi ? std::optional<uint32_t>(uint32_t(hi)) : std::nullopt;
    return true;
  }

  RegexNode parse_quantifiers(RegexNode atom) {
    for (int guard = 0; guard < 1000 && !at_end(); ++guard) {
      uint32_t c = peek();
      uint32_t min = 0;
      std::optional<uint32_t> max;
      if (c == '*') { ++pos_; min = 0; max = std::nullopt; }
      else if (c == '+') { ++pos_; min = 1; max = std::nullopt; }
      else if (c == '?') { ++pos_; min = 0; max = 1; }
      else if (c == '{') { if (!read_braces(min, max)) return atom; }
      else return atom;
      if (peek() == '?') ++pos_;  // lazy: same language
      if (atom.kind == RegexNode::Kind::LineStart || atom.kind == RegexNode::Kind::LineEnd)
        fail("quantifier on an anchor is not supported");
      RegexNode rep;
      rep.kind = RegexNode::Kind::Repeat;
      rep.min = min;
      rep.max = max;
      rep.children.push_back(std::move(atom));
      atom = std::move(rep);
    }
    return atom;
  }

  static RegexNode chars_node(CodepointSet set) {
    RegexNode n;
    n.kind = RegexNode::Kind::Chars;
    n.chars = std::move(set);
    return n;
  }

  RegexNode parse_atom(int depth) {
    uint32_t c = peek();
    switch (c) {
      case '(': return parse_group(depth);
      case '[': return chars_node(parse_class());
      case '.': ++pos_; return chars_node(class_set('.', classes_));
      case '^': { ++pos_; RegexNode n; n.kind = RegexNode::Kind::LineStart; return n; }
      case '$': {
        ++pos_;
        RegexNode end;
        end.kind = RegexNode::Kind::LineEnd;
        if (classes_ != RegexClasses::Wide) return end;
        // Python's `$` also matches before a final newline.
        RegexNode before;
        before.kind = RegexNode::Kind::Concat;
        before.children = {chars_node(CodepointSet::of('\n')), end};
        RegexNode either;
        either.kind = RegexNode::Kind::Alternation;
        either.children = {end, before};
        return either;
      }
      case '*': case '+': case '?': fail("quantifier with nothing to repeat");
      case '{': {
        uint32_t min; std::optional<uint32_t> max;
        size_t save = pos_;
        if (read_braces(min, max)) { pos_ = save; fail("quantifier with nothing to repeat"); }
        ++pos_;
        return chars_node(CodepointSet::of('{'));
      }
      case '\\': {
        ++pos_;
        return chars_node(parse_escape(/*in_class=*/false));
      }
      default: ++pos_; return chars_node(CodepointSet::of(c));
    }
  }

  RegexNode parse_group(int depth) {
    size_t open = pos_;
    ++pos_;  // (
    if (peek() == '?') {
      uint32_t kind = peek(1);
      if (kind == ':') {
        pos_ += 2;
      } else if (kind == '<' && peek(2) != '=' && peek(2) != '!') {
        pos_ += 2;  // named group: the name does not change the language
        for (int guard = 0; !at_end() && peek() != '>' && guard < 1000; ++guard) ++pos_;
        if (peek() != '>') fail("unterminated group name");
        ++pos_;
      } else {
        pos_ = open;
        fail("lookaround assertions are not supported");
      }
    }
    RegexNode inner = parse_alternation(depth + 1);
    if (peek() != ')') fail("missing ')'");
    ++pos_;
    return inner;
  }

  // After a backslash. In a class, \b is backspace; outside it is a word boundary.
  CodepointSet parse_escape(bool in_class) {
    if (at_end()) fail("pattern ends with '\\'");
    uint32_t c = peek();
    ++pos_;
    switch (c) {
      case 'd': case 'D': case 'w': case 'W': case 's': case 'S': return class_set(char(c), classes_);
      case 't': return CodepointSet::of('\t');
      case 'n': return CodepointSet::of('\n');
      case 'r': return CodepointSet::of('\r');
      case 'f': return CodepointSet::of('\f');
      case 'v': return CodepointSet::of('\v');
      case '0':
        if (peek() >= '0' && peek() <= '9') { --pos_; fail("octal escapes are not supported"); }
        return CodepointSet::of(0);
      case 'b':
        if (in_class) return CodepointSet::of('\b');
        --pos_;
        fail("word boundary \\b is not supported");
      case 'B': --pos_; fail("word boundary \\B is not supported");
      case 'c': {
        uint32_t letter = peek();
        if ((letter >= 'a' && letter <= 'z') || (letter >= 'A' && letter <= 'Z')) {
          ++pos_;
          return CodepointSet::of(letter % 32);
        }
        --pos_;
        fail("\\c must be followed by a letter");
      }
      case 'x': {
        int h1 = hex_value(peek()), h2 = hex_value(peek(1));
        if (h1 < 0 || h2 < 0) return CodepointSet::of('x');
        pos_ += 2;
        return CodepointSet::of(uint32_t(h1 * 16 + h2));
      }
      case 'u': {
        if (peek() == '{') {
          size_t save = pos_;
          ++pos_;
          uint32_t value = 0;
          int digits = 0;
          while (hex_value(peek()) >= 0 && digits < 8) value = value * 16 + hex_value(peek()), ++pos_, ++digits;
          if (digits > 0 && peek() == '}' && value <= kMaxCodepoint) { ++pos_; return CodepointSet::of(value); }
          pos_ = save;
          return CodepointSet::of('u');
        }
        uint32_t value = 0;
        for (int k = 0; k < 4; ++k) {
          int h = hex_value(peek(k));
          if (h < 0) return CodepointSet::of('u');
          value = value * 16 + uint32_t(h);
        }
        pos_ += 4;
        if (value >= 0xD800 && value <= 0xDBFF && peek() == '\\' && peek(1) == 'u') {
          uint32_t low = 0;
          bool ok = true;
          for (int k = 0; k < 4; ++k) {
            int h = hex_value(peek(2 + k));
            if (h < 0) { ok = false; break; }
            low = low * 16 + uint32_t(h);
          }
          if (ok && low >= 0xDC00 && low <= 0xDFFF) {
            pos_ += 6;
            return CodepointSet::of(0x10000 + ((value - 0xD800) << 10) + (low - 0xDC00));
          }
        }
        if (value >= 0xD800 && value <= 0xDFFF) { pos_ -= 6; fail("lone surrogate escape"); }
        return CodepointSet::of(value);
      }
      case 'p': case 'P': --pos_; fail("Unicode property escapes are not supported");
      case 'k': --pos_; fail("named backreferences are not supported");
      default:
        if (c >= '1' && c <= '9') {
          if (in_class) return CodepointSet::of(c);
          --pos_;
          fail("backreferences are not supported");
        }
        return CodepointSet::of(c);  // identity escape
    }
  }

  // After `[`: a class such as [^a-z\d_] (ranges between single characters only).
  CodepointSet parse_class() {
    ++pos_;  // [
    bool negated = false;
    if (peek() == '^') negated = true, ++pos_;
    // Under [^...] the escapes' sets are complemented: the other extreme keeps the result on
    // the same side.
    RegexClasses outer = classes_;
    if (negated && classes_ != RegexClasses::Ecma)
      classes_ = classes_ == RegexClasses::Narrow ? RegexClasses::Wide : RegexClasses::Narrow;
    struct Restore {
      RegexClasses& target;
      RegexClasses saved;
      ~Restore() { target = saved; }
    } restore{classes_, outer};
    CodepointSet set;
    for (int guard = 0; guard < 100000; ++guard) {
      if (at_end()) fail("missing ']'");
      if (peek() == ']') { ++pos_; return negated ? set.complement() : set; }
      CodepointSet first = class_atom();
      if (peek() == '-' && peek(1) != ']' && pos_ + 1 < cps_.size()) {
        ++pos_;  // -
        CodepointSet last = class_atom();
        if (first.count() != 1 || last.count() != 1) {
          // [\d-x] is a literal '-' between the two in Annex B; keep all three.
          set.add(first);
          set.add(last);
          set.add('-', '-');
          continue;
        }
        uint32_t lo = first.ranges()[0].first, hi = last.ranges()[0].first;
        if (lo > hi) fail("class range out of order");
        set.add(lo, hi);
      } else {
        set.add(first);
      }
    }
    fail("class too long");
  }

  CodepointSet class_atom() {
    uint32_t c = peek();
    ++pos_;
    if (c == '\\') {
      if (peek() == '-') { ++pos_; return CodepointSet::of('-'); }
      return parse_escape(/*in_class=*/true);
    }
    return CodepointSet::of(c);
  }

  std::vector<Codepoint> cps_;
  size_t end_offset_;
  uint32_t max_count_;
  RegexClasses classes_;
  size_t pos_ = 0;
};

}  // namespace

RegexNode parse_regex(std::string_view pattern, uint32_t max_count, RegexClasses classes) {
  return RegexParser(pattern, max_count, classes).parse();
}

uint64_t regex_expanded_size(const RegexNode& node) {
  constexpr uint64_t kCap = uint64_t(1) << 40;
  switch (node.kind) {
    case RegexNode::Kind::Concat:
    case RegexNode::Kind::Alternation: {
      uint64_t total = 0;
      for (const auto& child : node.children) total = std::min(kCap, total + regex_expanded_size(child));
      return total;
    }
    case RegexNode::Kind::Repeat: {
      uint64_t copies = std::max<uint64_t>(1, node.max ? *node.max : uint64_t(node.min) + 1);
      uint64_t inner = regex_expanded_size(node.children[0]);
      return inner > kCap / copies ? kCap : inner * copies;
    }
    default:
      return 1;
  }
}

std::pair<uint64_t, std::optional<uint64_t>> regex_length_range(const RegexNode& node) {
  using Kind = RegexNode::Kind;
  switch (node.kind) {
    case Kind::Empty: case Kind::LineStart: case Kind::LineEnd: return {0, 0};
    case Kind::Chars: return {1, 1};
    case Kind::Concat: {
      uint64_t lo = 0;
      std::optional<uint64_t> hi = 0;
      for (const auto& child : node.children) {
        auto [clo, chi] = regex_length_range(child);
        lo += clo;
        if (hi && chi) *hi += *chi; else hi = std::nullopt;
      }
      return {lo, hi};
    }
    case Kind::Alternation: {
      uint64_t lo = UINT64_MAX;
      std::optional<uint64_t> hi = 0;
      for (const auto& child : node.children) {
        auto [clo, chi] = regex_length_range(child);
        lo = std::min(lo, clo);
        if (hi && chi) hi = std::max(*hi, *chi); else hi = std::nullopt;
      }
      return {lo, hi};
    }
    case Kind::Repeat: {
      auto [clo, chi] = regex_length_range(node.children[0]);
      std::optional<uint64_t> hi;
      if (chi && node.max) hi = *chi * *node.max;
      if (chi && *chi == 0) hi = 0;
      return {clo * node.min, hi};
    }
  }
  return {0, 0};
}

}  // namespace pagoda::structured
