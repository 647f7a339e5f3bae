// Writing regex trees and code point sets as GBNF text (llama.cpp dialect), over raw output
// characters or over characters as they appear JSON-escaped inside a string.
#include <cstdio>

#include "engine/structured/regex.h"

namespace pagoda::structured {

std::string utf8_encode(uint32_t cp) {
  std::string out;
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
  return out;
}

namespace {

std::string hex_escape(const char* prefix, unsigned value, int digits) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%s%0*X", prefix, digits, value);
  return buf;
}

// One code point inside [...]: letters, digits and harmless punctuation as themselves; the
// class syntax characters (\ ] [ ^ - ") and non-printables as \xHH / \uHHHH escapes, which
// every GBNF reader accepts (some reject \- or \^).
std::string class_char(uint32_t cp) {
  bool plain = (cp >= 0x20 && cp < 0x7F) && cp != '\\' && cp != ']' && cp != '[' &&
               cp != '^' && cp != '-' && cp != '"';
  if (plain) return std::string(1, char(cp));
  if (cp < 0x80) return hex_escape("\\x", cp, 2);
  if (cp <= 0xFFFF) return hex_escape("\\u", cp, 4);
  return utf8_encode(cp);  // no \U in the dialect: the character itself
}

const CodepointSet& surrogates() {
  static const CodepointSet set = CodepointSet::range(0xD800, 0xDFFF);
  return set;
}

struct Emitted {
  std::string text;
  bool atomic = true;   // usable before a quantifier without parentheses
  bool empty = false;   // matches only the empty string
};

}  // namespace

std::string gbnf_literal(std::string_view bytes) {
  std::string out = "\"";
  for (char ch : bytes) {
    unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20 || c == 0x7F) out += hex_escape("\\x", c, 2);
        else out += char(c);
    }
  }
  return out + "\"";
}

std::string gbnf_class(const CodepointSet& input) {
  CodepointSet set = input.minus(surrogates());
  if (set.empty()) return "";
  if (set.count() == 1) return gbnf_literal(utf8_encode(set.ranges()[0].first));
  // A negated class is shorter when the set is most of Unicode. The complement then leaves
  // surrogates out of the listing (they never occur in UTF-8 text).
  CodepointSet excluded = set.complement().minus(surrogates());
  bool negate = !excluded.empty() && excluded.ranges().size() < set.ranges().size();
  const CodepointSet& listed = negate ? excluded : set;
  std::string out = negate ? "[^" : "[";
  for (const auto& [lo, hi] : listed.ranges()) {
    out += class_char(lo);
    if (hi > lo) {
      if (hi > lo + 1) out += '-';
      out += class_char(hi);
    }
  }
  return out + "]";
}

std::string gbnf_json_string_char(const CodepointSet& set) {
  CodepointSet needs_escape = CodepointSet::range(0, 0x1F);
  needs_escape.add('"', '"');
  needs_escape.add('\\', '\\');
  std::vector<std::string> parts;
  std::string plain = gbnf_class(set.minus(needs_escape));
  if (!plain.empty()) parts.push_back(plain);
  if (set.contains('"')) parts.push_back(gbnf_literal("\\\""));
  if (set.contains('\\')) parts.push_back(gbnf_literal("\\\\"));
  CodepointSet controls = set.intersect(CodepointSet::range(0, 0x1F));
  if (controls.count() == 32) {
    parts.push_back("\"\\\\\" [bfnrt]");
    parts.push_back("\"\\\\u00\" [01] [0-9a-fA-F]");
  } else {
    for (const auto& [lo, hi] : controls.ranges()) {
      for (uint32_t cp = lo; cp <= hi; ++cp) {
        switch (cp) {
          case '\b': parts.push_back(gbnf_literal("\\b")); break;
          case '\f': parts.push_back(gbnf_literal("\\f")); break;
          case '\n': parts.push_back(gbnf_literal("\\n")); break;
          case '\r': parts.push_back(gbnf_literal("\\r")); break;
          case '\t': parts.push_back(gbnf_literal("\\t")); break;
          default: {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", cp);
            parts.push_back(gbnf_literal(buf));
          }
        }
      }
    }
  }
  if (parts.empty()) return "";
  if (parts.size() == 1) return parts[0];
  std::string out = "(";
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? " | " : " ") + parts[i];
  return out + " )";
}

