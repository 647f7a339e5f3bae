// Built-in filters (jinja2/filters.py semantics; `tojson` as Hugging Face transformers
// overrides it: json.dumps(ensure_ascii=False, indent=...)).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <unordered_map>

#include "engine/chat_template/builtins.h"
#include "engine/chat_template/ops.h"
#include "engine/chat_template/text.h"

namespace pagoda::jinja {
namespace {

int64_t int_arg(const CallArgs& a, size_t i, const char* name, int64_t def) {
  Value v = a.get(i, name);
  if (v.is_undefined() || v.is_none()) return def;
  if (v.kind != Kind::Int && v.kind != Kind::Bool)
    throw ChatTemplateError(std::string("filter argument '") + name + "' must be an integer, not " + v.type_name());
  return v.i;
}

bool bool_arg(const CallArgs& a, size_t i, const char* name, bool def) {
  Value v = a.get(i, name);
  return v.is_undefined() ? def : v.truthy();
}

// Resolves "a.b.0" style attribute paths as jinja2's make_attrgetter does.
Value attr_path(const Value& v, const std::string& path) {
  Value cur = v;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    cur = digits ? get_item(cur, Value::integer(std::atoll(part.c_str()))) : get_item(cur, Value::string(part));
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

// Sort key: strings lower-cased unless case_sensitive.
Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::string(text::lower(v.s));
  return v;
}

Value f_trim(const Value& v, const CallArgs& a) {
  Value chars = a.get(0, "chars");
  std::string s = v.str();
  return Value::string(chars.is_string() ? text::strip(s, &chars.s, true, true) : text::strip(s, nullptr, true, true));
}

// transformers: json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
Value f_tojson(const Value& v, const CallArgs& a) {
  JsonOptions o;
  Value indent = a.get(1, "indent");
  if (indent.kind == Kind::Int) o.indent = static_cast<int>(std::clamp<int64_t>(indent.i, 0, 64));
  else if (!indent.is_undefined() && !indent.is_none()) throw ChatTemplateError("tojson: indent must be an integer");
  o.ensure_ascii = a.get(0, "ensure_ascii").truthy();
  Value seps = a.get(2, "separators");
  if (seps.is_list() && seps.list->items.size() == 2) {
    o.item_sep = seps.list->items[0].str();
    o.key_sep = seps.list->items[1].str();
  } else if (!seps.is_undefined() && !seps.is_none()) {
    throw ChatTemplateError("tojson: separators must be a pair of strings");
  }
  o.sort_keys = a.get(3, "sort_keys").truthy();
  return Value::string(v.to_json(o));
}

Value f_length(const Value& v, const CallArgs&) { return Value::integer(length_of(v)); }

Value f_join(const Value& v, const CallArgs& a) {
  Value sep = a.get(0, "d", Value::string(""));
  Value attr = a.get(1, "attribute");
  std::string out;
  bool first = true;
  for (const Value& item : iterate(v)) {
    if (!first) out += sep.str();
    first = false;
    out += attr.is_undefined() ? item.str() : attr_path(item, attr.str()).str();
    check_string_size(out.size());
  }
  return Value::string(std::move(out));
}

Value f_upper(const Value& v, const CallArgs&) { return Value::string(text::upper(v.str())); }
Value f_lower(const Value& v, const CallArgs&) { return Value::string(text::lower(v.str())); }
// jinja2's title filter (not str.title): words start after whitespace, '-', '(', '{', '[', '<';
// the first letter is upper-cased and the rest lower-cased.
Value f_title(const Value& v, const CallArgs&) {
  auto cps = text::decode(v.str());
  bool word_start = true;
  for (auto& cp : cps) {
    bool sep = text::is_space(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
    if (sep) {
      word_start = true;
      continue;
    }
    cp = word_start ? text::to_upper(cp) : text::to_lower(cp);
    word_start = false;
  }
  return Value::string(text::encode(cps));
}
Value f_capitalize(const Value& v, const CallArgs&) { return Value::string(text::capitalize(v.str())); }

Value f_default(const Value& v, const CallArgs& a) {
  Value def = a.get(0, "default_value", Value::string(""));
  bool boolean = bool_arg(a, 1, "boolean", false);
  if (v.is_undefined() || (boolean && !v.truthy())) return def;
  return v;
}

Value f_items(const Value& v, const CallArgs&) {
  if (v.is_undefined()) return Value::make_list({});
  if (!v.is_dict() || v.dict->flavor != Dict::Flavor::Plain)
    throw ChatTemplateError("items: can only get item pairs from a mapping, not " + std::string(v.type_name()));
  std::vector<Value> out;
  for (const auto& [k, val] : v.dict->items) out.push_back(Value::make_list({k, val}, true));
  return Value::make_list(std::move(out));
}

Value f_first(const Value& v, const CallArgs&) {
  auto items = iterate(v);
  return items.empty() ? Value::undefined("first: the sequence is empty") : items.front();
}

Value f_last(const Value& v, const CallArgs&) {
  auto items = iterate(v);
  return items.empty() ? Value::undefined("last: the sequence is empty") : items.back();
}

Value f_map(const Value& v, const CallArgs& a) {
  std::vector<Value> out;
  Value attr = a.keyword("attribute");
  if (!attr.is_undefined()) {
    Value def = a.keyword("default");
    for (const Value& item : iterate(v)) {
      Value r = attr_path(item, attr.str());
      out.push_back(r.is_undefined() && !def.is_undefined() ? def : r);
    }
    return Value::make_list(std::move(out));
  }
  if (a.pos.empty()) throw ChatTemplateError("map: needs a filter name or attribute=");
  CallArgs rest;
  rest.pos.assign(a.pos.begin() + 1, a.pos.end());
  rest.kw = a.kw;
  std::string name = a.pos[0].str();
  for (const Value& item : iterate(v)) out.push_back(apply_filter(name, item, rest));
  return Value::make_list(std::move(out));
}

// select / reject / selectattr / rejectattr share this: `attr` picks the tested value.
Value select_impl(const Value& v, const CallArgs& a, bool want, bool by_attr) {
  size_t first = by_attr ? 1 : 0;
  std::string attr = by_attr ? a.get(0, "attribute").str() : "";
  std::string test = a.pos.size() > first ? a.pos[first].str() : "";
  CallArgs rest;
  if (a.pos.size() > first + 1) rest.pos.assign(a.pos.begin() + first + 1, a.pos.end());
  std::vector<Value> out;
  for (const Value& item : iterate(v)) {
    Value probe = by_attr ? attr_path(item, attr) : item;
    bool ok = test.empty() ? probe.truthy() : apply_test(test, probe, rest);
    if (ok == want) out.push_back(item);
  }
  return Value::make_list(std::move(out));
}
Value f_select(const Value& v, const CallArgs& a) { return select_impl(v, a, true, false); }
Value f_reject(const Value& v, const CallArgs& a) { return select_impl(v, a, false, false); }
Value f_selectattr(const Value& v, const CallArgs& a) { return select_impl(v, a, true, true); }
Value f_rejectattr(const Value& v, const CallArgs& a) { return select_impl(v, a, false, true); }

Value f_list(const Value& v, const CallArgs&) { return Value::make_list(iterate(v)); }
Value f_string(const Value& v, const CallArgs&) { return Value::string(v.str()); }
// Markup is a str subclass in jinja2: marking a value safe turns it into a string.
Value f_safe(const Value& v, const CallArgs&) { return v.is_string() ? v : Value::string(v.str()); }

Value f_int(const Value& v, const CallArgs& a) {
  Value def = a.get(0, "default", Value::integer(0));
  int64_t base = int_arg(a, 1, "base", 10);
  if (v.is_undefined()) undefined_error(v);
  if (v.kind == Kind::Int || v.kind == Kind::Bool) return Value::integer(v.i);
  if (v.kind == Kind::Float) {
    if (!std::isfinite(v.f) || std::fabs(v.f) > 9.2e18) return def;
    return Value::integer(static_cast<int64_t>(v.f));
  }
  if (v.is_string()) {
    std::string s = text::strip(v.s, nullptr, true, true);
    char* end = nullptr;
    errno = 0;
    long long r = std::strtoll(s.c_str(), &end, static_cast<int>(base));
    if (!s.empty() && end && *end == '\0' && errno == 0) return Value::integer(r);
    double d = std::strtod(s.c_str(), &end);  // jinja2 falls back to int(float(s))
    if (!s.empty() && end && *end == '\0' && std::isfinite(d) && std::fabs(d) < 9.2e18)
      return Value::integer(static_cast<int64_t>(d));
  }
  return def;
}

Value f_float(const Value& v, const CallArgs& a) {
  Value def = a.get(0, "default", Value::number(0.0));
  if (v.is_undefined()) undefined_error(v);
  if (v.is_number()) return Value::number(v.as_double());
  if (v.is_string()) {
    std::string s = text::strip(v.s, nullptr, true, true);
    char* end = nullptr;
    double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && end && *end == '\0') return Value::number(d);
  }
  return def;
}

Value f_abs(const Value& v, const CallArgs&) {
  if (v.kind == Kind::Float) return Value::number(std::fabs(v.f));
  if (v.kind == Kind::Int || v.kind == Kind::Bool) {
    if (v.i == INT64_MIN) throw ChatTemplateError("integer overflow");
    return Value::integer(v.i < 0 ? -v.i : v.i);
  }
  throw ChatTemplateError(std::string("bad operand type for abs(): '") + v.type_name() + "'");
}

Value f_round(const Value& v, const CallArgs& a) {
  int64_t prec = int_arg(a, 0, "precision", 0);
  std::string method = a.get(1, "method", Value::string("common")).str();
  if (!v.is_number()) throw ChatTemplateError(std::string("round: expected a number, not ") + v.type_name());
  double scale = std::pow(10.0, static_cast<double>(prec));
  if (method == "common") {
    if (v.kind != Kind::Float) return Value::integer(v.i);  // Python round(int, n) stays an int
    if (prec >= 0 && prec <= 300 && std::isfinite(v.f)) {
      // Python rounds the exact decimal value, halves to even; so does printf.
      char buf[700];  // up to 309 integer digits + 300 decimals
      std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(prec), v.f);
      return Value::number(std::strtod(buf, nullptr));
    }
    double x = v.f * scale, r = std::round(x);
    if (std::fabs(x - std::trunc(x)) == 0.5) r = 2.0 * std::round(x / 2.0);
    return Value::number(r / scale);
  }
  if (method == "floor") return Value::number(std::floor(v.as_double() * scale) / scale);
  if (method == "ceil") return Value::number(std::ceil(v.as_double() * scale) / scale);
  throw ChatTemplateError("round: method must be 'common', 'ceil' or 'floor'");
}

Value f_replace(const Value& v, const CallArgs& a) {
  std::string from = a.get(0, "old").str(), to = a.get(1, "new").str();
  int64_t count = int_arg(a, 2, "count", -1);
  return Value::string(text::replace(v.str(), from, to, count, kMaxStringBytes));
}

Value f_unique(const Value& v, const CallArgs& a) {
  bool cs = bool_arg(a, 0, "case_sensitive", false);
  Value attr = a.get(1, "attribute");
  std::vector<Value> out, seen;
  for (const Value& item : iterate(v)) {
    Value key = sort_key(attr.is_undefined() ? item : attr_path(item, attr.str()), cs);
    bool dup = false;
    for (const Value& s : seen)
      if (equals(s, key)) dup = true;
    if (!dup) {
      seen.push_back(key);
      out.push_back(item);
    }
  }
  return Value::make_list(std::move(out));
}

Value f_sort(const Value& v, const CallArgs& a) {
  bool reverse = bool_arg(a, 0, "reverse", false);
  bool cs = bool_arg(a, 1, "case_sensitive", false);
  Value attr = a.get(2, "attribute");
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& item : iterate(v))
    keyed.emplace_back(sort_key(attr.is_undefined() ? item : attr_path(item, attr.str()), cs), item);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return reverse ? less(y.first, x.first) : less(x.first, y.first);
  });
  std::vector<Value> out;
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return Value::make_list(std::move(out));
}

