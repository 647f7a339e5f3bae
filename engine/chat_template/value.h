// The value type of the template language: Python's object model reduced to what chat
// templates use (None, bool, int, float, str, list/tuple, dict, callables) plus jinja2's
// Undefined. Lists and dicts have reference semantics like Python objects.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/chat_template/chat_template.h"

namespace pagoda::jinja {

// Containers nested deeper than this are refused (the printers and comparisons recurse).
inline constexpr int kMaxValueDepth = 256;
// Namespaces are the only values a template can change after they are placed in a container,
// so a container's recorded depth could go stale. A namespace therefore counts as this deep
// wherever it is stored, and accepts only values shallower than this: its real depth never
// exceeds what containers assume, and a namespace can never hold itself (no cycles).
inline constexpr int kNamespaceDepth = kMaxValueDepth / 2;

struct Value;
struct List;
struct Dict;
struct Function;
struct CallArgs;

enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Function };

struct Value {
  Kind kind = Kind::Undefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;                    // String; for Undefined: the missing name (for messages)
  std::shared_ptr<List> list;       // List (and tuple)
  std::shared_ptr<Dict> dict;       // Dict (and namespace, loop)
  std::shared_ptr<Function> fn;     // Function

  Value() = default;
  static Value undefined(std::string name = {});
  static Value none();
  static Value boolean(bool v);
  static Value integer(int64_t v);
  static Value number(double v);
  static Value string(std::string v);
  // Throws ChatTemplateError when an item is nested deeper than kMaxValueDepth.
  static Value make_list(std::vector<Value> items, bool tuple = false);
  static Value make_dict();
  static Value function(std::string name, std::function<Value(CallArgs&)> fn);

  bool is_undefined() const { return kind == Kind::Undefined; }
  bool is_none() const { return kind == Kind::None; }
  bool is_string() const { return kind == Kind::String; }
  bool is_number() const { return kind == Kind::Int || kind == Kind::Float || kind == Kind::Bool; }
  bool is_list() const { return kind == Kind::List; }
  bool is_dict() const { return kind == Kind::Dict; }
  // Nesting depth of containers (0 for scalars; kNamespaceDepth for a namespace).
  int depth() const;
  // The value as a double (bool/int/float only).
  double as_double() const;

  // Python truthiness (Undefined is false).
  bool truthy() const;
  // Python's str(): what `{{ x }}` prints. Undefined prints as "".
  std::string str() const;
  // Python's repr() (strings quoted), used inside containers.
  std::string repr() const;
  // Python json.dumps(x, ...) with the given options (see JsonOptions).
  std::string to_json(const struct JsonOptions& opts) const;
  // Name of the Python type for messages ("str", "int", "dict", ...).
  const char* type_name() const;
};

// The json.dumps options the `tojson` filter of transformers passes through.
struct JsonOptions {
  int indent = -1;            // < 0: no newlines (Python indent=None)
  bool sort_keys = false;
  bool ensure_ascii = false;  // true: non-ASCII as \uXXXX escapes (surrogate pairs above U+FFFF)
  // Separators; empty means Python's default: ", " (or "," with an indent) and ": ".
  std::string item_sep;
  std::string key_sep;
};

struct List {
  std::vector<Value> items;
  bool tuple = false;
  int depth = 1;
  // Field names of a named tuple (groupby's (grouper, list)): item k is also attribute
  // fields[k]. Empty for plain lists and tuples.
  std::vector<std::string> fields;
};

// Insertion-ordered mapping with Value keys (Python dict). Lookups are linear for small dicts
// and hashed by string key for large ones.
struct Dict {
  std::vector<std::pair<Value, Value>> items;
  enum class Flavor { Plain, Namespace } flavor = Flavor::Plain;
  int depth = 1;
  // Set only on the `loop` object of a recursive for loop, which templates call: loop(items).
  std::shared_ptr<Function> call;

  const Value* find(const Value& key) const;
  const Value* find(const std::string& key) const;
  // Inserts or replaces; throws on too deep nesting.
  void set(Value key, Value v);
};

// Arguments of a call: positional then keyword.
struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  // Positional i or keyword `name`, else `def`.
  Value get(size_t i, const char* name, Value def = Value::undefined()) const;
  // Keyword-only argument `name`, else `def`.
  Value keyword(const char* name, Value def = Value::undefined()) const { return get(SIZE_MAX, name, std::move(def)); }
  bool has(size_t i, const char* name) const;
};

struct Function {
  std::string name;
  std::function<Value(CallArgs&)> call;
};

// Python ==.
bool equals(const Value& a, const Value& b);
// Python <: numbers with numbers, strings with strings, lists elementwise; otherwise a
// ChatTemplateError naming both types.
bool less(const Value& a, const Value& b);

// JSON (messages, tools) -> Value; refuses nesting beyond kMaxValueDepth.
Value from_json(const nlohmann::json& j);
Value from_json(const nlohmann::ordered_json& j);  // keeps key order, as Python does

// Formats a double as Python's repr() does (shortest round-trip, "1.0", "1e+16").
std::string python_float_repr(double v);

}  // namespace pagoda::jinja
