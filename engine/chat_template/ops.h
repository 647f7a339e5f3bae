// The object protocol of the language: attribute and item access, slicing, iteration,
// operators. Semantics follow jinja2 (environment.getattr / getitem) over Python objects.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/chat_template/value.h"

namespace pagoda::jinja {

// Limits that stop runaway templates (see also kMaxValueDepth, kMaxParseDepth).
inline constexpr size_t kMaxStringBytes = size_t{64} << 20;   // output and any one string
inline constexpr int64_t kMaxRange = 100000;                   // range(), as jinja2's sandbox
inline constexpr int64_t kMaxLoopIterations = 1'000'000;       // per render, all loops
inline constexpr int kMaxRecursion = 400;                      // nested evaluation / calls

// Throws the error a use of an undefined value raises ("'x' is undefined").
[[noreturn]] void undefined_error(const Value& u);
// Throws if a string about to be built would pass kMaxStringBytes.
void check_string_size(size_t n);

// obj.name: attribute (method) first, then item, else Undefined.
Value get_attr(const Value& obj, const std::string& name);
// obj[key]: item first, then attribute for string keys, else Undefined.
Value get_item(const Value& obj, const Value& key);
// obj[start:stop:step] for strings, lists and tuples (null parts are Undefined values).
Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
// Elements of a list/tuple, keys of a dict, code points of a string; Undefined is empty.
// Anything else is a TypeError.
std::vector<Value> iterate(const Value& v);
// Python `item in container`.
bool contains(const Value& container, const Value& item);
// Arithmetic and concatenation: + - * / // % ** ~.
Value binary_op(const std::string& op, const Value& a, const Value& b);
Value negate(const Value& v);
// Python len(); TypeError for values without a length.
int64_t length_of(const Value& v);
// Python str % args: printf-style formatting, `%[(key)][flags][width][.precision]type` with the
// flags #0- + and the types s r a c d i u o x X e E f F g G % (percent_format.cpp). `args` is a
// tuple of values, a dict (for %(key)s), or a single value.
std::string percent_format(const std::string& fmt, const Value& args);
// Python format(value, spec): the format-spec mini-language for str, int, bool and float
// (str_format.cpp); an empty spec gives str(value).
std::string format_value(const Value& v, const std::string& spec);
// Python fmt.format(*args, **kwargs): {} {0} {name} fields with .attr / [key] access, !s !r !a
// conversions and :spec (which may hold nested fields).
std::string str_format(const std::string& fmt, const CallArgs& args);

}  // namespace pagoda::jinja
