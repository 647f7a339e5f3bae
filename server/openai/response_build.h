// The OpenAI response side: what the engine produced -> response JSON, gathered (one
// completion object) or streamed (chunks). No HTTP and no engine calls here, so every shape is
// unit-testable.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine_api.h"

namespace pagoda::server {

using nlohmann::json;

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
  std::string reasoning;               // a reasoning model's <think> block (reasoning.h)
  std::vector<ToolCallOut> tool_calls;  // non-empty: message.tool_calls, finish "tool_calls"
  std::vector<int32_t> tokens;
  std::vector<TokenLogprob> logprobs;
  FinishReason finish = FinishReason::None;
  std::string stop_string;  // the stop string that ended the choice ("" when none did)
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
