// Request parsing: body -> validated CompletionRequest / ChatRequest (see request_parse.h).
#include "server/openai/request_parse.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "server/openai/json_scan.h"

namespace pagoda::server {

namespace {

// Deepest nesting of arrays/objects in `text` (outside strings). Checked before parsing:
// copying or rendering a value nested a million levels deep recurses off the stack.
size_t json_depth(const std::string& text) {
  size_t depth = 0, max_depth = 0;
  JsonStringSkipper strings;
  for (char c : text) {
    if (!strings.structural(c)) continue;
    if (c == '[' || c == '{') {
      max_depth = std::max(max_depth, ++depth);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return max_depth;
}

constexpr size_t kMaxJsonDepth = 64;

}  // namespace

RequestJson parse_json_body(const std::string& body) {
  if (json_depth(body) > kMaxJsonDepth)
    throw ApiError(400, "The JSON body is nested more than " + std::to_string(kMaxJsonDepth) +
                            " levels deep.",
                   "invalid_request_error", "", "invalid_json");
  RequestJson j = RequestJson::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded())
    throw ApiError(400, "We could not parse the JSON body of your request: it is not valid JSON.",
                   "invalid_request_error", "", "invalid_json");
  if (!j.is_object())
    throw ApiError(400, "The request body must be a JSON object.", "invalid_request_error", "",
                   "invalid_json");
  return j;
}

namespace {

constexpr int kMaxN = 128;
constexpr int kMaxLogprobs = 20;
constexpr size_t kMaxStops = 16;

[[noreturn]] void bad(const std::string& param, const std::string& what) {
  throw ApiError(400, "Invalid value for '" + param + "': " + what, "invalid_request_error", param);
}

// Typed, optional field access: absent or null fields give nullopt; a wrong type throws.
class Fields {
 public:
  explicit Fields(const RequestJson& obj) : obj_(obj) {}

  const RequestJson* get(const char* key) const {
    auto it = obj_.find(key);
    if (it == obj_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  std::optional<bool> boolean(const char* key) const {
    const RequestJson* v = get(key);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) bad(key, "expected a boolean.");
    return v->get<bool>();
  }

  std::optional<int64_t> integer(const char* key) const {
    const RequestJson* v = get(key);
    if (!v) return std::nullopt;
    if (v->is_number_integer()) return v->get<int64_t>();
    // 3.0 is accepted as 3, as Python clients sometimes send floats.
    if (v->is_number_float()) {
      double d = v->get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15) return (int64_t)d;
    }
    bad(key, "expected an integer.");
  }

  std::optional<double> number(const char* key) const {
    const RequestJson* v = get(key);
    if (!v) return std::nullopt;
    if (!v->is_number()) bad(key, "expected a number.");
    double d = v->get<double>();
    if (!std::isfinite(d)) bad(key, "expected a finite number.");
    return d;
  }

  std::optional<std::string> string(const char* key) const {
    const RequestJson* v = get(key);
    if (!v) return std::nullopt;
    if (!v->is_string()) bad(key, "expected a string.");
    return v->get<std::string>();
  }

