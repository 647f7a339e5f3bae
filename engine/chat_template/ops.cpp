// Operators and access rules with Python's semantics and error messages (see ops.h).
#include "engine/chat_template/ops.h"

#include <cmath>
#include <cstdio>

#include "engine/chat_template/builtins.h"
#include "engine/chat_template/text.h"

namespace pagoda::jinja {

[[noreturn]] void undefined_error(const Value& u) {
  throw ChatTemplateError(u.s.empty() ? "value is undefined" : u.s);
}

void check_string_size(size_t n) {
  if (n > kMaxStringBytes)
    throw ChatTemplateError("string larger than the limit of " + std::to_string(kMaxStringBytes) + " bytes");
}

static std::string type_phrase(const Value& v) { return std::string("'") + v.type_name() + " object'"; }

Value get_attr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) undefined_error(obj);
  if (obj.is_dict() && obj.dict->flavor == Dict::Flavor::Namespace) {
    if (const Value* v = obj.dict->find(name)) return *v;
    return Value::undefined("'Namespace object' has no attribute '" + name + "'");
  }
  if (obj.is_list()) {
    const auto& fields = obj.list->fields;
    for (size_t k = 0; k < fields.size() && k < obj.list->items.size(); ++k)
      if (fields[k] == name) return obj.list->items[k];
  }
  Value m = get_method(obj, name);
  if (!m.is_undefined()) return m;
  if (obj.is_dict()) {
    if (const Value* v = obj.dict->find(name)) return *v;
  }
  return Value::undefined(type_phrase(obj) + " has no attribute '" + name + "'");
}

// Python index normalisation: negative counts from the end; nullopt when out of range.
static bool norm_index(int64_t& idx, size_t n) {
  if (idx < 0) idx += static_cast<int64_t>(n);
  return idx >= 0 && idx < static_cast<int64_t>(n);
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) undefined_error(obj);
  if (obj.is_dict() && obj.dict->flavor == Dict::Flavor::Plain) {
    if (const Value* v = obj.dict->find(key)) return *v;
  } else if (obj.is_list() && (key.kind == Kind::Int || key.kind == Kind::Bool)) {
    int64_t idx = key.i;
    if (norm_index(idx, obj.list->items.size())) return obj.list->items[idx];
  } else if (obj.is_string() && (key.kind == Kind::Int || key.kind == Kind::Bool)) {
    int64_t idx = key.i;
    if (text::is_ascii(obj.s)) {
      if (norm_index(idx, obj.s.size())) return Value::string(obj.s.substr(idx, 1));
    } else {
      auto cps = text::decode(obj.s);
      if (norm_index(idx, cps.size())) return Value::string(text::encode(cps, idx, idx + 1));
    }
  }
  if (key.is_string()) return get_attr(obj, key.s);
  return Value::undefined(type_phrase(obj) + " has no element " + key.repr());
}

// Python slice.indices(): resolves start/stop/step against length n.
static void slice_indices(const Value& a, const Value& b, const Value& c, int64_t n, int64_t& start,
                          int64_t& stop, int64_t& step) {
  auto as_int = [](const Value& v, const char* what) -> std::pair<bool, int64_t> {
    if (v.is_undefined() || v.is_none()) return {false, 0};
    if (v.kind != Kind::Int && v.kind != Kind::Bool)
      throw ChatTemplateError(std::string("slice ") + what + " must be an integer, not " + v.type_name());
    return {true, v.i};
  };
  auto [has_step, st] = as_int(c, "step");
  step = has_step ? st : 1;
  if (step == 0) throw ChatTemplateError("slice step cannot be zero");
  auto clamp = [&](std::pair<bool, int64_t> v, int64_t def) {
    if (!v.first) return def;
    int64_t x = v.second;
    if (x < 0) {
      x += n;
      if (x < 0) x = step < 0 ? -1 : 0;
    } else if (x >= n) {
      x = step < 0 ? n - 1 : n;
    }
    return x;
  };
  start = clamp(as_int(a, "start"), step < 0 ? n - 1 : 0);
  stop = clamp(as_int(b, "stop"), step < 0 ? -1 : n);
}

template <class T>
static std::vector<T> take_slice(const std::vector<T>& v, int64_t start, int64_t stop, int64_t step) {
  std::vector<T> out;
  if (step > 0)
    for (int64_t k = start; k < stop; k += step) out.push_back(v[k]);
  else
    for (int64_t k = start; k > stop; k += step) out.push_back(v[k]);
  return out;
}

