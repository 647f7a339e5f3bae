// Messages request parsing: an Anthropic body -> the chat request it amounts to (see
// messages_parse.h).
#include "server/openai/messages_parse.h"

#include "server/openai/request_fields.h"

namespace pagoda::server {

namespace {

// Chat's fields as the Messages API spells them.
const ParamNames kMessagesNames = {{"stop", "stop_sequences"}, {"user", "metadata.user_id"}};

std::string block_type(const RequestJson& block, const std::string& param) {
  if (!block.is_object()) invalid_value(param, "expected a content block object.");
  const RequestJson* type = json_field(block, "type");
  if (!type || !type->is_string()) invalid_value(param + ".type", "expected a string.");
  return type->get<std::string>();
}

[[noreturn]] void unsupported_block(const std::string& type, const std::string& param) {
  if (type == "image" || type == "document")
    invalid_value(param + ".type", "'" + type + "' blocks are not supported: this server runs a text-only model.");
  invalid_value(param + ".type", "'" + type + "' blocks are not supported here.");
}

// Text blocks (a string, or an array of `text` blocks) -> one string, blocks joined by "\n".
std::string block_text(const RequestJson& content, const std::string& param) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) invalid_value(param, "expected a string or an array of content blocks.");
  std::string out;
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string bp = param + "[" + std::to_string(i) + "]";
    const std::string type = block_type(content[i], bp);
    if (type != "text") unsupported_block(type, bp);
    if (!out.empty()) out += "\n";
    out += required_string(content[i], "text", bp);
  }
  return out;
}

// One Anthropic message -> chat messages (a user turn's tool results become tool messages, in
// order, before its text).
void add_message(const RequestJson& m, const std::string& param, RequestJson& out) {
  if (!m.is_object()) invalid_value(param, "expected a message object.");
  const std::string role = required_string(m, "role", param);
  if (role != "user" && role != "assistant")
    invalid_value(param + ".role", "expected 'user' or 'assistant', got '" + role + "'.");
  const RequestJson* content = json_field(m, "content");
  if (!content) invalid_value(param + ".content", "missing content.");
  if (content->is_string()) {
    out.push_back({{"role", role}, {"content", *content}});
    return;
  }
  if (!content->is_array()) invalid_value(param + ".content", "expected a string or an array of content blocks.");
  std::string text;
  RequestJson calls = RequestJson::array();
  bool has_text = false;
  for (size_t i = 0; i < content->size(); ++i) {
    const std::string bp = param + ".content[" + std::to_string(i) + "]";
    const RequestJson& block = (*content)[i];
    const std::string type = block_type(block, bp);
    if (type == "text") {
      if (has_text) text += "\n";
      text += required_string(block, "text", bp);
      has_text = true;
    } else if (type == "tool_use" && role == "assistant") {
      const RequestJson* input = json_field(block, "input");
      if (input && !input->is_object()) invalid_value(bp + ".input", "expected an object.");
      calls.push_back({{"id", required_string(block, "id", bp)},
                       {"type", "function"},
                       {"function", {{"name", required_string(block, "name", bp)},
                                     {"arguments", input ? input->dump() : std::string("{}")}}}});
    } else if (type == "tool_result" && role == "user") {
      const RequestJson* result = json_field(block, "content");
      std::string body = result ? block_text(*result, bp + ".content") : "";
      const RequestJson* is_error = json_field(block, "is_error");
      if (is_error && !is_error->is_boolean()) invalid_value(bp + ".is_error", "expected a boolean.");
      if (is_error && is_error->get<bool>()) body = "Error: " + body;
      out.push_back({{"role", "tool"}, {"tool_call_id", required_string(block, "tool_use_id", bp)}, {"content", body}});
    } else if ((type == "thinking" || type == "redacted_thinking") && role == "assistant") {
      // Earlier thinking: chat templates leave it out of the prompt.
    } else {
      unsupported_block(type, bp);
    }
  }
  if (role == "assistant" && (has_text || !calls.empty())) {
    RequestJson turn = {{"role", "assistant"}, {"content", text}};
    if (!calls.empty()) turn["tool_calls"] = std::move(calls);
    out.push_back(std::move(turn));
  } else if (role == "user" && has_text) {
    out.push_back({{"role", "user"}, {"content", text}});
  }
}

// Custom tools -> chat functions.
RequestJson chat_tools(const RequestJson& tools) {
  if (!tools.is_array()) invalid_value("tools", "expected an array of tools.");
  RequestJson out = RequestJson::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string param = "tools[" + std::to_string(i) + "]";
    const RequestJson& tool = tools[i];
    if (!tool.is_object()) invalid_value(param, "expected a tool object.");
    if (const RequestJson* type = json_field(tool, "type"); type && *type != "custom")
      invalid_value(param + ".type", "only custom tools ({name, description, input_schema}) are supported.");
    const RequestJson* schema = json_field(tool, "input_schema");
    if (!schema || !schema->is_object()) invalid_value(param + ".input_schema", "expected a JSON schema object.");
    RequestJson fn = RequestJson::object();
    fn["name"] = required_string(tool, "name", param);
    if (const RequestJson* d = json_field(tool, "description")) fn["description"] = *d;
    fn["parameters"] = *schema;
    out.push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  return out;
}

