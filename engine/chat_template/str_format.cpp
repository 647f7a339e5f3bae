// Python's str.format: replacement fields {name.attr[key]!conv:spec} with the format-spec
// mini-language ([[fill]align][sign][#][0][width][,|_][.precision][type]) for strings, ints and
// floats, as format() applies it to each value.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "engine/chat_template/ops.h"
#include "engine/chat_template/text.h"

namespace pagoda::jinja {
namespace {

struct FormatSpec {
  uint32_t fill = ' ';
  char align = 0;  // < > = ^, or 0 for the type's default
  char sign = '-';
  bool alt = false;
  bool zero = false;
  int64_t width = -1;
  char grouping = 0;  // ',' or '_'
  int64_t precision = -1;
  char type = 0;
};

FormatSpec parse_spec(const std::string& spec) {
  FormatSpec fs;
  const auto cps = text::decode(spec);
  size_t i = 0;
  auto is_align = [](uint32_t c) { return c == '<' || c == '>' || c == '=' || c == '^'; };
  if (cps.size() >= 2 && is_align(cps[1])) {
    fs.fill = cps[0];
    fs.align = static_cast<char>(cps[1]);
    i = 2;
  } else if (!cps.empty() && is_align(cps[0])) {
    fs.align = static_cast<char>(cps[0]);
    i = 1;
  }
  if (i < cps.size() && (cps[i] == '+' || cps[i] == '-' || cps[i] == ' ')) fs.sign = static_cast<char>(cps[i++]);
  if (i < cps.size() && cps[i] == 'z') ++i;  // Python 3.11's negative-zero flag: accepted
  if (i < cps.size() && cps[i] == '#') fs.alt = true, ++i;
  if (i < cps.size() && cps[i] == '0') fs.zero = true, ++i;
  auto number = [&]() {
    int64_t n = 0;
    while (i < cps.size() && cps[i] >= '0' && cps[i] <= '9') {
      n = n * 10 + (cps[i++] - '0');
      if (n > 100000) throw ChatTemplateError("format: too many decimal digits in format string");
    }
    return n;
  };
  if (i < cps.size() && cps[i] >= '0' && cps[i] <= '9') fs.width = number();
  if (i < cps.size() && (cps[i] == ',' || cps[i] == '_')) fs.grouping = static_cast<char>(cps[i++]);
  if (i < cps.size() && cps[i] == '.') {
    ++i;
    if (i >= cps.size() || cps[i] < '0' || cps[i] > '9') throw ChatTemplateError("format: format specifier missing precision");
    fs.precision = number();
  }
  if (i < cps.size()) fs.type = static_cast<char>(cps[i++]);
  if (i < cps.size() || (fs.type != 0 && std::string_view("sbcdoxXneEfFgG%").find(fs.type) == std::string_view::npos))
    throw ChatTemplateError("format: invalid format specifier '" + spec + "'");
  return fs;
}

// Inserts `sep` every `group` digits from the right of `digits`.
std::string group_digits(const std::string& digits, char sep, size_t group) {
  std::string out;
  for (size_t k = 0; k < digits.size(); ++k) {
    if (k > 0 && (digits.size() - k) % group == 0) out += sep;
    out += digits[k];
  }
  return out;
}

// Lays out sign + prefix + body in the spec's width (fill, alignment, '0' padding).
std::string layout(const std::string& sign, const std::string& prefix, std::string body,
                   const FormatSpec& fs, char default_align) {
  std::string fill;
  text::append_utf8(fill, fs.fill);
  char align = fs.align ? fs.align : default_align;
  if (fs.zero && !fs.align) {
    fill = "0";
    align = '=';
  }
  const auto len = static_cast<int64_t>(text::length(sign) + text::length(prefix) + text::length(body));
  const int64_t pad = std::max<int64_t>(0, fs.width - len);
  check_string_size(static_cast<size_t>(pad) * fill.size() + body.size());
  auto repeat = [&](int64_t n) {
    std::string s;
    for (int64_t k = 0; k < n; ++k) s += fill;
    return s;
  };
  switch (align) {
    case '<': return sign + prefix + body + repeat(pad);
    case '^': return repeat(pad / 2) + sign + prefix + body + repeat(pad - pad / 2);
    case '=': return sign + prefix + repeat(pad) + body;
    default: return repeat(pad) + sign + prefix + body;
  }
}

std::string sign_for(bool negative, const FormatSpec& fs) {
  if (negative) return "-";
  return fs.sign == '+' ? "+" : fs.sign == ' ' ? " " : "";
}

std::string format_integer(int64_t v, const FormatSpec& fs) {
  if (fs.precision >= 0) throw ChatTemplateError("format: precision not allowed in integer format specifier");
  if (fs.type == 'c') {
    if (v < 0 || v > 0x10FFFF) throw ChatTemplateError("format: %c arg not in range(0x110000)");
    std::string s;
    text::append_utf8(s, static_cast<uint32_t>(v));
    return layout("", "", s, fs, '>');
  }
  const bool negative = v < 0;
  uint64_t mag = negative ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  const unsigned base = fs.type == 'b' ? 2 : fs.type == 'o' ? 8 : (fs.type == 'x' || fs.type == 'X') ? 16 : 10;
  const char* digit_chars = fs.type == 'X' ? "0123456789ABCDEF" : "0123456789abcdef";
  std::string digits;
  do {
    digits.insert(digits.begin(), digit_chars[mag % base]);
    mag /= base;
  } while (mag != 0);
  std::string prefix;
  if (fs.alt && base != 10) prefix = std::string("0") + (fs.type == 'X' ? 'X' : fs.type);
  const std::string sign = sign_for(negative, fs);
  const size_t group = base == 10 ? 3 : 4;
  if (fs.grouping && fs.zero && !fs.align) {
    // Zero padding is grouped too, as Python does ("{:010,}" -> "00,001,234").
    const int64_t target = fs.width - static_cast<int64_t>(sign.size() + prefix.size());
    while (static_cast<int64_t>(group_digits(digits, fs.grouping, group).size()) < target) digits.insert(0, 1, '0');
  }
  if (fs.grouping) digits = group_digits(digits, fs.grouping, group);
  return layout(sign, prefix, digits, fs, '>');
}

// Trailing zeros (and a bare '.') off a %f / %e significand, as 'g' formatting does.
std::string strip_zeros(const std::string& s) {
  const size_t e = s.find_first_of("eE");
  std::string mant = s.substr(0, e), rest = e == std::string::npos ? "" : s.substr(e);
  if (mant.find('.') != std::string::npos) {
    while (!mant.empty() && mant.back() == '0') mant.pop_back();
    if (!mant.empty() && mant.back() == '.') mant.pop_back();
  }
  return mant + rest;
}

std::string format_float(double x, const FormatSpec& fs) {
  const char type = fs.type;
  const bool upper = type == 'E' || type == 'F' || type == 'G';
  std::string body;
  char buf[512];
  const int p = static_cast<int>(std::min<int64_t>(fs.precision < 0 ? 6 : fs.precision, 200));
  if (std::isnan(x) || std::isinf(x)) {
    body = std::isnan(x) ? (upper ? "NAN" : "nan") : (x < 0 ? (upper ? "-INF" : "-inf") : (upper ? "INF" : "inf"));
    if (type == '%') body += '%';
  } else if (type == 0 && fs.precision < 0) {
    body = python_float_repr(x);
  } else if (type == 0 || type == 'n' || type == 'g' || type == 'G') {
    const int prec = std::max(p, 1);
    if (type == 0) {
      // Like 'g', but switching to exponent notation from exp >= prec - 1, and a fixed-point
      // result always keeps a digit after the point.
      std::snprintf(buf, sizeof buf, "%.*e", prec - 1, x);
      const int exp = std::atoi(std::strchr(buf, 'e') + 1);
      if (exp >= -4 && exp < prec - 1) {
        std::snprintf(buf, sizeof buf, "%.*f", prec - 1 - exp, x);
        body = fs.alt ? std::string(buf) : strip_zeros(buf);
        if (body.find('.') == std::string::npos) body += ".0";
      } else {
        body = fs.alt ? std::string(buf) : strip_zeros(buf);
      }
    } else {
      std::snprintf(buf, sizeof buf, fs.alt ? "%#.*g" : "%.*g", prec, x);
      body = buf;
      if (type == 'G') std::transform(body.begin(), body.end(), body.begin(), ::toupper);
    }
  } else if (type == '%') {
    std::snprintf(buf, sizeof buf, fs.alt ? "%#.*f" : "%.*f", p, x * 100);
    body = std::string(buf) + "%";
  } else {
    const char cfmt[] = {'%', '.', '*', type, '\0'};
    std::string f = cfmt;
    if (fs.alt) f.insert(1, "#");
    std::snprintf(buf, sizeof buf, f.c_str(), p, x);
    body = buf;
  }
  const bool negative = !body.empty() && body[0] == '-';
  if (negative) body.erase(0, 1);
  if (fs.grouping) {
    const size_t end = std::min(body.find_first_of(".eE%"), body.size());
    if (std::all_of(body.begin(), body.begin() + end, ::isdigit))
      body = group_digits(body.substr(0, end), fs.grouping, 3) + body.substr(end);
  }
  return layout(sign_for(negative, fs), "", body, fs, '>');
}

}  // namespace

std::string format_value(const Value& v, const std::string& spec) {
  if (spec.empty()) return v.str();  // a missing attribute formats as "", as jinja2's Undefined

  const FormatSpec fs = parse_spec(spec);
  if (v.is_string()) {
    if (fs.type != 0 && fs.type != 's')
      throw ChatTemplateError(std::string("format: unknown format code '") + fs.type + "' for object of type 'str'");
    if (fs.sign != '-') throw ChatTemplateError("format: sign not allowed in string format specifier");
    if (fs.align == '=') throw ChatTemplateError("format: '=' alignment not allowed in string format specifier");
    std::string s = v.s;
    if (fs.precision >= 0 && static_cast<int64_t>(text::length(s)) > fs.precision)
      s = text::encode(text::decode(s), 0, static_cast<size_t>(fs.precision));
    return layout("", "", s, fs, '<');
  }
  if (v.kind == Kind::Int || v.kind == Kind::Bool) {
    if (fs.type != 0 && std::string_view("eEfFgG%").find(fs.type) != std::string_view::npos)
      return format_float(static_cast<double>(v.i), fs);
    if (fs.type == 's') throw ChatTemplateError(std::string("format: unknown format code 's' for object of type '") + v.type_name() + "'");
    return format_integer(v.i, fs);
  }
  if (v.kind == Kind::Float) {
    if (fs.type != 0 && std::string_view("bcdoxX").find(fs.type) != std::string_view::npos)
      throw ChatTemplateError(std::string("format: unknown format code '") + fs.type + "' for object of type 'float'");
    if (fs.type == 's') throw ChatTemplateError("format: unknown format code 's' for object of type 'float'");
    return format_float(v.f, fs);
  }
  if (v.is_undefined()) undefined_error(v);
  throw ChatTemplateError(std::string("format: unsupported format string passed to ") + v.type_name() + ".__format__");
}

std::string str_format(const std::string& f, const CallArgs& a) {
  std::string out;
  int64_t auto_idx = 0;  // -1 once a field was numbered by hand
  bool manual = false;
  for (size_t k = 0; k < f.size(); ++k) {
    const char c = f[k];
    if (c == '}') {
      if (k + 1 < f.size() && f[k + 1] == '}') {
        out += '}';
        ++k;
        continue;
      }
      throw ChatTemplateError("format: single '}' encountered in format string");
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (k + 1 < f.size() && f[k + 1] == '{') {
      out += '{';
      ++k;
      continue;
    }
    // The field runs to the matching '}' (a spec may hold nested {fields}; [keys] may hold '}').
    size_t end = k + 1;
    int depth = 1;
    bool in_key = false;
    for (; end < f.size(); ++end) {
      const char ch = f[end];
      if (in_key) {
        in_key = ch != ']';
      } else if (ch == '[' && depth == 1) {
        in_key = true;
      } else if (ch == '{') {
        ++depth;
      } else if (ch == '}' && --depth == 0) {
        break;
      }
    }
    if (end >= f.size()) throw ChatTemplateError("format: expected '}' before end of string");
    const std::string field = f.substr(k + 1, end - k - 1);
    k = end;
    // name, then .attr / [key] parts, then !conversion, then :spec
    size_t p = 0;
    while (p < field.size() && field[p] != '.' && field[p] != '[' && field[p] != '!' && field[p] != ':') ++p;
    const std::string name = field.substr(0, p);
    Value v;
    if (name.empty() || std::all_of(name.begin(), name.end(), ::isdigit)) {
      size_t idx;
      if (name.empty()) {
        if (manual) throw ChatTemplateError("format: cannot switch from manual field specification to automatic field numbering");
        idx = static_cast<size_t>(auto_idx++);
      } else {
        if (auto_idx > 0) throw ChatTemplateError("format: cannot switch from automatic field numbering to manual field specification");
        manual = true;
        idx = std::strtoul(name.c_str(), nullptr, 10);
      }
      if (idx >= a.pos.size()) throw ChatTemplateError("format: replacement index " + std::to_string(idx) + " out of range");
      v = a.pos[idx];
    } else {
      bool found = false;
      for (const auto& [kw, val] : a.kw)
        if (kw == name) v = val, found = true;
      if (!found) throw ChatTemplateError("format: missing keyword argument '" + name + "'");
    }
    while (p < field.size() && (field[p] == '.' || field[p] == '[')) {
      if (field[p] == '.') {
        size_t q = ++p;
        while (q < field.size() && field[q] != '.' && field[q] != '[' && field[q] != '!' && field[q] != ':') ++q;
        v = get_attr(v, field.substr(p, q - p));
        p = q;
      } else {
        const size_t q = field.find(']', p);
        if (q == std::string::npos) throw ChatTemplateError("format: missing ']' in format string");
        const std::string key = field.substr(p + 1, q - p - 1);
        const bool digits = !key.empty() && std::all_of(key.begin(), key.end(), ::isdigit);
        v = get_item(v, digits ? Value::integer(std::atoll(key.c_str())) : Value::string(key));
        p = q + 1;
      }
    }
    if (p < field.size() && field[p] == '!') {
      if (p + 1 >= field.size()) throw ChatTemplateError("format: end of string while looking for conversion specifier");
      const char conv = field[p + 1];
      if (conv == 's') v = Value::string(v.str());
      else if (conv == 'r') v = Value::string(v.repr());
      else if (conv == 'a') v = Value::string(text::ascii_escape(v.repr()));
      else throw ChatTemplateError(std::string("format: unknown conversion specifier ") + conv);
      p += 2;
    }
    std::string spec;
    if (p < field.size()) {
      if (field[p] != ':') throw ChatTemplateError("format: expected ':' after conversion specifier");
      spec = field.substr(p + 1);
      if (spec.find('{') != std::string::npos) {
        CallArgs inner = a;
        spec = str_format(spec, inner);  // nested fields ({:{width}}) are filled in first
      }
    }
    out += format_value(v, spec);
    check_string_size(out.size());
  }
  return out;
}

}  // namespace pagoda::jinja
