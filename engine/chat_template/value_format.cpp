// Printing values exactly as Python does: str(), repr() and json.dumps(ensure_ascii=False).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "engine/chat_template/value.h"

namespace pagoda::jinja {

std::string python_float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  // Shortest round-trip digits in scientific form: d[.ddd]e[+-]XX.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  size_t epos = sci.find('e');
  int exp = std::stoi(sci.substr(epos + 1));
  std::string digits;
  for (size_t k = 0; k < epos; ++k)
    if (sci[k] != '.') digits += sci[k];
  // Python's repr switches to exponent notation outside 1e-4 <= |v| < 1e16.
  if (exp < -4 || exp >= 16) {
    std::string out = sign + digits.substr(0, 1);
    if (digits.size() > 1) out.append(".").append(digits, 1, std::string::npos);
    char e[16];
    std::snprintf(e, sizeof e, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    return out + e;
  }
  std::string out;
  if (exp >= 0) {
    if (static_cast<int>(digits.size()) <= exp + 1) {
      out = digits + std::string(exp + 1 - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
    }
  } else {
    out = "0." + std::string(-exp - 1, '0') + digits;
  }
  return sign + out;
}

// Decodes one UTF-8 code point at s[k]; returns its length (1 for an invalid byte).
static size_t utf8_decode(const std::string& s, size_t k, uint32_t& cp) {
  unsigned char c = s[k];
  size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (n == 0 || k + n > s.size()) {
    cp = c;
    return 1;
  }
  cp = n == 1 ? c : n == 2 ? (c & 0x1f) : n == 3 ? (c & 0x0f) : (c & 0x07);
  for (size_t m = 1; m < n; ++m) {
    unsigned char cc = s[k + m];
    if ((cc >> 6) != 2) {
      cp = c;
      return 1;
    }
    cp = (cp << 6) | (cc & 0x3f);
  }
  return n;
}

static std::string string_repr(const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos;
  bool has_double = s.find('"') != std::string::npos;
  char q = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, q);
  for (size_t k = 0; k < s.size();) {
    uint32_t cp;
    size_t n = utf8_decode(s, k, cp);
    char buf[16];
    if (cp == static_cast<uint32_t>(q) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp <= 0xa0) || cp == 0xad) {
      std::snprintf(buf, sizeof buf, "\\x%02x", cp);
      out += buf;
    } else {
      out.append(s, k, n);
    }
    k += n;
  }
  out += q;
  return out;
}

std::string Value::repr() const {
  if (kind == Kind::String) return string_repr(s);
  if (kind == Kind::Undefined) return "Undefined";  // jinja2's Undefined.__repr__
  return str();
}

std::string Value::str() const {
  switch (kind) {
    case Kind::Undefined: return "";
    case Kind::None: return "None";
    case Kind::Bool: return b ? "True" : "False";
    case Kind::Int: return std::to_string(i);
    case Kind::Float: return python_float_repr(f);
    case Kind::String: return s;
    case Kind::List: {
      std::string out = list->tuple ? "(" : "[";
      for (size_t k = 0; k < list->items.size(); ++k) {
        if (k) out += ", ";
        out += list->items[k].repr();
      }
      if (list->tuple && list->items.size() == 1) out += ",";
      return out + (list->tuple ? ")" : "]");
    }
    case Kind::Dict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, v] : dict->items) {
        if (!first) out += ", ";
        first = false;
        out += k.repr() + ": " + v.repr();
      }
      out += "}";
      return dict->flavor == Dict::Flavor::Namespace ? "<Namespace " + out + ">" : out;
    }
    case Kind::Function: return "<function " + fn->name + ">";
  }
  return "";
}

static void json_string(const std::string& s, bool ensure_ascii, std::string& out) {
  out += '"';
  for (size_t k = 0; k < s.size(); ++k) {
    unsigned char c = s[k];
    if (ensure_ascii && c >= 0x80) {
      uint32_t cp;
      k += utf8_decode(s, k, cp) - 1;
      char buf[16];
      if (cp >= 0x10000) {
        cp -= 0x10000;
        std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
      } else {
        std::snprintf(buf, sizeof buf, "\\u%04x", cp);
      }
      out += buf;
      continue;
    }
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

namespace {
struct JsonWriter {
  const JsonOptions& opts;
  std::string item_sep, key_sep;
  std::string out;

  explicit JsonWriter(const JsonOptions& o)
      : opts(o),
        item_sep(o.item_sep.empty() ? (o.indent >= 0 ? "," : ", ") : o.item_sep),
        key_sep(o.key_sep.empty() ? ": " : o.key_sep) {}

  void newline(int level) {
    if (opts.indent < 0) return;
    out += '\n';
    out.append(static_cast<size_t>(opts.indent) * level, ' ');
  }
  void dump(const Value& v, int level);
};
}  // namespace

static std::string json_key(const Value& k) {
  switch (k.kind) {
    case Kind::String: return k.s;
    case Kind::Int: return std::to_string(k.i);
    case Kind::Bool: return k.b ? "true" : "false";
    case Kind::None: return "null";
    case Kind::Float: return python_float_repr(k.f);
    default:
      throw ChatTemplateError(std::string("tojson: keys must be str, int, float, bool or None, not ") +
                              k.type_name());
  }
}

void JsonWriter::dump(const Value& v, int level) {
  switch (v.kind) {
    case Kind::None: out += "null"; return;
    case Kind::Bool: out += v.b ? "true" : "false"; return;
    case Kind::Int: out += std::to_string(v.i); return;
    case Kind::Float:
      if (std::isnan(v.f)) out += "NaN";
      else if (std::isinf(v.f)) out += v.f < 0 ? "-Infinity" : "Infinity";
      else out += python_float_repr(v.f);
      return;
    case Kind::String: json_string(v.s, opts.ensure_ascii, out); return;
    case Kind::List: {
      const auto& items = v.list->items;
      if (items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) out += item_sep;
        newline(level + 1);
        dump(items[k], level + 1);
      }
      newline(level);
      out += ']';
      return;
    }
    case Kind::Dict: {
      if (v.dict->flavor != Dict::Flavor::Plain) break;
      const auto& items = v.dict->items;
      if (items.empty()) {
        out += "{}";
        return;
      }
      std::vector<size_t> order(items.size());
      for (size_t k = 0; k < order.size(); ++k) order[k] = k;
      if (opts.sort_keys)
        std::stable_sort(order.begin(), order.end(),
                         [&](size_t a, size_t b) { return less(items[a].first, items[b].first); });
      out += '{';
      for (size_t k = 0; k < order.size(); ++k) {
        if (k) out += item_sep;
        newline(level + 1);
        json_string(json_key(items[order[k]].first), opts.ensure_ascii, out);
        out += key_sep;
        dump(items[order[k]].second, level + 1);
      }
      newline(level);
      out += '}';
      return;
    }
    default: break;
  }
  throw ChatTemplateError(std::string("tojson: object of type ") + v.type_name() +
                          " is not JSON serializable");
}

std::string Value::to_json(const JsonOptions& opts) const {
  JsonWriter w(opts);
  w.dump(*this, 0);
  return std::move(w.out);
}

}  // namespace pagoda::jinja
