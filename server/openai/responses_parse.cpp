// Responses request parsing: body -> chat request + reported settings (see responses_parse.h).
#include "server/openai/responses_parse.h"

#include "server/openai/request_fields.h"

namespace pagoda::server {

namespace {

// Text parts (input_text, output_text; "text" as chat spells it) -> chat's {"type": "text"}.
RequestJson text_parts(const RequestJson& content, const std::string& param) {
  if (content.is_string()) return content;
  if (!content.is_array()) invalid_value(param, "expected a string or an array of content parts.");
  RequestJson parts = RequestJson::array();
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string pp = param + "[" + std::to_string(i) + "]";
    const RequestJson& part = content[i];
    if (!part.is_object()) invalid_value(pp, "expected a content part object.");
    const RequestJson* type = json_field(part, "type");
    if (!type || !type->is_string()) invalid_value(pp + ".type", "expected a string.");
    if (*type != "input_text" && *type != "output_text" && *type != "text")
      invalid_value(pp + ".type", "only text parts (input_text, output_text) are supported, got '" +
                            type->get<std::string>() + "'.");
    parts.push_back({{"type", "text"}, {"text", required_string(part, "text", pp)}});
  }
  return parts;
}

// `input` -> chat messages.
RequestJson input_messages(const RequestJson& input) {
  RequestJson out = RequestJson::array();
  if (input.is_string()) {
    out.push_back({{"role", "user"}, {"content", input}});
    return out;
  }
  if (!input.is_array()) invalid_value("input", "expected a string or an array of input items.");
  for (size_t i = 0; i < input.size(); ++i) {
    const std::string param = "input[" + std::to_string(i) + "]";
    const RequestJson& item = input[i];
    if (!item.is_object()) invalid_value(param, "expected an input item object.");
    const RequestJson* t = json_field(item, "type");
    if (t && !t->is_string()) invalid_value(param + ".type", "expected a string.");
    const std::string type = t ? t->get<std::string>() : "message";
    if (type == "message") {
      const std::string role = required_string(item, "role", param);
      if (role != "user" && role != "system" && role != "developer" && role != "assistant")
        invalid_value(param + ".role", "expected user, system, developer or assistant, got '" + role + "'.");
      const RequestJson* content = json_field(item, "content");
      if (!content) invalid_value(param + ".content", "missing content.");
      out.push_back({{"role", role}, {"content", text_parts(*content, param + ".content")}});
    } else if (type == "function_call") {
      RequestJson call = {{"id", required_string(item, "call_id", param)},
                          {"type", "function"},
                          {"function", {{"name", required_string(item, "name", param)},
                                        {"arguments", required_string(item, "arguments", param)}}}};
      // Calls of one turn join the assistant message right before them.
      if (out.empty() || out.back()["role"] != "assistant")
        out.push_back({{"role", "assistant"}, {"content", ""}});
      out.back()["tool_calls"].push_back(std::move(call));
    } else if (type == "function_call_output") {
      const RequestJson* output = json_field(item, "output");
      if (!output) invalid_value(param + ".output", "missing output.");
      RequestJson content = text_parts(*output, param + ".output");
      out.push_back({{"role", "tool"},
                     {"tool_call_id", required_string(item, "call_id", param)},
                     {"content", std::move(content)}});
    } else if (type == "reasoning") {
      // The model's earlier thinking: chat templates leave it out of the prompt.
    } else {
      invalid_value(param + ".type", "'" + type +
                               "' items are not supported; expected message, function_call or "
                               "function_call_output.");
    }
  }
  return out;
}

// Flat function tools -> chat's {"type": "function", "function": {...}}.
RequestJson chat_tools(const RequestJson& tools) {
  if (!tools.is_array()) invalid_value("tools", "expected an array of tools.");
  RequestJson out = RequestJson::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string param = "tools[" + std::to_string(i) + "]";
    const RequestJson& tool = tools[i];
    if (!tool.is_object()) invalid_value(param, "expected a tool object.");
    const RequestJson* type = json_field(tool, "type");
    if (!type || *type != "function") invalid_value(param + ".type", "only 'function' tools are supported.");
    RequestJson fn = RequestJson::object();
    fn["name"] = required_string(tool, "name", param);
    for (const char* key : {"description", "parameters", "strict"})
      if (const RequestJson* v = json_field(tool, key)) fn[key] = *v;
    out.push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  return out;
}

RequestJson chat_tool_choice(const RequestJson& choice) {
  if (choice.is_string()) return choice;
  if (choice.is_object() && json_field(choice, "type") && choice["type"] == "function")
    return {{"type", "function"}, {"function", {{"name", required_string(choice, "name", "tool_choice")}}}};
  invalid_value("tool_choice", "expected 'none', 'auto', 'required' or {\"type\": \"function\", \"name\": ...}.");
}

// text.format -> response_format (null for plain text).
RequestJson chat_response_format(const RequestJson& text) {
  if (!text.is_object()) invalid_value("text", "expected an object such as {\"format\": {\"type\": \"text\"}}.");
  const RequestJson* format = json_field(text, "format");
  if (!format) return nullptr;
  if (!format->is_object()) invalid_value("text.format", "expected an object.");
  const RequestJson* type = json_field(*format, "type");
  if (!type || !type->is_string()) invalid_value("text.format.type", "expected 'text', 'json_object' or 'json_schema'.");
  if (*type == "text") return nullptr;
  if (*type == "json_object") return {{"type", "json_object"}};
  if (*type != "json_schema") invalid_value("text.format.type", "expected 'text', 'json_object' or 'json_schema'.");
  RequestJson js = RequestJson::object();
  for (const char* key : {"name", "schema", "strict"})
    if (const RequestJson* v = json_field(*format, key)) js[key] = *v;
  return {{"type", "json_schema"}, {"json_schema", std::move(js)}};
}

// Chat's fields as the Responses API spells them.
const ParamNames kResponsesNames = {
    {"response_format.json_schema", "text.format"}, {"response_format", "text.format"},
    {"max_tokens", "max_output_tokens"}, {"messages", "input"}, {"reasoning_effort", "reasoning.effort"}};

}  // namespace