 private:
  const RequestJson& obj_;
};

int32_t token_id(const RequestJson& v, const std::string& param) {
  if (!v.is_number_integer()) bad(param, "expected an integer token id.");
  int64_t id = v.get<int64_t>();
  if (id < 0 || id > std::numeric_limits<int32_t>::max()) bad(param, "token id out of range.");
  return (int32_t)id;
}

std::vector<int32_t> token_array(const RequestJson& arr, const std::string& param) {
  if (arr.empty()) bad(param, "the token list is empty.");
  std::vector<int32_t> out;
  out.reserve(arr.size());
  for (size_t i = 0; i < arr.size(); ++i)
    out.push_back(token_id(arr[i], param + "[" + std::to_string(i) + "]"));
  return out;
}

std::vector<std::string> parse_stop(const Fields& f) {
  const RequestJson* v = f.get("stop");
  std::vector<std::string> out;
  if (!v) return out;
  if (v->is_string()) {
    if (!v->get<std::string>().empty()) out.push_back(v->get<std::string>());
    return out;
  }
  if (!v->is_array()) bad("stop", "expected a string or an array of strings.");
  if (v->size() > kMaxStops) bad("stop", "at most " + std::to_string(kMaxStops) + " stop strings.");
  for (size_t i = 0; i < v->size(); ++i) {
    if (!(*v)[i].is_string()) bad("stop[" + std::to_string(i) + "]", "expected a string.");
    std::string s = (*v)[i].get<std::string>();
    if (!s.empty()) out.push_back(std::move(s));
  }
  return out;
}

void check_range(const char* key, double v, double lo, double hi, bool lo_open = false) {
  if (v < lo || v > hi || (lo_open && v == lo)) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "%g is out of range; expected a value in %s%g, %g].", v,
                  lo_open ? "(" : "[", lo, hi);
    bad(key, buf);
  }
}

// `zero_max_tokens`: max_tokens 0 is accepted (completions with echo: the prompt only).
CommonRequest parse_common(const RequestJson& body, bool chat, bool zero_max_tokens = false) {
  Fields f(body);
  CommonRequest r;
  r.model = f.string("model").value_or("");
  r.constraint = parse_output_constraint(body);
  if (auto n = f.integer("n")) {
    if (*n < 1 || *n > kMaxN) bad("n", "must be between 1 and " + std::to_string(kMaxN) + ".");
    r.n = (int)*n;
  }
  // A count of any size: one beyond int64 saturates, so the handler's cap answers "at most N".
  auto count = [&](const char* key) -> std::optional<int64_t> {
    const RequestJson* v = f.get(key);
    if (v && v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
      return std::numeric_limits<int64_t>::max();
    if (v && v->is_number_float() && v->get<double>() >= 9e15 && v->get<double>() == std::floor(v->get<double>()))
      return std::numeric_limits<int64_t>::max();  // 1e20, or an integer too long for uint64
    return f.integer(key);
  };
  std::optional<int64_t> mt = count("max_tokens");
  const char* mt_key = "max_tokens";
  if (chat) {
    if (auto mct = count("max_completion_tokens")) {
      mt = mct;
      mt_key = "max_completion_tokens";
    }
  }
  if (mt) {
    if (*mt == 0 && !zero_max_tokens && !chat)
      bad(mt_key, "must be at least 1 (0 is accepted only with echo, to score the prompt).");
    if (*mt < (zero_max_tokens ? 0 : 1)) bad(mt_key, "must be at least 1.");
    r.max_tokens = *mt;  // the upper bound is the server's (the engine's MaxTokensRule)
    r.max_tokens_param = mt_key;
  }
  SamplingParams& s = r.sampling;
  if (auto t = f.number("temperature")) {
    if (*t < 0) bad("temperature", "must be >= 0.");
    s.temperature = (float)*t;
  }
  if (auto v = f.number("top_p")) {
    check_range("top_p", *v, 0, 1, /*lo_open=*/true);
    s.top_p = (float)*v;
  }
  if (auto v = f.integer("top_k")) {
    if (*v < -1) bad("top_k", "must be -1 (off), 0 (off) or a positive integer.");
    s.top_k = *v < 0 ? 0 : (int)std::min<int64_t>(*v, std::numeric_limits<int32_t>::max());
  }
  if (auto v = f.number("min_p")) {
    check_range("min_p", *v, 0, 1);
    s.min_p = (float)*v;
  }
  if (auto v = f.number("presence_penalty")) {
    check_range("presence_penalty", *v, -2, 2);
    s.presence_penalty = (float)*v;
  }
  if (auto v = f.number("frequency_penalty")) {
    check_range("frequency_penalty", *v, -2, 2);
    s.frequency_penalty = (float)*v;
  }
  if (auto v = f.number("repetition_penalty")) {
    if (*v <= 0) bad("repetition_penalty", "must be > 0.");
    s.repetition_penalty = (float)*v;
  }
  if (auto v = f.integer("seed")) s.seed = (uint64_t)*v;
  if (const RequestJson* lb = f.get("logit_bias")) {
    if (!lb->is_object()) bad("logit_bias", "expected an object mapping token ids to biases.");
    for (const auto& [k, v] : lb->items()) {
      std::string param = "logit_bias." + k;
      char* end = nullptr;
      long long id = std::strtoll(k.c_str(), &end, 10);
      if (k.empty() || *end != '\0' || id < 0 || id > std::numeric_limits<int32_t>::max())
        bad(param, "keys must be token ids.");
      if (!v.is_number()) bad(param, "expected a number.");
      double b = v.get<double>();
      if (!std::isfinite(b)) bad(param, "expected a finite number.");
      check_range(param.c_str(), b, -100, 100);
      s.logit_bias[(int32_t)id] = (float)b;
    }
  }
  r.stop.stop = parse_stop(f);
  if (const RequestJson* ids = f.get("stop_token_ids")) {
    if (!ids->is_array()) bad("stop_token_ids", "expected an array of token ids.");
    for (size_t i = 0; i < ids->size(); ++i)
      r.stop.stop_token_ids.push_back(
          token_id((*ids)[i], "stop_token_ids[" + std::to_string(i) + "]"));
  }
  r.stop.ignore_eos = f.boolean("ignore_eos").value_or(false);
  r.stream = f.boolean("stream").value_or(false);
  if (const RequestJson* so = f.get("stream_options")) {
    if (!so->is_object()) bad("stream_options", "expected an object.");
    Fields sf(*so);
    try {
      r.include_usage = sf.boolean("include_usage").value_or(false);
    } catch (const ApiError&) {
      bad("stream_options.include_usage", "expected a boolean.");
    }
  }
  if (auto v = f.integer("n_keep")) {
    if (*v < -1 || *v > std::numeric_limits<int32_t>::max()) bad("n_keep", "must be >= -1.");
    r.n_keep = (int)*v;
  }
  r.speculative = f.boolean("speculative").value_or(true);
  r.user = f.string("user").value_or("");
  return r;
}

// Content as a string: a plain string, or an array of {"type": "text", "text": ...} parts.
std::string message_content(const RequestJson& content, const std::string& param) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) bad(param, "expected a string or an array of content parts.");
  std::string out;
  for (size_t i = 0; i < content.size(); ++i) {
    std::string pp = param + "[" + std::to_string(i) + "]";
    const RequestJson& part = content[i];
    if (!part.is_object()) bad(pp, "expected a content part object.");
    auto type = part.find("type");
    if (type == part.end() || !type->is_string()) bad(pp + ".type", "expected a string.");
    if (*type != "text")
      bad(pp + ".type", "only 'text' content parts are supported, got '" +
                            type->get<std::string>() + "'.");
    auto text = part.find("text");
    if (text == part.end() || !text->is_string()) bad(pp + ".text", "expected a string.");
    if (!out.empty()) out += "\n";
    out += text->get<std::string>();
  }
  return out;
}