Value slice(const Value& obj, const Value& a, const Value& b, const Value& c) {
  if (obj.is_undefined()) undefined_error(obj);
  int64_t start, stop, step;
  if (obj.is_list()) {
    slice_indices(a, b, c, obj.list->items.size(), start, stop, step);
    return Value::make_list(take_slice(obj.list->items, start, stop, step), obj.list->tuple);
  }
  if (obj.is_string()) {
    auto cps = text::decode(obj.s);
    slice_indices(a, b, c, cps.size(), start, stop, step);
    return Value::string(text::encode(take_slice(cps, start, stop, step)));
  }
  // jinja2's getitem turns the TypeError of an unsliceable object into an undefined value.
  return Value::undefined(std::string("'") + obj.type_name() + "' object is not subscriptable");
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined: return {};
    case Kind::List: return v.list->items;
    case Kind::Dict: {
      if (v.dict->flavor == Dict::Flavor::Namespace) break;
      std::vector<Value> keys;
      keys.reserve(v.dict->items.size());
      for (const auto& kv : v.dict->items) keys.push_back(kv.first);
      return keys;
    }
    case Kind::String: {
      std::vector<Value> out;
      for (uint32_t cp : text::decode(v.s)) {
        std::string ch;
        text::append_utf8(ch, cp);
        out.push_back(Value::string(std::move(ch)));
      }
      return out;
    }
    default: break;
  }
  throw ChatTemplateError(std::string("'") + v.type_name() + "' object is not iterable");
}

bool contains(const Value& container, const Value& item) {
  if (container.is_string()) {
    if (!item.is_string())
      throw ChatTemplateError(std::string("'in <string>' requires string as left operand, not ") + item.type_name());
    return container.s.find(item.s) != std::string::npos;
  }
  if (container.is_dict() && container.dict->flavor == Dict::Flavor::Plain) {
    if ((item.is_list() && !item.list->tuple) || item.is_dict())
      throw ChatTemplateError(std::string("unhashable type: '") + item.type_name() + "'");
    return container.dict->find(item) != nullptr;
  }
  if (container.is_list()) {
    for (const auto& e : container.list->items)
      if (equals(e, item)) return true;
    return false;
  }
  if (container.is_undefined()) return false;
  throw ChatTemplateError(std::string("argument of type '") + container.type_name() + "' is not iterable");
}

int64_t length_of(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined: return 0;
    case Kind::String: return static_cast<int64_t>(text::length(v.s));
    case Kind::List: return static_cast<int64_t>(v.list->items.size());
    case Kind::Dict:
      if (v.dict->flavor == Dict::Flavor::Plain) return static_cast<int64_t>(v.dict->items.size());
      break;
    default: break;
  }
  throw ChatTemplateError(std::string("object of type '") + v.type_name() + "' has no len()");
}

[[noreturn]] static void bad_operands(const std::string& op, const Value& a, const Value& b) {
  throw ChatTemplateError("unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" +
                          b.type_name() + "'");
}

static bool is_intlike(const Value& v) { return v.kind == Kind::Int || v.kind == Kind::Bool; }

// Integer arithmetic with Python's result, refusing what does not fit 64 bits.
template <class Op>
static Value checked(int64_t a, int64_t b, Op op) {
  int64_t r = 0;
  if (op(a, b, &r)) throw ChatTemplateError("integer overflow");
  return Value::integer(r);
}

static Value repeat(const Value& seq, int64_t n) {
  if (n < 0) n = 0;
  if (seq.is_string()) {
    check_string_size(seq.s.size() * static_cast<size_t>(n));
    std::string out;
    for (int64_t k = 0; k < n; ++k) out += seq.s;
    return Value::string(std::move(out));
  }
  check_string_size(seq.list->items.size() * static_cast<size_t>(n) * sizeof(Value));
  std::vector<Value> out;
  for (int64_t k = 0; k < n; ++k) out.insert(out.end(), seq.list->items.begin(), seq.list->items.end());
  return Value::make_list(std::move(out), seq.list->tuple);
}

