// Value construction, truthiness, comparisons and JSON conversion. Printing lives in
// value_format.cpp.
#include "engine/chat_template/value.h"

#include <algorithm>

namespace pagoda::jinja {

Value Value::undefined(std::string name) {
  Value v;
  v.s = std::move(name);
  return v;
}
Value Value::none() {
  Value v;
  v.kind = Kind::None;
  return v;
}
Value Value::boolean(bool x) {
  Value v;
  v.kind = Kind::Bool;
  v.b = x;
  v.i = x;
  return v;
}
Value Value::integer(int64_t x) {
  Value v;
  v.kind = Kind::Int;
  v.i = x;
  return v;
}
Value Value::number(double x) {
  Value v;
  v.kind = Kind::Float;
  v.f = x;
  return v;
}
Value Value::string(std::string x) {
  Value v;
  v.kind = Kind::String;
  v.s = std::move(x);
  return v;
}

static void check_depth(int depth) {
  if (depth > kMaxValueDepth)
    throw ChatTemplateError("value nested more than " + std::to_string(kMaxValueDepth) +
                            " levels deep");
}

Value Value::make_list(std::vector<Value> items, bool tuple) {
  int d = 0;
  for (const auto& it : items) d = std::max(d, it.depth());
  check_depth(d + 1);
  Value v;
  v.kind = Kind::List;
  v.list = std::make_shared<List>();
  v.list->items = std::move(items);
  v.list->tuple = tuple;
  v.list->depth = d + 1;
  return v;
}

Value Value::make_dict() {
  Value v;
  v.kind = Kind::Dict;
  v.dict = std::make_shared<Dict>();
  return v;
}

Value Value::function(std::string name, std::function<Value(CallArgs&)> fn) {
  Value v;
  v.kind = Kind::Function;
  v.fn = std::make_shared<Function>(Function{std::move(name), std::move(fn)});
  return v;
}

int Value::depth() const {
  if (kind == Kind::List) return list->depth;
  if (kind == Kind::Dict) return dict->flavor == Dict::Flavor::Namespace ? kNamespaceDepth : dict->depth;
  return 0;
}

double Value::as_double() const {
  switch (kind) {
    case Kind::Float: return f;
    case Kind::Int: return static_cast<double>(i);
    case Kind::Bool: return b ? 1.0 : 0.0;
    default: return 0.0;
  }
}

bool Value::truthy() const {
  switch (kind) {
    case Kind::Undefined:
    case Kind::None: return false;
    case Kind::Bool: return b;
    case Kind::Int: return i != 0;
    case Kind::Float: return f != 0.0;
    case Kind::String: return !s.empty();
    case Kind::List: return !list->items.empty();
    case Kind::Dict: return dict->flavor == Dict::Flavor::Namespace || !dict->items.empty();
    case Kind::Function: return true;
  }
  return false;
}

const char* Value::type_name() const {
  switch (kind) {
    case Kind::Undefined: return "Undefined";
    case Kind::None: return "NoneType";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Float: return "float";
    case Kind::String: return "str";
    case Kind::List: return list->tuple ? "tuple" : "list";
    case Kind::Dict: return dict->flavor == Dict::Flavor::Namespace ? "Namespace" : "dict";
    case Kind::Function: return "function";
  }
  return "object";
}

const Value* Dict::find(const std::string& key) const {
  for (const auto& [k, v] : items)
    if (k.kind == Kind::String && k.s == key) return &v;
  return nullptr;
}

const Value* Dict::find(const Value& key) const {
  if (key.kind == Kind::String) return find(key.s);
  for (const auto& [k, v] : items)
    if (equals(k, key)) return &v;
  return nullptr;
}

void Dict::set(Value key, Value v) {
  if (flavor == Flavor::Namespace && v.depth() >= kNamespaceDepth)
    throw ChatTemplateError("a namespace cannot hold another namespace or values nested " +
                            std::to_string(kNamespaceDepth) + " levels deep");
  int d = std::max(depth, v.depth() + 1);
  check_depth(d);
  depth = d;
  for (auto& [k, old] : items) {
    if (equals(k, key)) {
      old = std::move(v);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(v));
}

Value CallArgs::get(size_t idx, const char* name, Value def) const {
  if (idx < pos.size()) return pos[idx];
  for (const auto& [k, v] : kw)
    if (k == name) return v;
  return def;
}

bool CallArgs::has(size_t idx, const char* name) const {
  if (idx < pos.size()) return true;
  for (const auto& kv : kw)
    if (kv.first == name) return true;
  return false;
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind == Kind::Float || b.kind == Kind::Float) return a.as_double() == b.as_double();
    return a.i == b.i;
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Kind::Undefined:
    case Kind::None: return true;
    case Kind::String: return a.s == b.s;
    case Kind::List: {
      if (a.list == b.list) return true;
      if (a.list->tuple != b.list->tuple || a.list->items.size() != b.list->items.size())
        return false;
      for (size_t k = 0; k < a.list->items.size(); ++k)
        if (!equals(a.list->items[k], b.list->items[k])) return false;
      return true;
    }
    case Kind::Dict: {
      if (a.dict == b.dict) return true;
      if (a.dict->flavor != b.dict->flavor || a.dict->flavor == Dict::Flavor::Namespace ||
          a.dict->items.size() != b.dict->items.size())
        return false;
      for (const auto& [k, v] : a.dict->items) {
        const Value* other = b.dict->find(k);
        if (!other || !equals(v, *other)) return false;
      }
      return true;
    }
    case Kind::Function: return a.fn == b.fn;
    default: return false;
  }
}

