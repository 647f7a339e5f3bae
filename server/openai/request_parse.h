// The OpenAI request side: a request body -> validated structs, naming the offending field in
// every refusal (ApiError 400). No HTTP and no engine calls here, so every rule is
// unit-testable. Bodies are parsed once, keeping the client's key order: chat templates print
// tool schemas and tool-call arguments with `tojson`, and Python (whose rendering models are
// trained on) keeps that order.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/sampling_params.h"
#include "server/http/api_error.h"
#include "server/openai/structured_output.h"
#include "server/openai/tool_calls.h"

namespace pagoda::server {

// A request body as parsed: objects keep the client's key order.
using RequestJson = nlohmann::ordered_json;

// OpenAI's rule for /v1/completions: without max_tokens, 16 tokens are generated. (Chat has no
// such default: it runs until the model stops or the context is full.)
constexpr int kCompletionDefaultMaxTokens = 16;

// Parses a request body; a syntax error, nesting deeper than 64 levels or a non-object
// becomes a 400 ApiError.
RequestJson parse_json_body(const std::string& body);

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
  std::optional<int64_t> max_tokens;  // unset: the endpoint's default; not yet capped
  std::string max_tokens_param = "max_tokens";  // or max_completion_tokens: the field sent
  SamplingParams sampling;           // logprobs filled by the endpoint-specific parser
  StopParams stop;                   // max_tokens filled in later by the handler
  bool stream = false;
  bool include_usage = false;        // stream_options.include_usage
  int n_keep = -1;
  bool speculative = true;           // extension: false opts out of speculative decoding
  std::string user;
  // Structured output asked by response_format or an extension (structured_output.h); the
  // handler compiles it through the engine. tool_choice's constraint is the chat handler's.
  std::optional<RequestedConstraint> constraint;
};

struct CompletionRequest {
  CommonRequest common;
  std::vector<PromptInput> prompts;  // at least one
  bool echo = false;                 // prepend the prompt text to each choice
};

struct ChatRequest {
  CommonRequest common;
  // The messages as the chat template gets them: each has "role" and string "content"
  // (content-part arrays joined), plus any name/tool_calls/tool_call_id passed through. Tool
  // calls keep the client's key order, with "name" before "arguments" and arguments sent as a
  // JSON string decoded to the object (templates print them with `tojson`).
  RequestJson messages;
  RequestJson tools;                 // null when absent; as sent, in the client's order
  std::vector<std::string> tool_names;  // the functions in `tools`, in order
  ToolChoice tool_choice;            // Auto when absent (None when there are no tools)
  bool parallel_tool_calls = true;   // accepted; pagoda does not limit the number of calls
  bool add_generation_prompt = true;
  bool logprobs = false;
  // Extra template variables: chat_template_kwargs (such as {"enable_thinking": false}), plus
  // reasoning_effort when given; null when neither is.
  RequestJson template_variables;
};

// Validate a body and build the request; throw ApiError(400) naming the bad field.
// Unknown fields are ignored. Token ids are only checked to be >= 0 here (vocabulary size is
// checked by the handler, which knows it).
CompletionRequest parse_completion_request(const RequestJson& body);
// The prompts in field `key` ("prompt", embeddings' "input"): a string, a list of strings, a
// list of token ids or a list of token-id lists; 400 when absent or of another shape.
std::vector<PromptInput> parse_prompt_inputs(const RequestJson& body, const std::string& key);
ChatRequest parse_chat_request(const RequestJson& body);

// The optional `model` field of any request: "" when absent or null, 400 when not a string.
std::string parse_model_field(const RequestJson& body);

// chat_template_kwargs and reasoning_effort of a chat or Responses request (`effort_param`: where
// reasoning_effort sits, "reasoning_effort" or "reasoning.effort"), as template variables.
RequestJson parse_template_variables(const RequestJson& body, const RequestJson* effort,
                                     const std::string& effort_param);

}  // namespace pagoda::server