// Tool calls sent back in the conversation, made the way templates expect them. Clients send
// a call's arguments as the JSON string they received; templates print them with `tojson`,
// which would quote that string a second time, so (like vLLM and llama.cpp) they get the
// decoded object, in the client's key order. And `function` lists "name" before "arguments"
// (templates such as Mistral's print the whole object, and models were trained on that order),
// whatever order the client's JSON library left them in.
void prepare_tool_calls(RequestJson& calls) {
  if (!calls.is_array()) return;
  for (auto& call : calls) {
    if (!call.is_object()) continue;
    auto fn = call.find("function");
    if (fn == call.end() || !fn->is_object()) continue;
    auto args = fn->find("arguments");
    if (args != fn->end() && args->is_string()) {
      const std::string& text = args->get_ref<const std::string&>();
      if (json_depth(text) <= kMaxJsonDepth) {
        auto decoded = RequestJson::parse(text, nullptr, /*allow_exceptions=*/false);
        if (!decoded.is_discarded() && decoded.is_object()) *args = std::move(decoded);
      }
    }
    RequestJson ordered = RequestJson::object();
    for (const char* key : {"name", "arguments"})
      if (auto it = fn->find(key); it != fn->end()) ordered[key] = std::move(*it);
    for (auto& [key, value] : fn->items())
      if (key != "name" && key != "arguments") ordered[key] = std::move(value);
    *fn = std::move(ordered);
  }
}