bool less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind == Kind::Float || b.kind == Kind::Float) return a.as_double() < b.as_double();
    return a.i < b.i;
  }
  if (a.kind == Kind::String && b.kind == Kind::String) return a.s < b.s;
  if (a.kind == Kind::List && b.kind == Kind::List && a.list->tuple == b.list->tuple) {
    const auto& x = a.list->items;
    const auto& y = b.list->items;
    for (size_t k = 0; k < x.size() && k < y.size(); ++k) {
      if (equals(x[k], y[k])) continue;
      return less(x[k], y[k]);
    }
    return x.size() < y.size();
  }
  throw ChatTemplateError(std::string("'<' not supported between instances of '") +
                          a.type_name() + "' and '" + b.type_name() + "'");
}

template <class Json>
static Value from_json_at(const Json& j, int depth) {
  if (depth > kMaxValueDepth)
    throw ChatTemplateError("input JSON nested more than " + std::to_string(kMaxValueDepth) +
                            " levels deep");
  switch (j.type()) {
    case nlohmann::detail::value_t::null: return Value::none();
    case nlohmann::detail::value_t::boolean: return Value::boolean(j.template get<bool>());
    case nlohmann::detail::value_t::number_integer: return Value::integer(j.template get<int64_t>());
    case nlohmann::detail::value_t::number_unsigned: {
      uint64_t u = j.template get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value::number(static_cast<double>(u));
      return Value::integer(static_cast<int64_t>(u));
    }
    case nlohmann::detail::value_t::number_float: return Value::number(j.template get<double>());
    case nlohmann::detail::value_t::string: return Value::string(j.template get<std::string>());
    case nlohmann::detail::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json_at(e, depth + 1));
      return Value::make_list(std::move(items));
    }
    case nlohmann::detail::value_t::object: {
      Value d = Value::make_dict();
      d.dict->items.reserve(j.size());
      int child = 0;
      // nlohmann keys are unique, so entries are appended without the duplicate scan.
      for (const auto& [k, v] : j.items()) {
        Value cv = from_json_at(v, depth + 1);
        child = std::max(child, cv.depth());
        d.dict->items.emplace_back(Value::string(k), std::move(cv));
      }
      d.dict->depth = child + 1;
      return d;
    }
    default: throw ChatTemplateError("unsupported JSON value (binary) in input");
  }
}

Value from_json(const nlohmann::json& j) { return from_json_at(j, 1); }
Value from_json(const nlohmann::ordered_json& j) { return from_json_at(j, 1); }

}  // namespace pagoda::jinja
