// One Responses API answer in the making (the AnswerFormat of a POST /v1/responses): turns what
// the chat path's parsers release (reasoning, content, tool calls) into output items, and when
// streaming into OpenAI's typed events, each numbered by `sequence_number`:
//   response.created, response.in_progress,
//   per item: response.output_item.added,
//     message:   response.content_part.added, response.output_text.delta..., .output_text.done,
//                response.content_part.done
//     reasoning: the same with response.reasoning_text.delta / .done
//     function_call: response.function_call_arguments.delta, .function_call_arguments.done
//   response.output_item.done; then response.completed (response.incomplete when cut by
//   max_output_tokens), or response.failed.
// The gathered answer is built by the very same calls (with no sink), so streamed and gathered
// responses hold the same items. When stored, the finished response goes into the store with
// the conversation it continues.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "server/openai/generation.h"
#include "server/openai/responses_build.h"
#include "server/openai/responses_store.h"

namespace pagoda::server {

class ResponsesAnswer : public AnswerFormat {
 public:
  struct Setup {
    json settings;                         // the request's settings (responses_parse.h)
    ResponseStore* store = nullptr;        // null: not stored
    nlohmann::ordered_json conversation;   // stored with the output
    std::function<std::string(const char* prefix)> new_id;       // item ids
    std::function<int(const std::string& text)> count_tokens;   // reasoning tokens
  };

  explicit ResponsesAnswer(Setup setup) : setup_(std::move(setup)) {}

  const char* id_prefix() const override { return "resp_"; }
  ErrorShape error_shape() const override { return ErrorShape::OpenAI; }
  const char* prompt_param() const override { return "input"; }
  void begin(const ResponseMeta& meta) override { meta_ = meta; }
  bool open(httplib::DataSink& sink) override;
  bool output(httplib::DataSink* sink, const std::string& reasoning, const std::string& content,
              const std::vector<ToolCallOut>& calls) override;
  json close(httplib::DataSink* sink, const ChoiceResult& result, const Usage& usage) override;
  void fail(httplib::DataSink& sink, const ApiError& e) override;

 private:
  // Writes one event (with the next sequence number); true without a sink.
  bool emit(httplib::DataSink* sink, json event);
  // The text item being written, if its kind is `kind`; else closes any open item and opens one.
  bool text_item(httplib::DataSink* sink, ResponseItem::Kind kind, const std::string& text);
  bool close_item(httplib::DataSink* sink, const char* status);
  json output_json() const;
  json in_progress() const;

  Setup setup_;
  ResponseMeta meta_;
  std::vector<ResponseItem> items_;
  bool item_open_ = false;  // the last item is a text item still being written
  int sequence_ = 0;
};

}  // namespace pagoda::server
