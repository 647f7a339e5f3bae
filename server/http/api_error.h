// API errors, owned by the transport: the ApiError any layer throws for a request it refuses,
// its body in OpenAI's shape ({"error": {...}}) or Anthropic's ({"type": "error", "error":
// {...}}, on the Anthropic routes), writing it into a response, and the error type a bare HTTP
// status stands for. Also the one JSON serializer every body goes through.
#pragma once

#include <stdexcept>
#include <string>

#include <httplib.h>
#include <nlohmann/json.hpp>

namespace pagoda::server {

using nlohmann::json;

// A request the server refuses. Carries everything an OpenAI error body needs.
struct ApiError : std::runtime_error {
  int status;          // HTTP status: 400, 401, 404, 408, 413, 429, 500, 503
  std::string type;    // "invalid_request_error", "authentication_error", ...
  std::string param;   // the offending field ("messages[2].role"); empty = null
  std::string code;    // machine-readable code ("context_length_exceeded"); empty = null
  ApiError(int status, const std::string& message, std::string type = "invalid_request_error",
           std::string param = "", std::string code = "");
};

// Which API's error body a request gets.
enum class ErrorShape { OpenAI, Anthropic };

// The shape for a request path: Anthropic's for /v1/messages and below (its SDKs read nothing
// else), OpenAI's for every other path. The one place the choice is made, so that refusals from
// the transport (401, 404, 413, 503) and from the handlers agree.
ErrorShape error_shape_for_path(const std::string& path);

// {"error": {"message", "type", "param", "code"}} with null for empty param/code.
json error_body(const ApiError& e);
// {"type": "error", "error": {"type", "message"}}, the type Anthropic's for the status
// (anthropic_error_type).
json anthropic_error_body(const ApiError& e);
// invalid_request_error (400 and other 4xx), authentication_error (401), permission_error
// (403), not_found_error (404), timeout_error (408), request_too_large (413),
// rate_limit_error (429), overloaded_error (503, 529), api_error (other 5xx).
const char* anthropic_error_type(int status);
json error_body(const ApiError& e, ErrorShape shape);

// Serializes compactly; invalid UTF-8 (a token holding half a character) becomes U+FFFD
// instead of throwing.
std::string dump_json(const json& j);

// Writes the error body with its status; a 429 also tells the client when to retry.
void send_error(httplib::Response& res, const ApiError& e, ErrorShape shape = ErrorShape::OpenAI);

// The OpenAI error type for a status the server answers without a more specific one
// (401 authentication_error, 404 not_found_error, 5xx server_error, ...).
const char* error_type_for_status(int status);

}  // namespace pagoda::server