std::string previous_response_id(const RequestJson& body) {
  const RequestJson* v = json_field(body, "previous_response_id");
  if (!v) return "";
  if (!v->is_string()) invalid_value("previous_response_id", "expected a string.");
  return v->get<std::string>();
}

ResponsesRequest parse_responses_request(const RequestJson& body, const RequestJson& previous) {
  ResponsesRequest r;
  const RequestJson* input = json_field(body, "input");
  if (!input)
    throw ApiError(400, "Missing required parameter: 'input'.", "invalid_request_error", "input",
                   "missing_required_parameter");
  r.conversation = previous.is_array() ? previous : RequestJson::array();
  for (auto& m : input_messages(*input)) r.conversation.push_back(std::move(m));
  if (r.conversation.empty()) invalid_value("input", "the input is empty.");

  RequestJson chat = RequestJson::object();
  // Fields that mean the same in both APIs (and the extensions pagoda takes on chat).
  for (const char* key : {"model", "temperature", "top_p", "stream", "user", "seed", "top_k", "min_p",
                          "presence_penalty", "frequency_penalty", "repetition_penalty", "stop",
                          "logit_bias", "ignore_eos", "speculative", "chat_template_kwargs",
                          "parallel_tool_calls"})
    if (const RequestJson* v = json_field(body, key)) chat[key] = *v;
  RequestJson messages = RequestJson::array();
  const RequestJson* instructions = json_field(body, "instructions");
  if (instructions) {
    if (!instructions->is_string()) invalid_value("instructions", "expected a string.");
    messages.push_back({{"role", "system"}, {"content", *instructions}});
  }
  for (const auto& m : r.conversation) messages.push_back(m);
  chat["messages"] = std::move(messages);
  if (const RequestJson* v = json_field(body, "max_output_tokens")) chat["max_tokens"] = *v;
  if (const RequestJson* v = json_field(body, "tools")) chat["tools"] = chat_tools(*v);
  if (const RequestJson* v = json_field(body, "tool_choice")) chat["tool_choice"] = chat_tool_choice(*v);
  if (const RequestJson* v = json_field(body, "text"))
    if (RequestJson rf = chat_response_format(*v); !rf.is_null()) chat["response_format"] = std::move(rf);
  const RequestJson* reasoning = json_field(body, "reasoning");
  if (reasoning) {
    if (!reasoning->is_object()) invalid_value("reasoning", "expected an object such as {\"effort\": \"low\"}.");
    if (const RequestJson* effort = json_field(*reasoning, "effort")) chat["reasoning_effort"] = *effort;
  }
  if (const RequestJson* v = json_field(body, "store")) {
    if (!v->is_boolean()) invalid_value("store", "expected a boolean.");
    r.store = v->get<bool>();
  }
  const RequestJson* metadata = json_field(body, "metadata");
  if (metadata && !metadata->is_object()) invalid_value("metadata", "expected an object of strings.");
  try {
    r.chat = parse_chat_request(chat);
  } catch (const ApiError& e) {
    throw renamed(e, kResponsesNames);
  }

  using json = nlohmann::json;
  const CommonRequest& c = r.chat.common;
  const RequestJson* text = json_field(body, "text");
  r.settings = {
      {"instructions", instructions ? json(*instructions) : json(nullptr)},
      {"max_output_tokens", c.max_tokens ? json(*c.max_tokens) : json(nullptr)},
      {"temperature", c.sampling.temperature},
      {"top_p", c.sampling.top_p},
      {"tools", json_field(body, "tools") ? json(body["tools"]) : json::array()},
      {"tool_choice", json_field(body, "tool_choice") ? json(body["tool_choice"]) : json("auto")},
      {"text", text && json_field(*text, "format") ? json(*text) : json{{"format", {{"type", "text"}}}}},
      {"parallel_tool_calls", r.chat.parallel_tool_calls},
      {"reasoning", {{"effort", reasoning && json_field(*reasoning, "effort") ? json((*reasoning)["effort"]) : json(nullptr)},
                     {"summary", nullptr}}},
      {"metadata", metadata ? json(*metadata) : json::object()},
      {"user", c.user.empty() ? json(nullptr) : json(c.user)},
      {"previous_response_id", previous_response_id(body).empty() ? json(nullptr) : json(previous_response_id(body))},
      {"truncation", "disabled"},
      {"background", false},
  };
  return r;
}

}  // namespace pagoda::server