// tool_choice -> chat's spelling; `single` gets disable_parallel_tool_use.
RequestJson chat_tool_choice(const RequestJson& choice, bool& single) {
  if (!choice.is_object()) invalid_value("tool_choice", "expected an object such as {\"type\": \"auto\"}.");
  if (const RequestJson* d = json_field(choice, "disable_parallel_tool_use")) {
    if (!d->is_boolean()) invalid_value("tool_choice.disable_parallel_tool_use", "expected a boolean.");
    single = d->get<bool>();
  }
  const std::string type = required_string(choice, "type", "tool_choice");
  if (type == "auto") return "auto";
  if (type == "any") return "required";
  if (type == "none") return "none";
  if (type == "tool") return {{"type", "function"}, {"function", {{"name", required_string(choice, "name", "tool_choice")}}}};
  invalid_value("tool_choice.type", "expected 'auto', 'any', 'tool' or 'none', got '" + type + "'.");
}

// thinking -> the template's enable_thinking (a chat_template_kwargs value of the client's wins).
void apply_thinking(const RequestJson& thinking, RequestJson& chat) {
  if (!thinking.is_object()) invalid_value("thinking", "expected an object such as {\"type\": \"enabled\", \"budget_tokens\": 2048}.");
  const std::string type = required_string(thinking, "type", "thinking");
  if (type != "enabled" && type != "disabled" && type != "adaptive")
    invalid_value("thinking.type", "expected 'enabled', 'adaptive' or 'disabled', got '" + type + "'.");
  if (const RequestJson* budget = json_field(thinking, "budget_tokens"))
    if (!budget->is_number_integer() || budget->get<int64_t>() < 1)
      invalid_value("thinking.budget_tokens", "expected a positive integer.");
  RequestJson& vars = chat["chat_template_kwargs"];
  if (vars.is_null()) vars = RequestJson::object();
  if (vars.is_object() && !vars.contains("enable_thinking")) vars["enable_thinking"] = type != "disabled";
}

}  // namespace

MessagesRequest parse_messages_request(const RequestJson& body, bool count_only) {
  MessagesRequest r;
  RequestJson chat = RequestJson::object();
  // Fields that mean the same in both APIs (and the extensions pagoda takes on chat).
  for (const char* key : {"model", "max_tokens", "temperature", "top_p", "top_k", "stream", "seed", "min_p",
                          "presence_penalty", "frequency_penalty", "repetition_penalty", "ignore_eos",
                          "speculative", "chat_template_kwargs"})
    if (const RequestJson* v = json_field(body, key)) chat[key] = *v;
  if (count_only) {
    chat.erase("max_tokens");
    chat.erase("stream");
  } else if (!json_field(body, "max_tokens")) {
    throw ApiError(400, "Missing required parameter: 'max_tokens'.", "invalid_request_error", "max_tokens",
                   "missing_required_parameter");
  }
  RequestJson messages = RequestJson::array();
  if (const RequestJson* system = json_field(body, "system"))
    messages.push_back({{"role", "system"}, {"content", block_text(*system, "system")}});
  const RequestJson* input = json_field(body, "messages");
  if (!input)
    throw ApiError(400, "Missing required parameter: 'messages'.", "invalid_request_error", "messages",
                   "missing_required_parameter");
  if (!input->is_array()) invalid_value("messages", "expected an array of messages.");
  if (input->empty()) invalid_value("messages", "the list of messages is empty; at least one is required.");
  for (size_t i = 0; i < input->size(); ++i) add_message((*input)[i], "messages[" + std::to_string(i) + "]", messages);
  chat["messages"] = std::move(messages);
  if (const RequestJson* v = json_field(body, "stop_sequences")) {
    if (!v->is_array()) invalid_value("stop_sequences", "expected an array of strings.");
    chat["stop"] = *v;
  }
  if (const RequestJson* v = json_field(body, "tools")) chat["tools"] = chat_tools(*v);
  if (const RequestJson* v = json_field(body, "tool_choice")) chat["tool_choice"] = chat_tool_choice(*v, r.single_tool_call);
  if (const RequestJson* v = json_field(body, "thinking")) apply_thinking(*v, chat);
  if (const RequestJson* metadata = json_field(body, "metadata")) {
    if (!metadata->is_object()) invalid_value("metadata", "expected an object such as {\"user_id\": \"...\"}.");
    if (const RequestJson* user = json_field(*metadata, "user_id")) chat["user"] = *user;
  }
  try {
    r.chat = parse_chat_request(chat);
  } catch (const ApiError& e) {
    throw renamed(e, kMessagesNames);
  }
  return r;
}

}  // namespace pagoda::server
