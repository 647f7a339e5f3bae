// Responses objects and items (see responses_build.h).
#include "server/openai/responses_build.h"

namespace pagoda::server {

json response_part_json(const ResponseItem& item, const std::string& text) {
  if (item.kind == ResponseItem::Kind::Reasoning) return {{"type", "reasoning_text"}, {"text", text}};
  return {{"type", "output_text"}, {"text", text}, {"annotations", json::array()}, {"logprobs", json::array()}};
}

json response_item_json(const ResponseItem& item, const char* status) {
  const bool open = std::string(status) == "in_progress";
  switch (item.kind) {
    case ResponseItem::Kind::Reasoning:
      return {{"id", item.id},
              {"type", "reasoning"},
              {"summary", json::array()},
              {"content", open ? json::array() : json::array({response_part_json(item, item.text)})},
              {"status", status}};
    case ResponseItem::Kind::Message:
      return {{"id", item.id},
              {"type", "message"},
              {"status", status},
              {"role", "assistant"},
              {"content", open ? json::array() : json::array({response_part_json(item, item.text)})}};
    case ResponseItem::Kind::FunctionCall:
      return {{"id", item.id},
              {"type", "function_call"},
              {"status", status},
              {"call_id", item.call.id},
              {"name", item.call.name},
              {"arguments", open ? "" : item.call.arguments}};
  }
  return nullptr;
}

json responses_usage_json(const Usage& u, int reasoning_tokens) {
  return {{"input_tokens", u.prompt_tokens},
          {"input_tokens_details", {{"cached_tokens", u.cached_prompt_tokens}}},
          {"output_tokens", u.completion_tokens},
          {"output_tokens_details", {{"reasoning_tokens", reasoning_tokens}}},
          {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

json response_object(const ResponseMeta& meta, const char* status, const json& output, const json& usage,
                     const json& settings) {
  json r = {{"id", meta.id},
            {"object", "response"},
            {"created_at", meta.created},
            {"status", status},
            {"error", nullptr},
            {"incomplete_details", nullptr},
            {"model", meta.model},
            {"output", output},
            {"usage", usage}};
  for (const auto& [key, value] : settings.items()) r[key] = value;
  return r;
}

nlohmann::ordered_json output_as_message(const json& output) {
  nlohmann::ordered_json message = {{"role", "assistant"}, {"content", ""}};
  std::string content;
  for (const json& item : output) {
    if (item["type"] == "message") {
      for (const json& part : item["content"]) content += part["text"].get<std::string>();
    } else if (item["type"] == "function_call") {
      message["tool_calls"].push_back({{"id", item["call_id"]},
                                       {"type", "function"},
                                       {"function", {{"name", item["name"]}, {"arguments", item["arguments"]}}}});
    }
  }
  message["content"] = content;
  return message;
}

}  // namespace pagoda::server