RequestJson parse_messages(const RequestJson& body) {
  auto it = body.find("messages");
  if (it == body.end() || it->is_null())
    throw ApiError(400, "Missing required parameter: 'messages'.", "invalid_request_error",
                   "messages", "missing_required_parameter");
  if (!it->is_array()) bad("messages", "expected an array of messages.");
  if (it->empty()) bad("messages", "the list of messages is empty; at least one is required.");
  RequestJson out = RequestJson::array();
  for (size_t i = 0; i < it->size(); ++i) {
    std::string param = "messages[" + std::to_string(i) + "]";
    const RequestJson& m = (*it)[i];
    if (!m.is_object()) bad(param, "expected a message object.");
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) bad(param + ".role", "expected a string.");
    std::string r = role->get<std::string>();
    if (r == "developer") r = "system";  // the newer name for the system role
    if (r != "system" && r != "user" && r != "assistant" && r != "tool")
      bad(param + ".role", "unknown role '" + role->get<std::string>() +
                               "'; expected system, developer, user, assistant or tool.");
    // Built sorted (nlohmann::json), the order templates have always seen a message's keys in;
    // only the tool calls keep the client's order.
    json nm = {{"role", r}};
    auto content = m.find("content");
    bool has_content = content != m.end() && !content->is_null();
    if (has_content) {
      nm["content"] = message_content(*content, param + ".content");
    } else if (r == "assistant") {
      nm["content"] = "";  // an assistant turn may carry only tool calls
    } else {
      bad(param + ".content", "missing content.");
    }
    for (const char* extra : {"name", "tool_calls", "tool_call_id"}) {
      auto e = m.find(extra);
      if (e != m.end() && !e->is_null()) nm[extra] = json(*e);
    }
    RequestJson message(nm);
    if (auto calls = m.find("tool_calls"); calls != m.end() && !calls->is_null()) {
      message["tool_calls"] = *calls;
      prepare_tool_calls(message["tool_calls"]);
    }
    out.push_back(std::move(message));
  }
  return out;
}

}  // namespace

std::string parse_model_field(const RequestJson& body) {
  auto m = body.find("model");
  if (m == body.end() || m->is_null()) return "";
  if (!m->is_string())
    throw ApiError(400, "Invalid value for 'model': expected a string.", "invalid_request_error", "model");
  return m->get<std::string>();
}

std::vector<PromptInput> parse_prompt_inputs(const RequestJson& body, const std::string& key) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null())
    throw ApiError(400, "Missing required parameter: '" + key + "'.", "invalid_request_error", key,
                   "missing_required_parameter");
  const RequestJson& p = *it;
  std::vector<PromptInput> out;
  if (p.is_string()) {
    out.push_back({false, p.get<std::string>(), {}});
  } else if (p.is_array()) {
    if (p.empty()) bad(key, "the list is empty.");
    if (p[0].is_number_integer()) {
      out.push_back({true, "", token_array(p, key)});
    } else if (p[0].is_string()) {
      for (size_t i = 0; i < p.size(); ++i) {
        if (!p[i].is_string()) bad(key + "[" + std::to_string(i) + "]", "expected a string.");
        out.push_back({false, p[i].get<std::string>(), {}});
      }
    } else if (p[0].is_array()) {
      for (size_t i = 0; i < p.size(); ++i) {
        std::string param = key + "[" + std::to_string(i) + "]";
        if (!p[i].is_array()) bad(param, "expected an array of token ids.");
        out.push_back({true, "", token_array(p[i], param)});
      }
    } else {
      bad(key, "expected a string, an array of strings, or token ids.");
    }
  } else {
    bad(key, "expected a string, an array of strings, or token ids.");
  }
  return out;
}

