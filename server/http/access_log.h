// Logging set-up (text or JSON lines via spdlog) and the one-line-per-request access log.
#pragma once

#include <chrono>
#include <string>

#include <nlohmann/json.hpp>

namespace pagoda::server {

// Configures the default spdlog logger: `format` "text" or "json", `level` as spdlog names it.
// Throws std::invalid_argument on an unknown format or level.
void setup_logging(const std::string& format, const std::string& level);

// Logs `msg` at info level with structured fields: JSON mode merges them into the line's
// object, text mode appends them as key=value.
void log_info(const std::string& msg, const nlohmann::ordered_json& fields = nlohmann::ordered_json::object());
void log_warn(const std::string& msg, const nlohmann::ordered_json& fields = nlohmann::ordered_json::object());

// What the access log says about one HTTP request. The HTTP layer makes one when routing
// begins and hands it to the route (api_service.h); handlers fill it in as the request
// proceeds; the HTTP layer writes the line once the response has been sent.
struct AccessRecord {
  std::string request_id;         // "-" for requests that generate nothing
  int status_override = 0;        // e.g. 499 when the client went away mid-stream
  int prompt_tokens = 0;
  int completion_tokens = 0;
  double ttft_ms = -1;            // -1: no token was generated
  std::chrono::steady_clock::time_point start{};  // set when routing begins
};

// Writes the access line: method, path, status, request id, tokens, TTFT and total time.
void log_access(const std::string& method, const std::string& path, int status,
                const AccessRecord& rec, double total_ms);

}  // namespace pagoda::server
