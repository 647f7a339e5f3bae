// Python's printf-style string formatting (str % args), used by the `%` operator and the
// `format` filter. Numbers follow C's printf conventions, which Python's follow too; integers
// are formatted here so that negative hexadecimal and octal values print as Python does
// ("-ff", not two's complement).
#include <cmath>
#include <cstdio>

#include "engine/chat_template/ops.h"
#include "engine/chat_template/text.h"

namespace pagoda::jinja {
namespace {

struct Spec {
  bool left = false, zero = false, plus = false, space = false, alt = false;
  int64_t width = -1;
  int64_t precision = -1;
  char type = 0;
};

// Pads `body` (already signed and prefixed) to the spec's width, counted in code points.
std::string pad(std::string body, const Spec& sp, size_t sign_len = 0) {
  const auto len = static_cast<int64_t>(text::length(body));
  if (sp.width <= len) return body;
  const auto fill = static_cast<size_t>(sp.width - len);
  if (sp.left) return body + std::string(fill, ' ');
  if (sp.zero) return body.insert(sign_len, fill, '0');  // zeros after the sign and prefix
  return std::string(fill, ' ') + body;
}

std::string sign_of(bool negative, const Spec& sp) {
  if (negative) return "-";
  if (sp.plus) return "+";
  if (sp.space) return " ";
  return "";
}

std::string format_int(const Value& v, const Spec& sp) {
  if (!v.is_number())
    throw ChatTemplateError(std::string("%") + sp.type + " format: a real number is required, not " + v.type_name());
  int64_t i;
  if (v.kind == Kind::Float) {
    if (!std::isfinite(v.f)) throw ChatTemplateError("cannot convert float infinity or NaN to integer");
    if (std::fabs(v.f) >= 9.2e18) throw ChatTemplateError("integer too large to format");
    i = static_cast<int64_t>(v.f);  // int() truncates toward zero
  } else {
    i = v.i;
  }
  const bool negative = i < 0;
  uint64_t mag = negative ? 0 - static_cast<uint64_t>(i) : static_cast<uint64_t>(i);
  const unsigned base = sp.type == 'x' || sp.type == 'X' ? 16 : sp.type == 'o' ? 8 : 10;
  const char* digits = sp.type == 'X' ? "0123456789ABCDEF" : "0123456789abcdef";
  std::string num;
  do {
    num.insert(num.begin(), digits[mag % base]);
    mag /= base;
  } while (mag != 0);
  if (sp.precision > static_cast<int64_t>(num.size()))
    num.insert(0, static_cast<size_t>(sp.precision) - num.size(), '0');
  std::string prefix = sign_of(negative, sp);
  if (sp.alt && base == 16) prefix += sp.type == 'X' ? "0X" : "0x";
  if (sp.alt && base == 8) prefix += "0o";
  return pad(prefix + num, sp, prefix.size());
}

std::string format_float(const Value& v, const Spec& sp) {
  if (!v.is_number())
    throw ChatTemplateError(std::string("%") + sp.type + " format: a real number is required, not " + v.type_name());
  std::string cfmt = "%";
  if (sp.left) cfmt += '-';
  if (sp.zero) cfmt += '0';
  if (sp.plus) cfmt += '+';
  if (sp.space) cfmt += ' ';
  if (sp.alt) cfmt += '#';
  cfmt += ".*";
  cfmt += sp.type;
  const int precision = static_cast<int>(sp.precision < 0 ? 6 : std::min<int64_t>(sp.precision, 200));
  char buf[512];
  std::snprintf(buf, sizeof buf, cfmt.c_str(), precision, v.as_double());
  std::string body = buf;
  const size_t sign_len = !body.empty() && (body[0] == '-' || body[0] == '+' || body[0] == ' ') ? 1 : 0;
  return pad(body, sp, sign_len);  // zero padding applies to inf and nan too, as in Python
}

std::string format_one(const Value& v, const Spec& sp) {
  switch (sp.type) {
    case 's':
    case 'r':
    case 'a': {
      std::string s = sp.type == 's' ? v.str() : sp.type == 'r' ? v.repr() : text::ascii_escape(v.repr());
      if (sp.precision >= 0 && static_cast<int64_t>(text::length(s)) > sp.precision) {
        s = text::encode(text::decode(s), 0, static_cast<size_t>(sp.precision));
      }
      Spec no_zero = sp;
      no_zero.zero = false;
      return pad(s, no_zero);
    }
    case 'c': {
      std::string s;
      if (v.is_string() && text::length(v.s) == 1) {
        s = v.s;
      } else if (v.kind == Kind::Int || v.kind == Kind::Bool) {
        if (v.i < 0 || v.i > 0x10FFFF) throw ChatTemplateError("%c arg not in range(0x110000)");
        text::append_utf8(s, static_cast<uint32_t>(v.i));
      } else {
        throw ChatTemplateError("%c requires an int or a unicode character");
      }
      Spec no_zero = sp;
      no_zero.zero = false;
      return pad(s, no_zero);
    }
    case 'd':
    case 'i':
    case 'u':
    case 'o':
    case 'x':
    case 'X':
      return format_int(v, sp);
    default:  // e E f F g G
      return format_float(v, sp);
  }
}

}  // namespace

std::string percent_format(const std::string& fmt, const Value& args) {
  const bool tuple = args.is_list() && args.list->tuple;
  const bool mapping = args.is_dict() && args.dict->flavor == Dict::Flavor::Plain;
  std::vector<Value> items = tuple ? args.list->items : std::vector<Value>{args};
  std::string out;
  size_t next = 0;
  bool used_mapping = false;
  auto next_arg = [&]() -> const Value& {
    if (next >= items.size()) throw ChatTemplateError("not enough arguments for format string");
    return items[next++];
  };
  auto read_number = [&](size_t& k) -> int64_t {
    if (k < fmt.size() && fmt[k] == '*') {
      ++k;
      const Value& v = next_arg();
      if (v.kind != Kind::Int && v.kind != Kind::Bool) throw ChatTemplateError("* wants int");
      return v.i;
    }
    int64_t n = 0;
    while (k < fmt.size() && fmt[k] >= '0' && fmt[k] <= '9') {
      n = n * 10 + (fmt[k++] - '0');
      if (n > 100000) throw ChatTemplateError("width too big");
    }
    return n;
  };
  for (size_t k = 0; k < fmt.size(); ++k) {
    if (fmt[k] != '%') {
      out += fmt[k];
      continue;
    }
    ++k;  // past the %
    const Value* mapped = nullptr;
    Value looked_up;
    if (k < fmt.size() && fmt[k] == '(') {
      if (!mapping) throw ChatTemplateError("format requires a mapping");
      size_t depth = 1, key_start = ++k;
      for (; k < fmt.size() && depth > 0; ++k) depth += fmt[k] == '(' ? 1 : fmt[k] == ')' ? -1 : 0;
      if (depth > 0) throw ChatTemplateError("incomplete format key");
      const Value* found = args.dict->find(fmt.substr(key_start, k - 1 - key_start));
      if (!found) throw ChatTemplateError("KeyError: '" + fmt.substr(key_start, k - 1 - key_start) + "'");
      looked_up = *found;
      mapped = &looked_up;
      used_mapping = true;
    }
    Spec sp;
    for (; k < fmt.size(); ++k) {
      const char c = fmt[k];
      if (c == '-') sp.left = true;
      else if (c == '0') sp.zero = true;
      else if (c == '+') sp.plus = true;
      else if (c == ' ') sp.space = true;
      else if (c == '#') sp.alt = true;
      else break;
    }
    if (k < fmt.size() && (fmt[k] == '*' || (fmt[k] >= '0' && fmt[k] <= '9'))) {
      sp.width = read_number(k);
      if (sp.width < 0) {  // a negative * width means left-justified
        sp.left = true;
        sp.width = -sp.width;
      }
    }
    if (k < fmt.size() && fmt[k] == '.') {
      ++k;
      sp.precision = std::max<int64_t>(0, read_number(k));
    }
    while (k < fmt.size() && (fmt[k] == 'h' || fmt[k] == 'l' || fmt[k] == 'L')) ++k;
    if (k >= fmt.size()) throw ChatTemplateError("incomplete format");
    sp.type = fmt[k];
    if (sp.type == '%') {
      out += '%';
      continue;
    }
    if (std::string_view("sracdiuoxXeEfFgG").find(sp.type) == std::string_view::npos) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "%x", static_cast<unsigned char>(sp.type));
      throw ChatTemplateError(std::string("unsupported format character '") + sp.type + "' (0x" + hex +
                              ") at index " + std::to_string(k));
    }
    out += format_one(mapped ? *mapped : next_arg(), sp);
    check_string_size(out.size());
  }
  // Python ignores a single unused argument that supports indexing (list, dict) and complains
  // about any other leftover.
  const bool single_indexable = !tuple && (args.is_list() || mapping);
  if (!used_mapping && next < items.size() && !(next == 0 && single_indexable))
    throw ChatTemplateError("not all arguments converted during string formatting");
  return out;
}

}  // namespace pagoda::jinja
