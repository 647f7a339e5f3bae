// Built-in tests (`x is name`), as jinja2/tests.py defines them.
#include <unordered_map>

#include "engine/chat_template/builtins.h"
#include "engine/chat_template/ops.h"
#include "engine/chat_template/text.h"

namespace pagoda::jinja {
namespace {

const Value& arg0(const CallArgs& a) {
  if (a.pos.empty()) throw ChatTemplateError("test needs an argument");
  return a.pos[0];
}

// Python's `value % d == r` for the numeric tests (floats allowed, as in Python).
bool mod_is(const Value& v, const Value& d, double r, const char* test) {
  if (!v.is_number() || !d.is_number())
    throw ChatTemplateError(std::string("test '") + test + "' needs numbers, not " + v.type_name());
  if (d.as_double() == 0) throw ChatTemplateError(std::string(test) + ": division by zero");
  Value m = binary_op("%", v, d);
  return m.as_double() == r;
}

bool t_defined(const Value& v, const CallArgs&) { return !v.is_undefined(); }
bool t_undefined(const Value& v, const CallArgs&) { return v.is_undefined(); }
bool t_none(const Value& v, const CallArgs&) { return v.is_none(); }
bool t_string(const Value& v, const CallArgs&) { return v.is_string(); }
bool t_number(const Value& v, const CallArgs&) { return v.is_number(); }
bool t_integer(const Value& v, const CallArgs&) { return v.kind == Kind::Int; }
bool t_float(const Value& v, const CallArgs&) { return v.kind == Kind::Float; }
bool t_boolean(const Value& v, const CallArgs&) { return v.kind == Kind::Bool; }
bool t_true(const Value& v, const CallArgs&) { return v.kind == Kind::Bool && v.b; }
bool t_false(const Value& v, const CallArgs&) { return v.kind == Kind::Bool && !v.b; }
bool t_mapping(const Value& v, const CallArgs&) { return v.is_dict() && v.dict->flavor == Dict::Flavor::Plain; }
bool t_iterable(const Value& v, const CallArgs&) {
  return v.is_undefined() || v.is_string() || v.is_list() || t_mapping(v, {});
}
bool t_sequence(const Value& v, const CallArgs&) { return t_iterable(v, {}); }
// jinja2's Undefined defines __call__ (which raises), so Python reports it as callable.
bool t_callable(const Value& v, const CallArgs&) { return v.kind == Kind::Function || v.is_undefined(); }
bool t_odd(const Value& v, const CallArgs&) { return mod_is(v, Value::integer(2), 1, "odd"); }
bool t_even(const Value& v, const CallArgs&) { return mod_is(v, Value::integer(2), 0, "even"); }
bool t_divisibleby(const Value& v, const CallArgs& a) { return mod_is(v, arg0(a), 0, "divisibleby"); }
bool t_eq(const Value& v, const CallArgs& a) { return equals(v, arg0(a)); }
bool t_ne(const Value& v, const CallArgs& a) { return !equals(v, arg0(a)); }
bool t_lt(const Value& v, const CallArgs& a) { return less(v, arg0(a)); }
bool t_gt(const Value& v, const CallArgs& a) { return less(arg0(a), v); }
bool t_le(const Value& v, const CallArgs& a) { return !less(arg0(a), v); }
bool t_ge(const Value& v, const CallArgs& a) { return !less(v, arg0(a)); }
bool t_in(const Value& v, const CallArgs& a) { return contains(arg0(a), v); }
bool t_sameas(const Value& v, const CallArgs& a) {
  const Value& o = arg0(a);
  if (v.kind != o.kind) return false;
  if (v.is_list()) return v.list == o.list;
  if (v.is_dict()) return v.dict == o.dict;
  return equals(v, o) && (v.kind == Kind::None || v.kind == Kind::Bool || v.kind == Kind::Undefined);
}
bool t_lower(const Value& v, const CallArgs&) {
  std::string s = v.str();
  return text::lower(s) == s && text::upper(s) != s;
}
bool t_upper(const Value& v, const CallArgs&) {
  std::string s = v.str();
  return text::upper(s) == s && text::lower(s) != s;
}
bool t_filter(const Value& v, const CallArgs&) { return v.is_string() && find_filter(v.s) != nullptr; }
bool t_test(const Value& v, const CallArgs&) { return v.is_string() && find_test(v.s) != nullptr; }

const std::unordered_map<std::string, TestFn>& test_table() {
  static const std::unordered_map<std::string, TestFn> table = {
      {"defined", t_defined}, {"undefined", t_undefined}, {"none", t_none}, {"string", t_string},
      {"number", t_number}, {"integer", t_integer}, {"float", t_float}, {"boolean", t_boolean},
      {"true", t_true}, {"false", t_false}, {"mapping", t_mapping}, {"iterable", t_iterable},
      {"sequence", t_sequence}, {"callable", t_callable}, {"odd", t_odd}, {"even", t_even},
      {"divisibleby", t_divisibleby}, {"eq", t_eq}, {"equalto", t_eq}, {"==", t_eq}, {"ne", t_ne},
      {"!=", t_ne}, {"lt", t_lt}, {"lessthan", t_lt}, {"<", t_lt}, {"gt", t_gt},
      {"greaterthan", t_gt}, {">", t_gt}, {"le", t_le}, {"<=", t_le}, {"ge", t_ge}, {">=", t_ge},
      {"in", t_in}, {"sameas", t_sameas}, {"lower", t_lower}, {"upper", t_upper},
      {"filter", t_filter}, {"test", t_test},
  };
  return table;
}

}  // namespace

TestFn find_test(const std::string& name) {
  auto it = test_table().find(name);
  return it == test_table().end() ? nullptr : it->second;
}

bool apply_test(const std::string& name, const Value& value, const CallArgs& args) {
  TestFn t = find_test(name);
  if (!t) throw ChatTemplateError("no test named '" + name + "'");
  return t(value, args);
}

}  // namespace pagoda::jinja
