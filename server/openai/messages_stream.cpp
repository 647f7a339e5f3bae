// MessagesAnswer: Anthropic's content blocks and stream events (see messages_stream.h).
#include "server/openai/messages_stream.h"

#include <algorithm>

namespace pagoda::server {

json messages_usage_json(const Usage& u) {
  const int cached = std::clamp(u.cached_prompt_tokens, 0, u.prompt_tokens);
  return {{"input_tokens", u.prompt_tokens - cached},
          {"cache_creation_input_tokens", 0},
          {"cache_read_input_tokens", cached},
          {"output_tokens", u.completion_tokens}};
}

const char* messages_stop_reason(const ChoiceResult& result, bool called_tool) {
  if (called_tool) return "tool_use";
  if (result.finish == FinishReason::Length) return "max_tokens";
  if (!result.stop_string.empty()) return "stop_sequence";
  return "end_turn";
}

json MessagesAnswer::block_json(const Block& b, bool started) {
  switch (b.kind) {
    case Block::Kind::Thinking:
      return {{"type", "thinking"}, {"thinking", started ? "" : b.text}, {"signature", ""}};
    case Block::Kind::Text:
      return {{"type", "text"}, {"text", started ? "" : b.text}};
    case Block::Kind::ToolUse: {
      json input = json::object();
      if (!started) {
        json parsed = json::parse(b.call.arguments, nullptr, /*allow_exceptions=*/false);
        if (parsed.is_object()) input = std::move(parsed);
      }
      return {{"type", "tool_use"}, {"id", b.call.id}, {"name", b.call.name}, {"input", std::move(input)}};
    }
  }
  return nullptr;
}

bool MessagesAnswer::emit(httplib::DataSink* sink, const json& event) {
  if (!sink) return true;
  const std::string frame = "event: " + event["type"].get<std::string>() + "\ndata: " + dump_json(event) + "\n\n";
  return sink->is_writable() && sink->write(frame.data(), frame.size());
}

json MessagesAnswer::message_json(const json& content, const char* stop_reason, const json& stop_sequence,
                                  const json& usage) const {
  return {{"id", meta_.id},
          {"type", "message"},
          {"role", "assistant"},
          {"model", meta_.model},
          {"content", content},
          {"stop_reason", stop_reason ? json(stop_reason) : json(nullptr)},
          {"stop_sequence", stop_sequence},
          {"usage", usage}};
}

bool MessagesAnswer::open(httplib::DataSink& sink) {
  Usage u;
  u.prompt_tokens = prompt_tokens_;
  return emit(&sink, {{"type", "message_start"},
                      {"message", message_json(json::array(), nullptr, nullptr, messages_usage_json(u))}}) &&
         emit(&sink, {{"type", "ping"}});
}

bool MessagesAnswer::close_block(httplib::DataSink* sink) {
  if (!block_open_) return true;
  block_open_ = false;
  return emit(sink, {{"type", "content_block_stop"}, {"index", (int)blocks_.size() - 1}});
}

bool MessagesAnswer::text_block(httplib::DataSink* sink, Block::Kind kind, const std::string& text) {
  bool ok = true;
  if (!block_open_ || blocks_.back().kind != kind) {
    ok = close_block(sink);
    blocks_.push_back({kind, "", {}});
    block_open_ = true;
    ok = ok && emit(sink, {{"type", "content_block_start"}, {"index", (int)blocks_.size() - 1},
                           {"content_block", block_json(blocks_.back(), /*started=*/true)}});
  }
  blocks_.back().text += text;
  const json delta = kind == Block::Kind::Thinking ? json{{"type", "thinking_delta"}, {"thinking", text}}
                                                   : json{{"type", "text_delta"}, {"text", text}};
  return ok && emit(sink, {{"type", "content_block_delta"}, {"index", (int)blocks_.size() - 1}, {"delta", delta}});
}

bool MessagesAnswer::output(httplib::DataSink* sink, const std::string& reasoning, const std::string& content,
                            const std::vector<ToolCallOut>& calls) {
  bool ok = true;
  if (!reasoning.empty()) ok = text_block(sink, Block::Kind::Thinking, reasoning);
  if (ok && !content.empty()) ok = text_block(sink, Block::Kind::Text, content);
  for (const ToolCallOut& call : calls) {
    if (single_tool_call_ && called_tool_) break;
    if (!ok || !close_block(sink)) return false;
    called_tool_ = true;
    blocks_.push_back({Block::Kind::ToolUse, "", call});
    const int index = (int)blocks_.size() - 1;
    ok = emit(sink, {{"type", "content_block_start"}, {"index", index},
                     {"content_block", block_json(blocks_.back(), /*started=*/true)}}) &&
         emit(sink, {{"type", "content_block_delta"}, {"index", index},
                     {"delta", {{"type", "input_json_delta"}, {"partial_json", call.arguments}}}}) &&
         emit(sink, {{"type", "content_block_stop"}, {"index", index}});
  }
  return ok;
}

json MessagesAnswer::close(httplib::DataSink* sink, const ChoiceResult& result, const Usage& usage) {
  close_block(sink);
  const char* reason = messages_stop_reason(result, called_tool_);
  const json stop_sequence = std::string(reason) == "stop_sequence" ? json(result.stop_string) : json(nullptr);
  const json u = messages_usage_json(usage);
  emit(sink, {{"type", "message_delta"},
              {"delta", {{"stop_reason", reason}, {"stop_sequence", stop_sequence}}},
              {"usage", u}});
  emit(sink, {{"type", "message_stop"}});
  json content = json::array();
  for (const Block& b : blocks_) content.push_back(block_json(b, /*started=*/false));
  return message_json(content, reason, stop_sequence, u);
}

void MessagesAnswer::fail(httplib::DataSink& sink, const ApiError& e) {
  emit(&sink, anthropic_error_body(e));
}

}  // namespace pagoda::server
