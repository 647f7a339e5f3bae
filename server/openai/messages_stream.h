// One Messages API answer in the making (the AnswerFormat of a POST /v1/messages): turns what
// the chat path's parsers release (reasoning, content, tool calls) into Anthropic's content
// blocks (`thinking`, `text`, `tool_use`), and when streaming into its events:
//   message_start, ping,
//   per block: content_block_start, content_block_delta (thinking_delta / text_delta /
//   input_json_delta)..., content_block_stop;
//   message_delta (stop_reason, stop_sequence, usage), message_stop; or an `error` event.
// The gathered message is built by the very same calls (with no sink), so streamed and gathered
// answers hold the same blocks. stop_reason: max_tokens when cut by max_tokens (or the context),
// tool_use when the answer calls a tool, stop_sequence (naming it) when one of stop_sequences
// ended it, else end_turn. Usage: input_tokens (the prompt less what the prefix cache served),
// cache_read_input_tokens (what it served), output_tokens.
#pragma once

#include <string>
#include <vector>

#include "server/openai/generation.h"

namespace pagoda::server {

// The message's usage object.
json messages_usage_json(const Usage& u);
// "end_turn" | "max_tokens" | "stop_sequence" | "tool_use" for a finished choice.
const char* messages_stop_reason(const ChoiceResult& result, bool called_tool);

class MessagesAnswer : public AnswerFormat {
 public:
  // `prompt_tokens`: the prompt's length, reported by message_start before the engine has said
  // how much of it the prefix cache served. `single_tool_call`: keep the first tool call only.
  MessagesAnswer(int prompt_tokens, bool single_tool_call)
      : prompt_tokens_(prompt_tokens), single_tool_call_(single_tool_call) {}

  const char* id_prefix() const override { return "msg_"; }
  ErrorShape error_shape() const override { return ErrorShape::Anthropic; }
  const char* prompt_param() const override { return "messages"; }
  void begin(const ResponseMeta& meta) override { meta_ = meta; }
  bool open(httplib::DataSink& sink) override;
  bool output(httplib::DataSink* sink, const std::string& reasoning, const std::string& content,
              const std::vector<ToolCallOut>& calls) override;
  json close(httplib::DataSink* sink, const ChoiceResult& result, const Usage& usage) override;
  void fail(httplib::DataSink& sink, const ApiError& e) override;

 private:
  // One content block while it is built.
  struct Block {
    enum class Kind { Thinking, Text, ToolUse };
    Kind kind = Kind::Text;
    std::string text;  // Thinking, Text: the text so far
    ToolCallOut call;  // ToolUse: id, name, arguments (JSON text)
  };
  static json block_json(const Block& b, bool started);
  // Writes one event; true without a sink.
  static bool emit(httplib::DataSink* sink, const json& event);
  // The text block being written, if its kind is `kind`; else closes any open block and opens one.
  bool text_block(httplib::DataSink* sink, Block::Kind kind, const std::string& text);
  bool close_block(httplib::DataSink* sink);
  json message_json(const json& content, const char* stop_reason, const json& stop_sequence, const json& usage) const;

  const int prompt_tokens_;
  const bool single_tool_call_;
  ResponseMeta meta_;
  std::vector<Block> blocks_;
  bool block_open_ = false;  // the last block is a text or thinking block still being written
  bool called_tool_ = false;
};

}  // namespace pagoda::server
