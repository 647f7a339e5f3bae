// ResponsesAnswer: output items and typed SSE events (see responses_stream.h).
#include "server/openai/responses_stream.h"

#include <algorithm>

namespace pagoda::server {

namespace {

const char* delta_event(ResponseItem::Kind k) {
  return k == ResponseItem::Kind::Reasoning ? "response.reasoning_text.delta" : "response.output_text.delta";
}
const char* done_event(ResponseItem::Kind k) {
  return k == ResponseItem::Kind::Reasoning ? "response.reasoning_text.done" : "response.output_text.done";
}

}  // namespace

bool ResponsesAnswer::emit(httplib::DataSink* sink, json event) {
  if (!sink) return true;
  event["sequence_number"] = sequence_++;
  const std::string type = event["type"].get<std::string>();
  const std::string frame = "event: " + type + "\ndata: " + dump_json(event) + "\n\n";
  return sink->is_writable() && sink->write(frame.data(), frame.size());
}

json ResponsesAnswer::output_json() const {
  json out = json::array();
  for (size_t i = 0; i < items_.size(); ++i)
    out.push_back(response_item_json(items_[i], item_open_ && i + 1 == items_.size() ? "in_progress" : "completed"));
  return out;
}

json ResponsesAnswer::in_progress() const {
  return response_object(meta_, "in_progress", json::array(), nullptr, setup_.settings);
}

bool ResponsesAnswer::open(httplib::DataSink& sink) {
  return emit(&sink, {{"type", "response.created"}, {"response", in_progress()}}) &&
         emit(&sink, {{"type", "response.in_progress"}, {"response", in_progress()}});
}

bool ResponsesAnswer::close_item(httplib::DataSink* sink, const char* status) {
  if (!item_open_) return true;
  item_open_ = false;
  const ResponseItem& item = items_.back();
  const int index = (int)items_.size() - 1;
  const json part = response_part_json(item, item.text);
  json text_done = {{"type", done_event(item.kind)}, {"item_id", item.id}, {"output_index", index},
                    {"content_index", 0}, {"text", item.text}};
  if (item.kind == ResponseItem::Kind::Message) text_done["logprobs"] = json::array();
  return emit(sink, std::move(text_done)) &&
         emit(sink, {{"type", "response.content_part.done"}, {"item_id", item.id}, {"output_index", index},
                     {"content_index", 0}, {"part", part}}) &&
         emit(sink, {{"type", "response.output_item.done"}, {"output_index", index},
                     {"item", response_item_json(item, status)}});
}

bool ResponsesAnswer::text_item(httplib::DataSink* sink, ResponseItem::Kind kind, const std::string& text) {
  bool ok = true;
  if (!item_open_ || items_.back().kind != kind) {
    ok = close_item(sink, "completed");
    ResponseItem item;
    item.kind = kind;
    item.id = setup_.new_id(kind == ResponseItem::Kind::Reasoning ? "rs_" : "msg_");
    items_.push_back(std::move(item));
    item_open_ = true;
    const ResponseItem& it = items_.back();
    const int index = (int)items_.size() - 1;
    ok = ok &&
         emit(sink, {{"type", "response.output_item.added"}, {"output_index", index},
                     {"item", response_item_json(it, "in_progress")}}) &&
         emit(sink, {{"type", "response.content_part.added"}, {"item_id", it.id}, {"output_index", index},
                     {"content_index", 0}, {"part", response_part_json(it, "")}});
  }
  ResponseItem& item = items_.back();
  item.text += text;
  json delta = {{"type", delta_event(kind)}, {"item_id", item.id}, {"output_index", (int)items_.size() - 1},
                {"content_index", 0}, {"delta", text}};
  if (kind == ResponseItem::Kind::Message) delta["logprobs"] = json::array();
  return ok && emit(sink, std::move(delta));
}

bool ResponsesAnswer::output(httplib::DataSink* sink, const std::string& reasoning, const std::string& content,
                             const std::vector<ToolCallOut>& calls) {
  bool ok = true;
  if (!reasoning.empty()) ok = text_item(sink, ResponseItem::Kind::Reasoning, reasoning);
  if (ok && !content.empty()) ok = text_item(sink, ResponseItem::Kind::Message, content);
  for (const ToolCallOut& call : calls) {
    if (!ok || !close_item(sink, "completed")) return false;
    ResponseItem item;
    item.kind = ResponseItem::Kind::FunctionCall;
    item.id = setup_.new_id("fc_");
    item.call = call;
    items_.push_back(item);
    const int index = (int)items_.size() - 1;
    ok = emit(sink, {{"type", "response.output_item.added"}, {"output_index", index},
                     {"item", response_item_json(item, "in_progress")}}) &&
         emit(sink, {{"type", "response.function_call_arguments.delta"}, {"item_id", item.id},
                     {"output_index", index}, {"delta", call.arguments}}) &&
         emit(sink, {{"type", "response.function_call_arguments.done"}, {"item_id", item.id},
                     {"output_index", index}, {"name", call.name}, {"arguments", call.arguments}}) &&
         emit(sink, {{"type", "response.output_item.done"}, {"output_index", index},
                     {"item", response_item_json(item, "completed")}});
  }
  return ok;
}

json ResponsesAnswer::close(httplib::DataSink* sink, const ChoiceResult& result, const Usage& usage) {
  // Cut short by max_output_tokens (or the context): "incomplete", as is the item it cut.
  const bool cut = result.finish == FinishReason::Length;
  close_item(sink, cut ? "incomplete" : "completed");
  const int reasoning_tokens =
      result.reasoning.empty() || !setup_.count_tokens ? 0 : std::min(setup_.count_tokens(result.reasoning),
                                                                      usage.completion_tokens);
  json response = response_object(meta_, cut ? "incomplete" : "completed", output_json(),
                                   responses_usage_json(usage, reasoning_tokens), setup_.settings);
  if (cut) response["incomplete_details"] = {{"reason", "max_output_tokens"}};
  if (cut && !items_.empty() && items_.back().kind != ResponseItem::Kind::FunctionCall)
    response["output"].back()["status"] = "incomplete";
  if (setup_.store) {
    StoredResponse stored{response, setup_.conversation};
    stored.conversation.push_back(output_as_message(response["output"]));
    setup_.store->put(meta_.id, std::move(stored));
  }
  emit(sink, {{"type", cut ? "response.incomplete" : "response.completed"}, {"response", response}});
  return response;
}

void ResponsesAnswer::fail(httplib::DataSink& sink, const ApiError& e) {
  json response = response_object(meta_, "failed", output_json(), nullptr, setup_.settings);
  response["error"] = {{"code", e.code.empty() ? (e.status >= 500 ? "server_error" : e.type) : e.code},
                       {"message", e.what()}};
  response["store"] = false;
  emit(&sink, {{"type", "response.failed"}, {"response", response}});
}

}  // namespace pagoda::server