Value f_reverse(const Value& v, const CallArgs&) {
  if (v.is_string()) {
    auto cps = text::decode(v.s);
    std::reverse(cps.begin(), cps.end());
    return Value::string(text::encode(cps));
  }
  auto items = iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::make_list(std::move(items));
}

Value f_dictsort(const Value& v, const CallArgs& a) {
  bool cs = bool_arg(a, 0, "case_sensitive", false);
  std::string by = a.get(1, "by", Value::string("key")).str();
  bool reverse = bool_arg(a, 2, "reverse", false);
  if (by != "key" && by != "value") throw ChatTemplateError("dictsort: 'by' must be 'key' or 'value'");
  if (v.is_undefined()) undefined_error(v);
  Value pairs = f_items(v, CallArgs{});
  std::vector<Value> items = pairs.list->items;
  size_t idx = by == "key" ? 0 : 1;
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    Value kx = sort_key(x.list->items[idx], cs), ky = sort_key(y.list->items[idx], cs);
    return reverse ? less(ky, kx) : less(kx, ky);
  });
  return Value::make_list(std::move(items));
}

// Lines as Python's str.splitlines() splits them (\n, \r\n, \r).
std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t k = 0; k < s.size(); ++k) {
    if (s[k] == '\n' || s[k] == '\r') {
      lines.push_back(s.substr(start, k - start));
      if (s[k] == '\r' && k + 1 < s.size() && s[k + 1] == '\n') ++k;
      start = k + 1;
    }
  }
  if (start < s.size()) lines.push_back(s.substr(start));
  return lines;
}

