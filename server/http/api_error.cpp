// ApiError, the OpenAI error body and the JSON serializer (see api_error.h).
#include "server/http/api_error.h"

namespace pagoda::server {

ApiError::ApiError(int status_, const std::string& message, std::string type_, std::string param_,
                   std::string code_)
    : std::runtime_error(message),
      status(status_),
      type(std::move(type_)),
      param(std::move(param_)),
      code(std::move(code_)) {}

json error_body(const ApiError& e) {
  json err = {{"message", e.what()}, {"type", e.type}, {"param", nullptr}, {"code", nullptr}};
  if (!e.param.empty()) err["param"] = e.param;
  if (!e.code.empty()) err["code"] = e.code;
  return json{{"error", err}};
}

std::string dump_json(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(dump_json(error_body(e)), "application/json");
  if (e.status == 429) res.set_header("Retry-After", "1");
}

const char* error_type_for_status(int status) {
  switch (status) {
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 408: return "timeout_error";
    case 413: return "invalid_request_error";
    case 429: return "rate_limit_error";
    case 503: return "service_unavailable_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

}  // namespace pagoda::server
