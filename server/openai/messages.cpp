// Handlers: Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens). A request
// becomes a chat request (messages_parse.h) and runs through chat_spec and generate like any
// chat completion; MessagesAnswer (messages_stream.h) shapes the answer. Every refusal on these
// routes is in Anthropic's error shape.
#include "server/openai/handlers.h"
#include "server/openai/generation.h"
#include "server/openai/messages_parse.h"
#include "server/openai/messages_stream.h"

namespace pagoda::server {

void Handlers::messages(const httplib::Request& req, httplib::Response& res,
                        const std::shared_ptr<AccessRecord>& record) {
  GenSpec spec;
  try {
    MessagesRequest mr = parse_messages_request(parse_json_body(req.body));
    spec = chat_spec(mr.chat);
    spec.format = std::make_shared<MessagesAnswer>((int)spec.prompts.front().size(), mr.single_tool_call);
  } catch (const ApiError& e) {
    send_error(res, e, ErrorShape::Anthropic);
    return;
  } catch (const std::exception& e) {
    send_error(res, ApiError(400, std::string("Invalid messages: ") + e.what(), "invalid_request_error", "messages"),
               ErrorShape::Anthropic);
    return;
  }
  generate(req, res, record, std::move(spec));
}

void Handlers::count_message_tokens(const httplib::Request& req, httplib::Response& res) {
  try {
    MessagesRequest mr = parse_messages_request(parse_json_body(req.body), /*count_only=*/true);
    mr.chat.common.model = served_model(mr.chat.common.model);
    send_json(res, {{"input_tokens", chat_prompt(mr.chat).ids.size()}});
  } catch (const ApiError& e) {
    send_error(res, e, ErrorShape::Anthropic);
  } catch (const std::exception& e) {
    send_error(res, ApiError(400, std::string("Invalid messages: ") + e.what(), "invalid_request_error", "messages"),
               ErrorShape::Anthropic);
  }
}

}  // namespace pagoda::server