Value f_indent(const Value& v, const CallArgs& a) {
  if (v.is_undefined()) undefined_error(v);
  if (!v.is_string()) throw ChatTemplateError(std::string("indent: expected a string, not ") + v.type_name());
  Value w = a.get(0, "width", Value::integer(4));
  std::string ind = w.is_string() ? w.s : std::string(static_cast<size_t>(std::clamp<int64_t>(w.i, 0, 1024)), ' ');
  bool first = bool_arg(a, 1, "first", false), blank = bool_arg(a, 2, "blank", false);
  auto lines = split_lines(v.str() + "\n");
  std::string out;
  for (size_t k = 0; k < lines.size(); ++k) {
    if (k) out += "\n";
    if (k && (blank || !lines[k].empty())) out += ind;
    out += lines[k];
    check_string_size(out.size());
  }
  if (first) out = ind + out;
  return Value::string(std::move(out));
}

Value f_wordcount(const Value& v, const CallArgs&) {
  int64_t n = 0;
  bool in_word = false;
  for (uint32_t cp : text::decode(v.str())) {
    bool w = cp == '_' || (cp >= '0' && cp <= '9') || text::is_alnum(cp) ||
             (cp >= 0x80 && cp < 0x110000 && !text::is_space(cp) && !(cp >= 0x2000 && cp <= 0x206f) &&
              !(cp >= 0x3000 && cp <= 0x303f));
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value::integer(n);
}

Value f_batch(const Value& v, const CallArgs& a) {
  int64_t n = int_arg(a, 0, "linecount", 1);
  if (n <= 0) throw ChatTemplateError("batch: linecount must be positive");
  Value fill = a.get(1, "fill_with");
  std::vector<Value> out, cur;
  for (const Value& item : iterate(v)) {
    cur.push_back(item);
    if (static_cast<int64_t>(cur.size()) == n) {
      out.push_back(Value::make_list(std::move(cur)));
      cur.clear();
    }
  }
  if (!cur.empty()) {
    if (!fill.is_undefined() && !fill.is_none())
      while (static_cast<int64_t>(cur.size()) < n) cur.push_back(fill);
    out.push_back(Value::make_list(std::move(cur)));
  }
  return Value::make_list(std::move(out));
}

Value f_sum(const Value& v, const CallArgs& a) {
  Value attr = a.get(0, "attribute");
  Value total = a.get(1, "start", Value::integer(0));
  for (const Value& item : iterate(v))
    total = binary_op("+", total, attr.is_undefined() ? item : attr_path(item, attr.str()));
  return total;
}

Value min_max(const Value& v, const CallArgs& a, bool want_max) {
  bool cs = bool_arg(a, 0, "case_sensitive", false);
  Value attr = a.get(1, "attribute");
  Value best, best_key;
  bool have = false;
  for (const Value& item : iterate(v)) {
    Value key = sort_key(attr.is_undefined() ? item : attr_path(item, attr.str()), cs);
    if (!have || (want_max ? less(best_key, key) : less(key, best_key))) {
      best = item;
      best_key = key;
      have = true;
    }
  }
  return have ? best : Value::undefined(std::string(want_max ? "max" : "min") + ": the sequence is empty");
}
Value f_min(const Value& v, const CallArgs& a) { return min_max(v, a, false); }
Value f_max(const Value& v, const CallArgs& a) { return min_max(v, a, true); }

Value f_format(const Value& v, const CallArgs& a) {
  // jinja2: str(value) % (kwargs or args); both at once is an error.
  if (!a.kw.empty()) {
    if (!a.pos.empty()) throw ChatTemplateError("format: can't handle positional and keyword arguments at the same time");
    Value d = Value::make_dict();
    for (const auto& [k, x] : a.kw) d.dict->set(Value::string(k), x);
    return Value::string(percent_format(v.str(), d));
  }
  return Value::string(percent_format(v.str(), Value::make_list(a.pos, true)));
}

// groupby(attribute, default=None, case_sensitive=False): (grouper, list) named tuples, sorted
// by the key; without case_sensitive, string keys group case-insensitively and the grouper is
// the first item's own value.
Value f_groupby(const Value& v, const CallArgs& a) {
  Value attr = a.get(0, "attribute");
  if (attr.is_undefined()) throw ChatTemplateError("groupby: missing argument 'attribute'");
  Value def = a.get(1, "default");
  bool cs = bool_arg(a, 2, "case_sensitive", false);
  auto key_of = [&](const Value& item) {
    Value k = attr.kind == Kind::Int ? get_item(item, attr) : attr_path(item, attr.str());
    return k.is_undefined() && !def.is_undefined() ? def : k;
  };
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& item : iterate(v)) keyed.emplace_back(sort_key(key_of(item), cs), item);
  std::stable_sort(keyed.begin(), keyed.end(), [](const auto& x, const auto& y) { return less(x.first, y.first); });
  std::vector<Value> out;
  for (size_t k = 0; k < keyed.size();) {
    std::vector<Value> group;
    size_t e = k;
    while (e < keyed.size() && equals(keyed[e].first, keyed[k].first)) group.push_back(keyed[e++].second);
    Value grouper = cs ? keyed[k].first : key_of(group.front());
    Value t = Value::make_list({grouper, Value::make_list(std::move(group))}, true);
    t.list->fields = {"grouper", "list"};
    out.push_back(std::move(t));
    k = e;
  }
  return Value::make_list(std::move(out));
}

