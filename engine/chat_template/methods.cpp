// Methods of str, dict and list values (`s.strip()`, `d.items()`, ...), bound on attribute
// access. Mutating methods raise, as under jinja2's ImmutableSandboxedEnvironment.
#include <algorithm>
#include <cstring>

#include "engine/chat_template/builtins.h"
#include "engine/chat_template/ops.h"
#include "engine/chat_template/text.h"

namespace pagoda::jinja {
namespace {

using Method = Value (*)(const Value& self, const CallArgs& a);

const std::string* opt_str(const Value& v, const char* method) {
  if (v.is_undefined() || v.is_none()) return nullptr;
  if (!v.is_string()) throw ChatTemplateError(std::string(method) + ": argument must be str or None, not " + v.type_name());
  return &v.s;
}

int64_t opt_int(const Value& v, int64_t def) {
  if (v.is_undefined() || v.is_none()) return def;
  if (v.kind != Kind::Int && v.kind != Kind::Bool) throw ChatTemplateError(std::string("expected an integer, not ") + v.type_name());
  return v.i;
}

std::string str_arg(const CallArgs& a, size_t i, const char* name, const char* method) {
  if (!a.has(i, name)) throw ChatTemplateError(std::string(method) + "() missing argument '" + name + "'");
  Value v = a.get(i, name);
  if (!v.is_string()) throw ChatTemplateError(std::string(method) + "() argument must be str, not " + v.type_name());
  return v.s;
}

Value list_of(const std::vector<std::string>& parts) {
  std::vector<Value> out;
  out.reserve(parts.size());
  for (const auto& p : parts) out.push_back(Value::string(p));
  return Value::make_list(std::move(out));
}

Value s_strip(const Value& s, const CallArgs& a) { return Value::string(text::strip(s.s, opt_str(a.get(0, "chars"), "strip"), true, true)); }
Value s_lstrip(const Value& s, const CallArgs& a) { return Value::string(text::strip(s.s, opt_str(a.get(0, "chars"), "lstrip"), true, false)); }
Value s_rstrip(const Value& s, const CallArgs& a) { return Value::string(text::strip(s.s, opt_str(a.get(0, "chars"), "rstrip"), false, true)); }
Value s_split(const Value& s, const CallArgs& a) {
  return list_of(text::split(s.s, opt_str(a.get(0, "sep"), "split"), opt_int(a.get(1, "maxsplit"), -1)));
}
Value s_rsplit(const Value& s, const CallArgs& a) {
  return list_of(text::rsplit(s.s, opt_str(a.get(0, "sep"), "rsplit"), opt_int(a.get(1, "maxsplit"), -1)));
}

// startswith / endswith accept a string or a tuple of strings.
bool affix(const Value& s, const Value& arg, bool start) {
  auto one = [&](const Value& p) {
    if (!p.is_string()) throw ChatTemplateError(std::string(start ? "startswith" : "endswith") + ": expected str, not " + p.type_name());
    if (p.s.size() > s.s.size()) return false;
    return start ? s.s.compare(0, p.s.size(), p.s) == 0 : s.s.compare(s.s.size() - p.s.size(), p.s.size(), p.s) == 0;
  };
  if (arg.is_list()) return std::any_of(arg.list->items.begin(), arg.list->items.end(), one);
  return one(arg);
}
Value s_startswith(const Value& s, const CallArgs& a) { return Value::boolean(affix(s, a.get(0, "prefix"), true)); }
Value s_endswith(const Value& s, const CallArgs& a) { return Value::boolean(affix(s, a.get(0, "suffix"), false)); }
Value s_replace(const Value& s, const CallArgs& a) {
  return Value::string(text::replace(s.s, str_arg(a, 0, "old", "replace"), str_arg(a, 1, "new", "replace"),
                                     opt_int(a.get(2, "count"), -1), kMaxStringBytes));
}
Value s_upper(const Value& s, const CallArgs&) { return Value::string(text::upper(s.s)); }
Value s_lower(const Value& s, const CallArgs&) { return Value::string(text::lower(s.s)); }
Value s_title(const Value& s, const CallArgs&) { return Value::string(text::title(s.s)); }
Value s_capitalize(const Value& s, const CallArgs&) { return Value::string(text::capitalize(s.s)); }

// Index in code points of the byte offset `b` (for find()).
int64_t cp_index(const std::string& s, size_t b) { return static_cast<int64_t>(text::length(s.substr(0, b))); }

Value s_find(const Value& s, const CallArgs& a) {
  size_t p = s.s.find(str_arg(a, 0, "sub", "find"));
  return Value::integer(p == std::string::npos ? -1 : cp_index(s.s, p));
}
Value s_rfind(const Value& s, const CallArgs& a) {
  size_t p = s.s.rfind(str_arg(a, 0, "sub", "rfind"));
  return Value::integer(p == std::string::npos ? -1 : cp_index(s.s, p));
}
Value s_count(const Value& s, const CallArgs& a) {
  std::string sub = str_arg(a, 0, "sub", "count");
  if (sub.empty()) return Value::integer(static_cast<int64_t>(text::length(s.s)) + 1);
  int64_t n = 0;
  for (size_t p = s.s.find(sub); p != std::string::npos; p = s.s.find(sub, p + sub.size())) ++n;
  return Value::integer(n);
}
Value s_join(const Value& s, const CallArgs& a) {
  std::string out;
  bool first = true;
  for (const Value& item : iterate(a.get(0, "iterable"))) {
    if (!item.is_string()) throw ChatTemplateError(std::string("join: expected str instance, ") + item.type_name() + " found");
    if (!first) out += s.s;
    first = false;
    out += item.s;
    check_string_size(out.size());
  }
  return Value::string(std::move(out));
}
Value s_splitlines(const Value& s, const CallArgs&) {
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t k = 0; k < s.s.size(); ++k) {
    if (s.s[k] == '\n' || s.s[k] == '\r') {
      lines.push_back(s.s.substr(start, k - start));
      if (s.s[k] == '\r' && k + 1 < s.s.size() && s.s[k + 1] == '\n') ++k;
      start = k + 1;
    }
  }
  if (start < s.s.size()) lines.push_back(s.s.substr(start));
  return list_of(lines);
}

template <bool (*Pred)(uint32_t)>
Value s_is(const Value& s, const CallArgs&) {
  auto cps = text::decode(s.s);
  return Value::boolean(!cps.empty() && std::all_of(cps.begin(), cps.end(), Pred));
}
bool is_digit(uint32_t c) { return c >= '0' && c <= '9'; }
bool is_alpha(uint32_t c) { return text::is_alnum(c) && !is_digit(c); }
bool is_alnum(uint32_t c) { return text::is_alnum(c); }

// str.format (see str_format in ops.h).
Value s_format(const Value& s, const CallArgs& a) { return Value::string(str_format(s.s, a)); }

Value d_items(const Value& d, const CallArgs&) {
  std::vector<Value> out;
  for (const auto& [k, v] : d.dict->items) out.push_back(Value::make_list({k, v}, true));
  return Value::make_list(std::move(out));
}
Value d_keys(const Value& d, const CallArgs&) { return Value::make_list(iterate(d)); }
Value d_values(const Value& d, const CallArgs&) {
  std::vector<Value> out;
  for (const auto& kv : d.dict->items) out.push_back(kv.second);
  return Value::make_list(std::move(out));
}
Value d_get(const Value& d, const CallArgs& a) {
  const Value* v = d.dict->find(a.get(0, "key"));
  return v ? *v : a.get(1, "default", Value::none());
}

Value l_index(const Value& l, const CallArgs& a) {
  Value x = a.get(0, "value");
  for (size_t k = 0; k < l.list->items.size(); ++k)
    if (equals(l.list->items[k], x)) return Value::integer(static_cast<int64_t>(k));
  throw ChatTemplateError(x.repr() + " is not in list");
}
Value l_count(const Value& l, const CallArgs& a) {
  Value x = a.get(0, "value");
  return Value::integer(std::count_if(l.list->items.begin(), l.list->items.end(), [&](const Value& e) { return equals(e, x); }));
}

struct Entry {
  const char* name;
  Method fn;  // nullptr: exists but unsafe (mutating)
};

const Entry kStr[] = {
    {"strip", s_strip}, {"lstrip", s_lstrip}, {"rstrip", s_rstrip}, {"split", s_split}, {"rsplit", s_rsplit},
    {"startswith", s_startswith}, {"endswith", s_endswith}, {"replace", s_replace},
    {"upper", s_upper}, {"lower", s_lower}, {"title", s_title}, {"capitalize", s_capitalize},
    {"format", s_format}, {"find", s_find}, {"rfind", s_rfind}, {"count", s_count},
    {"join", s_join}, {"splitlines", s_splitlines}, {"isdigit", s_is<is_digit>},
    {"isalpha", s_is<is_alpha>}, {"isalnum", s_is<is_alnum>}, {"isspace", s_is<text::is_space>},
};
const Entry kDict[] = {
    {"items", d_items}, {"keys", d_keys}, {"values", d_values}, {"get", d_get},
    {"pop", nullptr}, {"popitem", nullptr}, {"update", nullptr}, {"setdefault", nullptr}, {"clear", nullptr},
};
const Entry kList[] = {
    {"index", l_index}, {"count", l_count}, {"append", nullptr}, {"extend", nullptr},
    {"insert", nullptr}, {"pop", nullptr}, {"remove", nullptr}, {"clear", nullptr},
    {"sort", nullptr}, {"reverse", nullptr},
};

template <size_t N>
const Entry* lookup(const Entry (&table)[N], const std::string& name) {
  for (const auto& e : table)
    if (name == e.name) return &e;
  return nullptr;
}

}  // namespace

Value get_method(const Value& obj, const std::string& name) {
  const Entry* e = nullptr;
  if (obj.is_string()) e = lookup(kStr, name);
  else if (obj.is_dict() && obj.dict->flavor == Dict::Flavor::Plain) e = lookup(kDict, name);
  else if (obj.is_list() && !obj.list->tuple) e = lookup(kList, name);
  else if (obj.is_list()) e = (name == "index" || name == "count") ? lookup(kList, name) : nullptr;
  if (!e) return Value::undefined();
  std::string type = obj.type_name();
  if (!e->fn) {
    std::string msg = "access to attribute '" + name + "' of '" + type + "' object is unsafe (templates cannot modify values)";
    return Value::function(name, [msg](CallArgs&) -> Value { throw ChatTemplateError(msg); });
  }
  Method fn = e->fn;
  Value self = obj;
  return Value::function(type + "." + name, [fn, self](CallArgs& a) { return fn(self, a); });
}

}  // namespace pagoda::jinja
