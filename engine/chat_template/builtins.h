// Built-in filters, tests, methods and globals of the language, as jinja2 and Hugging Face
// transformers define them.
#pragma once

#include <ctime>
#include <optional>
#include <string>

#include "engine/chat_template/value.h"

namespace pagoda::jinja {

// `value | name(args)`.
using FilterFn = Value (*)(const Value& value, const CallArgs& args);
// `value is name(args)`.
using TestFn = bool (*)(const Value& value, const CallArgs& args);

// nullptr when there is no such filter / test.
FilterFn find_filter(const std::string& name);
TestFn find_test(const std::string& name);

// Helpers shared by filters: apply by name, throwing ChatTemplateError for unknown names.
Value apply_filter(const std::string& name, const Value& value, const CallArgs& args);
bool apply_test(const std::string& name, const Value& value, const CallArgs& args);

// The method `name` of a str, dict or list bound to `obj` (callable Value), or Undefined when
// the type has no such method. Methods that would mutate (list.append, dict.update ...) exist
// but throw when called, as jinja2's ImmutableSandboxedEnvironment does.
Value get_method(const Value& obj, const std::string& name);

// Global functions: range, namespace, dict, cycler, joiner, raise_exception, strftime_now (reporting `now`,
// or the local time when `now` is empty). Returned as a dict of callables.
Value make_globals(const std::optional<std::tm>& now);

}  // namespace pagoda::jinja