// center(width=80): Python str.center (the odd space goes left when width is odd).
Value f_center(const Value& v, const CallArgs& a) {
  std::string s = v.str();
  const int64_t width = int_arg(a, 0, "width", 80);
  const auto len = static_cast<int64_t>(text::length(s));
  if (width <= len) return Value::string(s);
  const int64_t marg = width - len;
  const int64_t left = marg / 2 + (marg & width & 1);
  check_string_size(s.size() + static_cast<size_t>(marg));
  return Value::string(std::string(left, ' ') + s + std::string(marg - left, ' '));
}

// slice(slices, fill_with=None): `slices` columns; the first len % slices get one item more,
// the others get fill_with appended when it is given.
Value f_slice(const Value& v, const CallArgs& a) {
  const int64_t slices = int_arg(a, 0, "slices", 0);
  if (slices <= 0) throw ChatTemplateError("slice: the number of slices must be positive");
  if (slices > kMaxRange) throw ChatTemplateError("slice: too many slices");
  Value fill = a.get(1, "fill_with");
  std::vector<Value> seq = iterate(v);
  const auto n = static_cast<int64_t>(seq.size());
  const int64_t per = n / slices, extra = n % slices;
  std::vector<Value> out;
  int64_t offset = 0;
  for (int64_t k = 0; k < slices; ++k) {
    const int64_t start = offset + k * per;
    if (k < extra) ++offset;
    const int64_t end = offset + (k + 1) * per;
    std::vector<Value> part(seq.begin() + start, seq.begin() + end);
    if (!fill.is_undefined() && !fill.is_none() && k >= extra) part.push_back(fill);
    out.push_back(Value::make_list(std::move(part)));
  }
  return Value::make_list(std::move(out));
}