Value binary_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") {
    std::string out = a.str() + b.str();
    check_string_size(out.size());
    return Value::string(std::move(out));
  }
  if (a.is_undefined()) undefined_error(a);
  if (b.is_undefined()) undefined_error(b);
  bool nums = a.is_number() && b.is_number();
  bool ints = is_intlike(a) && is_intlike(b);
  if (op == "+") {
    if (ints) return checked(a.i, b.i, [](int64_t x, int64_t y, int64_t* r) { return __builtin_add_overflow(x, y, r); });
    if (nums) return Value::number(a.as_double() + b.as_double());
    if (a.is_string() && b.is_string()) {
      check_string_size(a.s.size() + b.s.size());
      return Value::string(a.s + b.s);
    }
    if (a.is_list() && b.is_list() && a.list->tuple == b.list->tuple) {
      std::vector<Value> out = a.list->items;
      out.insert(out.end(), b.list->items.begin(), b.list->items.end());
      return Value::make_list(std::move(out), a.list->tuple);
    }
    if (a.is_string() || b.is_string())
      throw ChatTemplateError(std::string("can only concatenate str (not \"") +
                              (a.is_string() ? b : a).type_name() + "\") to str");
    bad_operands(op, a, b);
  }
  if (op == "-") {
    if (ints) return checked(a.i, b.i, [](int64_t x, int64_t y, int64_t* r) { return __builtin_sub_overflow(x, y, r); });
    if (nums) return Value::number(a.as_double() - b.as_double());
    bad_operands(op, a, b);
  }
  if (op == "*") {
    if (ints) return checked(a.i, b.i, [](int64_t x, int64_t y, int64_t* r) { return __builtin_mul_overflow(x, y, r); });
    if (nums) return Value::number(a.as_double() * b.as_double());
    if ((a.is_string() || a.is_list()) && is_intlike(b)) return repeat(a, b.i);
    if ((b.is_string() || b.is_list()) && is_intlike(a)) return repeat(b, a.i);
    bad_operands(op, a, b);
  }
  if (op == "%" && a.is_string()) return Value::string(percent_format(a.s, b));
  if (!nums) bad_operands(op, a, b);
  if (op == "/") {
    if (b.as_double() == 0) throw ChatTemplateError("division by zero");
    return Value::number(a.as_double() / b.as_double());
  }
  if (op == "//" || op == "%") {
    if (b.as_double() == 0) throw ChatTemplateError(op == "%" ? "modulo by zero" : "integer division or modulo by zero");
    if (ints) {
      if (a.i == INT64_MIN && b.i == -1) throw ChatTemplateError("integer overflow");
      int64_t q = a.i / b.i, m = a.i % b.i;
      if (m != 0 && ((m < 0) != (b.i < 0))) {
        --q;
        m += b.i;
      }
      return Value::integer(op == "//" ? q : m);
    }
    // CPython's float floor division and modulo (sign of the divisor, exact near integers).
    double x = a.as_double(), y = b.as_double();
    double m = std::fmod(x, y);
    double div = (x - m) / y;
    if (m != 0) {
      if ((y < 0) != (m < 0)) {
        m += y;
        div -= 1.0;
      }
    } else {
      m = std::copysign(0.0, y);
    }
    if (op == "%") return Value::number(m);
    if (div == 0) return Value::number(std::copysign(0.0, x / y));
    double fl = std::floor(div);
    if (div - fl > 0.5) fl += 1.0;
    return Value::number(fl);
  }
  if (op == "**") {
    if (ints && b.i >= 0) {
      int64_t base = a.i, e = b.i, acc = 1;
      while (e > 0) {
        if (e & 1) {
          if (__builtin_mul_overflow(acc, base, &acc)) throw ChatTemplateError("integer overflow");
        }
        e >>= 1;
        if (e > 0 && __builtin_mul_overflow(base, base, &base)) throw ChatTemplateError("integer overflow");
      }
      return Value::integer(acc);
    }
    if (a.as_double() == 0 && b.as_double() < 0)
      throw ChatTemplateError("0.0 cannot be raised to a negative power");
    return Value::number(std::pow(a.as_double(), b.as_double()));
  }
  bad_operands(op, a, b);
}

Value negate(const Value& v) {
  if (v.kind == Kind::Float) return Value::number(-v.f);
  if (is_intlike(v)) {
    if (v.i == INT64_MIN) throw ChatTemplateError("integer overflow");
    return Value::integer(-v.i);
  }
  if (v.is_undefined()) undefined_error(v);
  throw ChatTemplateError(std::string("bad operand type for unary -: '") + v.type_name() + "'");
}

}  // namespace pagoda::jinja
