// ApiError, the OpenAI and Anthropic error bodies and the JSON serializer (see api_error.h).
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

ErrorShape error_shape_for_path(const std::string& path) {
  static const std::string kMessages = "/v1/messages";
  const bool messages = path.compare(0, kMessages.size(), kMessages) == 0 &&
                        (path.size() == kMessages.size() || path[kMessages.size()] == '/' ||
                         path[kMessages.size()] == '?');
  return messages ? ErrorShape::Anthropic : ErrorShape::OpenAI;
}

const char* anthropic_error_type(int status) {
  switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 408: return "timeout_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503:
    case 529: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
  }
}

json anthropic_error_body(const ApiError& e) {
  return json{{"type", "error"}, {"error", {{"type", anthropic_error_type(e.status)}, {"message", e.what()}}}};
}

json error_body(const ApiError& e, ErrorShape shape) {
  return shape == ErrorShape::Anthropic ? anthropic_error_body(e) : error_body(e);
}

std::string dump_json(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

void send_error(httplib::Response& res, const ApiError& e, ErrorShape shape) {
  res.status = e.status;
  res.set_content(dump_json(error_body(e, shape)), "application/json");
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