CompletionRequest parse_completion_request(const RequestJson& body) {
  CompletionRequest r;
  Fields f(body);
  // Read first: echo allows max_tokens 0 (OpenAI's legacy API and vLLM answer with the prompt).
  r.echo = f.boolean("echo").value_or(false);
  r.common = parse_common(body, /*chat=*/false, /*zero_max_tokens=*/r.echo);
  r.prompts = parse_prompt_inputs(body, "prompt");
  if (const RequestJson* lp = f.get("logprobs")) {
    // The legacy endpoint takes an integer; `false` is accepted as "none".
    if (lp->is_boolean() && !lp->get<bool>()) {
    } else {
      auto n = f.integer("logprobs");
      if (*n < 0 || *n > kMaxLogprobs)
        bad("logprobs", "must be between 0 and " + std::to_string(kMaxLogprobs) + ".");
      r.common.sampling.logprobs = (int)*n;
    }
  }
  return r;
}

RequestJson parse_template_variables(const RequestJson& body, const RequestJson* effort,
                                     const std::string& effort_param) {
  RequestJson vars;
  if (auto k = body.find("chat_template_kwargs"); k != body.end() && !k->is_null()) {
    if (!k->is_object()) bad("chat_template_kwargs", "expected an object of template variables.");
    vars = *k;
  }
  if (effort && !effort->is_null()) {
    static const char* kEfforts[] = {"none", "minimal", "low", "medium", "high"};
    if (!effort->is_string() || std::none_of(std::begin(kEfforts), std::end(kEfforts),
                                             [&](const char* e) { return *effort == e; }))
      bad(effort_param, "expected one of 'none', 'minimal', 'low', 'medium', 'high'.");
    // Accepted and handed to the template (gpt-oss's reads it); a kwarg of the same name wins.
    if (!vars.contains("reasoning_effort")) vars["reasoning_effort"] = *effort;
  }
  return vars;
}

ChatRequest parse_chat_request(const RequestJson& body) {
  ChatRequest r;
  r.common = parse_common(body, /*chat=*/true);
  r.messages = parse_messages(body);
  Fields f(body);
  r.logprobs = f.boolean("logprobs").value_or(false);
  int top = 0;
  if (auto t = f.integer("top_logprobs")) {
    if (*t < 0 || *t > kMaxLogprobs)
      bad("top_logprobs", "must be between 0 and " + std::to_string(kMaxLogprobs) + ".");
    if (!r.logprobs) bad("top_logprobs", "requires 'logprobs' to be true.");
    top = (int)*t;
  }
  if (r.logprobs) r.common.sampling.logprobs = top;
  if (const RequestJson* tools = f.get("tools")) {
    r.tool_names = parse_tools(*tools);
    r.tools = *tools;
  }
  r.tool_choice = parse_tool_choice(f.get("tool_choice"), r.tool_names, !r.tools.is_null());
  r.parallel_tool_calls = f.boolean("parallel_tool_calls").value_or(true);
  r.add_generation_prompt = f.boolean("add_generation_prompt").value_or(true);
  r.template_variables = parse_template_variables(body, f.get("reasoning_effort"), "reasoning_effort");
  return r;
}

}  // namespace pagoda::server
