// Responses request parsing: body -> chat request + reported settings (see responses_parse.h).
#include "server/openai/responses_parse.h"

namespace pagoda::server {

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& what) {
  throw ApiError(400, "Invalid value for '" + param + "': " + what, "invalid_request_error", param);
}

const RequestJson* field(const RequestJson& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

std::string required_string(const RequestJson& obj, const char* key, const std::string& param) {
  const RequestJson* v = field(obj, key);
  if (!v || !v->is_string()) bad(param + "." + key, "expected a string.");
  return v->get<std::string>();
}

// Text parts (input_text, output_text; "text" as chat spells it) -> chat's {"type": "text"}.
RequestJson text_parts(const RequestJson& content, const std::string& param) {
  if (content.is_string()) return content;
  if (!content.is_array()) bad(param, "expected a string or an array of content parts.");
  RequestJson parts = RequestJson::array();
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string pp = param + "[" + std::to_string(i) + "]";
    const RequestJson& part = content[i];
    if (!part.is_object()) bad(pp, "expected a content part object.");
    const RequestJson* type = field(part, "type");
    if (!type || !type->is_string()) bad(pp + ".type", "expected a string.");
    if (*type != "input_text" && *type != "output_text" && *type != "text")
      bad(pp + ".type", "only text parts (input_text, output_text) are supported, got '" +
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
  if (!input.is_array()) bad("input", "expected a string or an array of input items.");
  for (size_t i = 0; i < input.size(); ++i) {
    const std::string param = "input[" + std::to_string(i) + "]";
    const RequestJson& item = input[i];
    if (!item.is_object()) bad(param, "expected an input item object.");
    const RequestJson* t = field(item, "type");
    if (t && !t->is_string()) bad(param + ".type", "expected a string.");
    const std::string type = t ? t->get<std::string>() : "message";
    if (type == "message") {
      const std::string role = required_string(item, "role", param);
      if (role != "user" && role != "system" && role != "developer" && role != "assistant")
        bad(param + ".role", "expected user, system, developer or assistant, got '" + role + "'.");
      const RequestJson* content = field(item, "content");
      if (!content) bad(param + ".content", "missing content.");
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
      const RequestJson* output = field(item, "output");
      if (!output) bad(param + ".output", "missing output.");
      RequestJson content = text_parts(*output, param + ".output");
      out.push_back({{"role", "tool"},
                     {"tool_call_id", required_string(item, "call_id", param)},
                     {"content", std::move(content)}});
    } else if (type == "reasoning") {
      // The model's earlier thinking: chat templates leave it out of the prompt.
    } else {
      bad(param + ".type", "'" + type +
                               "' items are not supported; expected message, function_call or "
                               "function_call_output.");
    }
  }
  return out;
}

// Flat function tools -> chat's {"type": "function", "function": {...}}.
RequestJson chat_tools(const RequestJson& tools) {
  if (!tools.is_array()) bad("tools", "expected an array of tools.");
  RequestJson out = RequestJson::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string param = "tools[" + std::to_string(i) + "]";
    const RequestJson& tool = tools[i];
    if (!tool.is_object()) bad(param, "expected a tool object.");
    const RequestJson* type = field(tool, "type");
    if (!type || *type != "function") bad(param + ".type", "only 'function' tools are supported.");
    RequestJson fn = RequestJson::object();
    fn["name"] = required_string(tool, "name", param);
    for (const char* key : {"description", "parameters", "strict"})
      if (const RequestJson* v = field(tool, key)) fn[key] = *v;
    out.push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  return out;
}

RequestJson chat_tool_choice(const RequestJson& choice) {
  if (choice.is_string()) return choice;
  if (choice.is_object() && field(choice, "type") && choice["type"] == "function")
    return {{"type", "function"}, {"function", {{"name", required_string(choice, "name", "tool_choice")}}}};
  bad("tool_choice", "expected 'none', 'auto', 'required' or {\"type\": \"function\", \"name\": ...}.");
}

// text.format -> response_format (null for plain text).
RequestJson chat_response_format(const RequestJson& text) {
  if (!text.is_object()) bad("text", "expected an object such as {\"format\": {\"type\": \"text\"}}.");
  const RequestJson* format = field(text, "format");
  if (!format) return nullptr;
  if (!format->is_object()) bad("text.format", "expected an object.");
  const RequestJson* type = field(*format, "type");
  if (!type || !type->is_string()) bad("text.format.type", "expected 'text', 'json_object' or 'json_schema'.");
  if (*type == "text") return nullptr;
  if (*type == "json_object") return {{"type", "json_object"}};
  if (*type != "json_schema") bad("text.format.type", "expected 'text', 'json_object' or 'json_schema'.");
  RequestJson js = RequestJson::object();
  for (const char* key : {"name", "schema", "strict"})
    if (const RequestJson* v = field(*format, key)) js[key] = *v;
  return {{"type", "json_schema"}, {"json_schema", std::move(js)}};
}

// A chat refusal, renamed to the Responses field the client sent.
ApiError renamed(const ApiError& e) {
  static const std::pair<const char*, const char*> kNames[] = {
      {"response_format.json_schema", "text.format"}, {"response_format", "text.format"},
      {"max_tokens", "max_output_tokens"}, {"messages", "input"}, {"reasoning_effort", "reasoning.effort"}};
  for (const auto& [from, to] : kNames) {
    if (e.param.rfind(from, 0) == 0) {
      std::string param = to + e.param.substr(std::string(from).size());
      std::string msg = e.what();
      if (size_t at = msg.find("'" + e.param + "'"); at != std::string::npos)
        msg.replace(at, e.param.size() + 2, "'" + param + "'");
      return ApiError(e.status, msg, e.type, param, e.code);
    }
  }
  return e;
}

}  // namespace

std::string previous_response_id(const RequestJson& body) {
  const RequestJson* v = field(body, "previous_response_id");
  if (!v) return "";
  if (!v->is_string()) bad("previous_response_id", "expected a string.");
  return v->get<std::string>();
}

ResponsesRequest parse_responses_request(const RequestJson& body, const RequestJson& previous) {
  ResponsesRequest r;
  const RequestJson* input = field(body, "input");
  if (!input)
    throw ApiError(400, "Missing required parameter: 'input'.", "invalid_request_error", "input",
                   "missing_required_parameter");
  r.conversation = previous.is_array() ? previous : RequestJson::array();
  for (auto& m : input_messages(*input)) r.conversation.push_back(std::move(m));
  if (r.conversation.empty()) bad("input", "the input is empty.");

  RequestJson chat = RequestJson::object();
  // Fields that mean the same in both APIs (and the extensions pagoda takes on chat).
  for (const char* key : {"model", "temperature", "top_p", "stream", "user", "seed", "top_k", "min_p",
                          "presence_penalty", "frequency_penalty", "repetition_penalty", "stop",
                          "logit_bias", "ignore_eos", "speculative", "chat_template_kwargs",
                          "parallel_tool_calls"})
    if (const RequestJson* v = field(body, key)) chat[key] = *v;
  RequestJson messages = RequestJson::array();
  const RequestJson* instructions = field(body, "instructions");
  if (instructions) {
    if (!instructions->is_string()) bad("instructions", "expected a string.");
    messages.push_back({{"role", "system"}, {"content", *instructions}});
  }
  for (const auto& m : r.conversation) messages.push_back(m);
  chat["messages"] = std::move(messages);
  if (const RequestJson* v = field(body, "max_output_tokens")) chat["max_tokens"] = *v;
  if (const RequestJson* v = field(body, "tools")) chat["tools"] = chat_tools(*v);
  if (const RequestJson* v = field(body, "tool_choice")) chat["tool_choice"] = chat_tool_choice(*v);
  if (const RequestJson* v = field(body, "text"))
    if (RequestJson rf = chat_response_format(*v); !rf.is_null()) chat["response_format"] = std::move(rf);
  const RequestJson* reasoning = field(body, "reasoning");
  if (reasoning) {
    if (!reasoning->is_object()) bad("reasoning", "expected an object such as {\"effort\": \"low\"}.");
    if (const RequestJson* effort = field(*reasoning, "effort")) chat["reasoning_effort"] = *effort;
  }
  if (const RequestJson* v = field(body, "store")) {
    if (!v->is_boolean()) bad("store", "expected a boolean.");
    r.store = v->get<bool>();
  }
  const RequestJson* metadata = field(body, "metadata");
  if (metadata && !metadata->is_object()) bad("metadata", "expected an object of strings.");
  try {
    r.chat = parse_chat_request(chat);
  } catch (const ApiError& e) {
    throw renamed(e);
  }

  using json = nlohmann::json;
  const CommonRequest& c = r.chat.common;
  const RequestJson* text = field(body, "text");
  r.settings = {
      {"instructions", instructions ? json(*instructions) : json(nullptr)},
      {"max_output_tokens", c.max_tokens ? json(*c.max_tokens) : json(nullptr)},
      {"temperature", c.sampling.temperature},
      {"top_p", c.sampling.top_p},
      {"tools", field(body, "tools") ? json(body["tools"]) : json::array()},
      {"tool_choice", field(body, "tool_choice") ? json(body["tool_choice"]) : json("auto")},
      {"text", text && field(*text, "format") ? json(*text) : json{{"format", {{"type", "text"}}}}},
      {"parallel_tool_calls", r.chat.parallel_tool_calls},
      {"reasoning", {{"effort", reasoning && field(*reasoning, "effort") ? json((*reasoning)["effort"]) : json(nullptr)},
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
