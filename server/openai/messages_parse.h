// Anthropic's Messages API, request side: a POST /v1/messages (or /v1/messages/count_tokens)
// body -> the chat request it amounts to, so it runs through the chat path (template, tool
// calls, structured output, reasoning). `system` (a string or text blocks) becomes a system
// message first; each message's blocks map onto chat messages: `text` joins the turn's content,
// an assistant's `tool_use` blocks become its tool_calls (id, name, input as arguments), a user's
// `tool_result` blocks become tool messages (an `is_error` result reads "Error: ..."), and
// `thinking` / `redacted_thinking` blocks are left out (chat templates drop earlier thinking).
// `image`, `document` and any other block is refused: this server runs text-only models.
// Custom tools ({name, description, input_schema}) become chat functions; tool_choice auto /
// any / tool / none become auto / required / a named function / none, so that any and tool
// are enforced by the structured-output engine as chat's required is. `thinking` enabled /
// disabled becomes the template variable enable_thinking. Refusals are 400s naming the field.
#pragma once

#include <optional>
#include <string>

#include "server/openai/request_parse.h"

namespace pagoda::server {

struct MessagesRequest {
  ChatRequest chat;  // what runs; chat.common.stream is the request's `stream`
  // tool_choice's disable_parallel_tool_use: the answer holds the first tool call only.
  bool single_tool_call = false;
};

// `count_only`: the body of /v1/messages/count_tokens, where max_tokens is not required.
MessagesRequest parse_messages_request(const RequestJson& body, bool count_only = false);

}  // namespace pagoda::server