// truncate(length=255, killwords=False, end='...', leeway=5): cut at a word boundary unless
// killwords; strings at most `leeway` past `length` stay whole.
Value f_truncate(const Value& v, const CallArgs& a) {
  const std::string s = v.str();
  const int64_t length = int_arg(a, 0, "length", 255);
  const bool killwords = bool_arg(a, 1, "killwords", false);
  const std::string end = a.get(2, "end", Value::string("...")).str();
  const int64_t leeway = int_arg(a, 3, "leeway", 5);
  const auto end_len = static_cast<int64_t>(text::length(end));
  if (length < end_len) throw ChatTemplateError("truncate: expected length >= " + std::to_string(end_len) + ", got " + std::to_string(length));
  if (leeway < 0) throw ChatTemplateError("truncate: expected leeway >= 0");
  const auto cps = text::decode(s);
  if (static_cast<int64_t>(cps.size()) <= length + leeway) return Value::string(s);
  std::string head = text::encode(cps, 0, static_cast<size_t>(length - end_len));
  if (!killwords) {
    const size_t sp = head.rfind(' ');
    if (sp != std::string::npos) head.resize(sp);
  }
  return Value::string(head + end);
}

Value f_attr(const Value& v, const CallArgs& a) { return get_attr(v, a.get(0, "name").str()); }

