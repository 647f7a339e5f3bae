// The Responses API's request side: a POST /v1/responses body -> the chat request it amounts
// to (so it runs through the chat path: template, tool calls, structured output, reasoning),
// plus the settings the response object reports back. `input` items become chat messages:
// messages with input_text / output_text parts keep their role, `function_call` items become
// an assistant turn's tool_calls, `function_call_output` items tool messages; `instructions`
// is a system message first. Flat function tools ({type, name, parameters}), tool_choice and
// text.format map onto their chat spellings. Refusals name the Responses field (ApiError 400).
#pragma once

#include <string>

#include "server/openai/request_parse.h"

namespace pagoda::server {

struct ResponsesRequest {
  ChatRequest chat;  // what runs; chat.common.stream is the request's `stream`
  // The conversation this response continues (the stored one, then this request's input) as
  // chat messages, without the instructions (which OpenAI does not carry over): stored with the
  // output for a later previous_response_id.
  RequestJson conversation;
  bool store = true;
  // The request's settings as the response object reports them (instructions, tools,
  // tool_choice, text, temperature, top_p, max_output_tokens, reasoning, metadata, ...).
  nlohmann::json settings;
};

// previous_response_id, "" when absent; ApiError(400) when it is not a string.
std::string previous_response_id(const RequestJson& body);

// `previous`: the stored conversation that previous_response_id names (null when none).
ResponsesRequest parse_responses_request(const RequestJson& body, const RequestJson& previous);

}  // namespace pagoda::server