namespace {

Emitted emit(const RegexNode& node, RegexTarget target, int depth) {
  using Kind = RegexNode::Kind;
  if (depth > 200) throw RegexError("pattern nested too deeply", 0);
  switch (node.kind) {
    case Kind::Empty: return {"\"\"", true, true};
    case Kind::LineStart: case Kind::LineEnd:
      throw RegexError("anchors ^ and $ are only supported at the start and end of the pattern", 0);
    case Kind::Chars: {
      std::string text = target == RegexTarget::RawBytes ? gbnf_class(node.chars)
                                                         : gbnf_json_string_char(node.chars);
      if (text.empty()) throw RegexError("character class that matches nothing", 0);
      return {text, true, false};
    }
    case Kind::Concat: {
      std::string text;
      size_t parts = 0;
      for (const auto& child : node.children) {
        Emitted e = emit(child, target, depth + 1);
        if (e.empty) continue;
        if (parts++) text += ' ';
        text += e.atomic ? e.text : std::string("(") + e.text + ")";
      }
      if (parts == 0) return {"\"\"", true, true};
      return {text, parts == 1, false};
    }
    case Kind::Alternation: {
      std::string text;
      bool has_empty = false;
      size_t parts = 0;
      for (const auto& child : node.children) {
        Emitted e = emit(child, target, depth + 1);
        if (e.empty) { has_empty = true; continue; }
        text += parts++ ? " | " : "";
        text += e.text;
      }
      if (parts == 0) return {"\"\"", true, true};
      return {std::string("(") + text + ")" + (has_empty ? "?" : ""), true, false};
    }
    case Kind::Repeat: {
      Emitted inner = emit(node.children[0], target, depth + 1);
      if (inner.empty || (node.max && *node.max == 0)) return {"\"\"", true, true};
      std::string base = inner.atomic ? inner.text : std::string("(") + inner.text + ")";
      std::string quant;
      if (node.min == 0 && !node.max) quant = "*";
      else if (node.min == 1 && !node.max) quant = "+";
      else if (node.min == 0 && node.max && *node.max == 1) quant = "?";
      else if (node.min == 1 && node.max && *node.max == 1) return inner;
      else {
        quant = std::string("{") + std::to_string(node.min);
        if (!node.max) quant += ",";
        else if (*node.max != node.min) quant.append(",").append(std::to_string(*node.max));
        quant += "}";
      }
      // Parenthesize so a following quantifier cannot stack onto this one.
      return {std::string("(") + base + quant + ")", true, false};
    }
  }
  return {"\"\"", true, true};
}

// Removes leading ^ and trailing $ from one top-level branch.
AnchoredBranch strip_branch(const RegexNode& branch) {
  using Kind = RegexNode::Kind;
  AnchoredBranch out;
  std::vector<RegexNode> items;
  if (branch.kind == Kind::Concat) items = branch.children;
  else items.push_back(branch);
  size_t begin = 0, end = items.size();
  while (begin < end && items[begin].kind == Kind::LineStart) out.anchored_start = true, ++begin;
  while (end > begin && items[end - 1].kind == Kind::LineEnd) out.anchored_end = true, --end;
  RegexNode body;
  body.kind = Kind::Concat;
  body.children.assign(items.begin() + long(begin), items.begin() + long(end));
  out.body = std::move(body);
  return out;
}

}  // namespace

std::string regex_tree_to_gbnf(const RegexNode& node, RegexTarget target) {
  return emit(node, target, 0).text;
}

std::vector<AnchoredBranch> split_anchors(const RegexNode& root) {
  std::vector<AnchoredBranch> out;
  if (root.kind == RegexNode::Kind::Alternation) {
    for (const auto& child : root.children) out.push_back(strip_branch(child));
  } else {
    out.push_back(strip_branch(root));
  }
  return out;
}

std::string regex_to_gbnf(std::string_view pattern) {
  RegexNode tree = parse_regex(pattern);
  if (regex_expanded_size(tree) > kMaxRegexExpandedSize)
    throw RegexError("pattern too large once its repetitions are expanded", 0);
  std::string body;
  bool any_empty = false;
  size_t parts = 0;
  for (const auto& branch : split_anchors(tree)) {
    Emitted e = emit(branch.body, RegexTarget::RawBytes, 0);
    if (e.empty) { any_empty = true; continue; }
    body += parts++ ? " | " : "";
    body += e.atomic ? e.text : std::string("(") + e.text + ")";
  }
  std::string root;
  if (parts == 0) root = "\"\"";
  else if (any_empty) root = std::string("(") + body + ")?";
  else root = body;
  return "root ::= " + root + "\n";
}

}  // namespace pagoda::structured
