// The OpenAI wire format: request JSON -> validated structs, results -> response JSON, and the
// OpenAI error body. No HTTP and no engine calls here, so every rule is unit-testable.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine_api.h"
#include "engine/sampling_params.h"
#include "server/openai/tool_calls.h"

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

// {"error": {"message", "type", "param", "code"}} with null for empty param/code.
json error_body(const ApiError& e);

// Serializes compactly; invalid UTF-8 (a token holding half a character) becomes U+FFFD
// instead of throwing.
std::string dump_json(const json& j);

// Whether the arrays/objects in the JSON text `text` nest more than `max_depth` levels deep
// (a cheap scan, before parsing: copying or rendering deep values recurses).
bool json_depth_exceeds(const std::string& text, size_t max_depth);

// Parses a request body; a syntax error or a non-object becomes a 400 ApiError.
json parse_json_body(const std::string& body);

// One prompt as the client sent it: text to tokenize, or token ids to use as they are.
struct PromptInput {
  bool is_tokens = false;
  std::string text;
  std::vector<int32_t> tokens;
};

// Fields shared by /v1/completions and /v1/chat/completions, validated.
struct CommonRequest {
  std::string model;                 // as sent (may be empty); the response names our model
  int n = 1;
  std::optional<int> max_tokens;     // unset: the endpoint's default
  SamplingParams sampling;           // logprobs filled by the endpoint-specific parser
  StopParams stop;                   // max_tokens filled in later by the handler
  bool stream = false;
  bool include_usage = false;        // stream_options.include_usage
  int n_keep = -1;
  std::string user;
};

struct CompletionRequest {
  CommonRequest common;
  std::vector<PromptInput> prompts;  // at least one
  bool echo = false;                 // prepend the prompt text to each choice
};

struct ChatRequest {
  CommonRequest common;
  // Normalized messages for the chat template: each has "role" and string "content"
  // (content-part arrays joined), plus any name/tool_calls/tool_call_id passed through.
  json messages;
  json tools;                        // null when absent
  std::vector<std::string> tool_names;  // the functions in `tools`, in order
  ToolChoice tool_choice;            // Auto when absent (None when there are no tools)
  bool parallel_tool_calls = true;   // accepted; pagoda does not limit the number of calls
  bool add_generation_prompt = true;
  bool logprobs = false;
};

// Validate a body and build the request; throw ApiError(400) naming the bad field.
// Unknown fields are ignored. Token ids are only checked to be >= 0 here (vocabulary size is
// checked by the handler, which knows it).
CompletionRequest parse_completion_request(const json& body);
ChatRequest parse_chat_request(const json& body);

// A function call the model made, as the client receives it.
struct ToolCallOut {
  std::string id;         // "call_..." (for Mistral models 9 alphanumerics, as their template demands)
  std::string name;
  std::string arguments;  // JSON text
};

// What one choice produced, gathered from engine deltas.
struct ChoiceResult {
  int index = 0;
  std::string text;                    // chat with tool calls: the content around the calls
  std::vector<ToolCallOut> tool_calls;  // non-empty: message.tool_calls, finish "tool_calls"
  std::vector<int32_t> tokens;
  std::vector<TokenLogprob> logprobs;
  FinishReason finish = FinishReason::None;
};

// Renders a token id as the text the client sees in logprobs.
using TokenText = std::function<std::string(int32_t)>;

// "stop" / "length" (anything else, which the server never sends as a success, maps to "stop").
const char* finish_reason_str(FinishReason r);

// {"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details"}.
json usage_json(const Usage& u);

// Completions logprobs: {"tokens", "token_logprobs", "top_logprobs", "text_offset"};
// text offsets start at `text_offset` (the length of text already sent for this choice).
json completion_logprobs_json(const std::vector<TokenLogprob>& lps, const TokenText& text,
                              size_t text_offset);
// Chat logprobs: {"content": [{"token", "logprob", "bytes", "top_logprobs"}], "refusal": null}.
json chat_logprobs_json(const std::vector<TokenLogprob>& lps, const TokenText& text);

// Shared header of every response object: id, object, created, model.
struct ResponseMeta {
  std::string id;
  std::string model;
  int64_t created = 0;
};

json completion_response(const ResponseMeta& m, const std::vector<ChoiceResult>& choices,
                         const Usage& usage, bool with_logprobs, const TokenText& text);
json chat_response(const ResponseMeta& m, const std::vector<ChoiceResult>& choices,
                   const Usage& usage, bool with_logprobs, const TokenText& text);

// Streaming chunks. `logprobs` may be null json. `usage_null` adds "usage": null (as OpenAI
// does on every chunk when include_usage was asked).
json completion_chunk(const ResponseMeta& m, int index, const std::string& text,
                      const json& logprobs, const char* finish_reason, bool usage_null);
// `delta` is {"role": ...}, {"content": ...} or {}.
json chat_chunk(const ResponseMeta& m, int index, const json& delta, const json& logprobs,
                const char* finish_reason, bool usage_null);
// Streamed tool calls, as OpenAI sends them: first a delta with the call's index, id, type and
// function name (arguments ""), then deltas with fragments of the arguments.
json tool_call_head_delta(int call_index, const ToolCallOut& call);
json tool_call_arguments_delta(int call_index, const std::string& fragment);
// The final usage-only chunk: "choices": [] and "usage".
json usage_chunk(const ResponseMeta& m, const char* object, const Usage& usage);

}  // namespace pagoda::server