Value f_escape(const Value& v, const CallArgs&) {
  std::string out;
  for (char c : v.str()) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return Value::string(std::move(out));
}

const std::unordered_map<std::string, FilterFn>& filter_table() {
  static const std::unordered_map<std::string, FilterFn> table = {
      {"trim", f_trim}, {"tojson", f_tojson}, {"length", f_length}, {"count", f_length},
      {"join", f_join}, {"upper", f_upper}, {"lower", f_lower}, {"title", f_title},
      {"capitalize", f_capitalize}, {"default", f_default}, {"d", f_default}, {"items", f_items},
      {"first", f_first}, {"last", f_last}, {"map", f_map}, {"select", f_select},
      {"reject", f_reject}, {"selectattr", f_selectattr}, {"rejectattr", f_rejectattr},
      {"list", f_list}, {"string", f_string}, {"int", f_int}, {"float", f_float}, {"abs", f_abs},
      {"round", f_round}, {"replace", f_replace}, {"safe", f_safe}, {"unique", f_unique},
      {"sort", f_sort}, {"reverse", f_reverse}, {"dictsort", f_dictsort}, {"indent", f_indent},
      {"wordcount", f_wordcount}, {"batch", f_batch}, {"sum", f_sum}, {"min", f_min},
      {"max", f_max}, {"format", f_format}, {"attr", f_attr}, {"escape", f_escape}, {"e", f_escape},
      {"groupby", f_groupby}, {"center", f_center}, {"slice", f_slice}, {"truncate", f_truncate},
  };
  return table;
}

}  // namespace

FilterFn find_filter(const std::string& name) {
  auto it = filter_table().find(name);
  return it == filter_table().end() ? nullptr : it->second;
}

Value apply_filter(const std::string& name, const Value& value, const CallArgs& args) {
  FilterFn f = find_filter(name);
  if (!f) throw ChatTemplateError("no filter named '" + name + "'");
  return f(value, args);
}

}  // namespace pagoda::jinja
