// The Responses API's response side: the response object, its output items (message,
// function_call, reasoning) and usage, shaped as OpenAI's API reference defines them. No HTTP,
// no engine: unit-testable shapes.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "engine/engine_api.h"
#include "server/openai/response_build.h"

namespace pagoda::server {

// One output item while it is built.
struct ResponseItem {
  enum class Kind { Reasoning, Message, FunctionCall };
  Kind kind = Kind::Message;
  std::string id;    // rs_ / msg_ / fc_ ...
  std::string text;  // Reasoning, Message: the text so far
  ToolCallOut call;  // FunctionCall: call_id (call.id), name, arguments
};

// An item as the response reports it; `status` "in_progress" | "completed" | "incomplete".
// An in-progress reasoning or message item has no content parts yet.
json response_item_json(const ResponseItem& item, const char* status);
// The content part of a reasoning ({"type": "reasoning_text"}) or message
// ({"type": "output_text", "annotations": []}) item holding `text`.
json response_part_json(const ResponseItem& item, const std::string& text);

// {"input_tokens", "input_tokens_details": {"cached_tokens"}, "output_tokens",
//  "output_tokens_details": {"reasoning_tokens"}, "total_tokens"}.
json responses_usage_json(const Usage& u, int reasoning_tokens);

// The response object: id, object "response", created_at, status, error, incomplete_details,
// model, output, usage (null until known), then the request's settings (responses_parse.h).
json response_object(const ResponseMeta& meta, const char* status, const json& output,
                     const json& usage, const json& settings);

// A chat message (as templates get them) holding what `output` items said: the assistant turn a
// later previous_response_id continues from.
nlohmann::ordered_json output_as_message(const json& output);

}  // namespace pagoda::server
