// Small readers of request JSON shared by the request parsers built on chat's (the Responses
// and Messages APIs): a field that may be absent or null, a required string, and the 400 that
// names the offending field.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "server/http/api_error.h"
#include "server/openai/request_parse.h"

namespace pagoda::server {

// ApiError(400) "Invalid value for 'param': what".
[[noreturn]] inline void invalid_value(const std::string& param, const std::string& what) {
  throw ApiError(400, "Invalid value for '" + param + "': " + what, "invalid_request_error", param);
}

// obj[key], or null when absent or JSON null.
inline const RequestJson* json_field(const RequestJson& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

// obj[key] as a string; a 400 naming `param`.key when absent or of another type.
inline std::string required_string(const RequestJson& obj, const char* key, const std::string& param) {
  const RequestJson* v = json_field(obj, key);
  if (!v || !v->is_string()) invalid_value(param + "." + key, "expected a string.");
  return v->get<std::string>();
}

// Chat field names (prefixes) -> the names another API's client sent them under.
using ParamNames = std::vector<std::pair<std::string, std::string>>;

// A refusal of the chat request an API's body became, renamed to the field the client sent
// (the first matching prefix; its quoted mention in the message too).
inline ApiError renamed(const ApiError& e, const ParamNames& names) {
  for (const auto& [from, to] : names) {
    if (e.param.rfind(from, 0) == 0) {
      std::string param = to + e.param.substr(from.size());
      std::string msg = e.what();
      if (size_t at = msg.find("'" + e.param + "'"); at != std::string::npos)
        msg.replace(at, e.param.size() + 2, "'" + param + "'");
      return ApiError(e.status, msg, e.type, param, e.code);
    }
  }
  return e;
}

}  // namespace pagoda::server
