// One streaming request to an OpenAI-compatible server, timed chunk by chunk.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace pagoda::bench {

// Why a request failed; None when it succeeded.
enum class ErrorKind { None, Connect, Http4xx, Http429, Http5xx, Timeout, Incomplete, BadResponse };
const char* error_kind_name(ErrorKind k);

struct RequestResult {
  ErrorKind error = ErrorKind::None;
  int http_status = 0;
  std::string error_message;
  double start_s = 0;             // since the run's start
  double ttft_s = -1;             // first content chunk; -1 when none arrived
  double e2e_s = 0;
  std::vector<double> chunk_times_s;  // arrival of each content chunk, since the request start
  int prompt_tokens = 0;          // from usage
  int completion_tokens = 0;      // from usage (or counted chunks when the server sends none)
  bool usage_reported = false;
  std::string text;               // the generated text
};

struct ClientTarget {
  std::string url;                // scheme://host:port
  std::string api_key;
  double timeout_s = 600;
};

// Sends `body` to `path` with stream=true and reads the SSE reply. Never throws.
RequestResult run_streaming_request(const ClientTarget& target, const std::string& path,
                                    const nlohmann::json& body, bool chat);

// GET /v1/models: the first model id, or "" with the reason in `error`: the server does not
// answer, answers 401/403 ("401: pass --api-key"), or answers something else.
std::string first_model_id(const ClientTarget& target, std::string* error);

// GET `path`: its JSON body when it answers 200 with JSON, else null.
nlohmann::json get_json(const ClientTarget& target, const std::string& path);

}  // namespace pagoda::bench
