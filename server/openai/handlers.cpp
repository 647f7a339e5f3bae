#include "server/openai/handlers.h"

#include <algorithm>
#include <thread>

#include "server/http/access_log.h"
#include "server/openai/generation.h"
#include "server/http/http_server.h"
#include "server/http/metrics.h"
#include "server/openai/openai_protocol.h"

namespace pagoda::server {


namespace {

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void send_json(httplib::Response& res, const json& j, int status = 200) {
  res.status = status;
  res.set_content(dump_json(j), "application/json");
}

void send_api_error(httplib::Response& res, const ApiError& e) {
  send_json(res, error_body(e), e.status);
  if (e.status == 429) res.set_header("Retry-After", "1");
}

// Tool calls sent back in the conversation, made the way templates expect them. Clients send
// a call's arguments as the JSON string they received; templates print them with `tojson`,
// which would quote that string a second time, so (like vLLM and llama.cpp) they get the
// decoded object, in the client's key order. And `function` lists "name" before "arguments"
// (templates such as Mistral's print the whole object, and models were trained on that order),
// whatever order the client's JSON library left them in.
void prepare_tool_calls(nlohmann::ordered_json& calls) {
  if (!calls.is_array()) return;
  for (auto& call : calls) {
    if (!call.is_object()) continue;
    auto fn = call.find("function");
    if (fn == call.end() || !fn->is_object()) continue;
    auto args = fn->find("arguments");
    if (args != fn->end() && args->is_string()) {
      const std::string& text = args->get_ref<const std::string&>();
      if (!json_depth_exceeds(text, 64)) {
        auto decoded = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
        if (!decoded.is_discarded() && decoded.is_object()) *args = std::move(decoded);
      }
    }
    nlohmann::ordered_json ordered = nlohmann::ordered_json::object();
    for (const char* key : {"name", "arguments"})
      if (auto it = fn->find(key); it != fn->end()) ordered[key] = std::move(*it);
    for (auto& [key, value] : fn->items())
      if (key != "name" && key != "arguments") ordered[key] = std::move(value);
    *fn = std::move(ordered);
  }
}

}  // namespace

Handlers::Handlers(EngineApi& engine, const Tokenizer& tokenizer, ChatRenderer render_chat,
                   Metrics& metrics, Options opts)
    : engine_(engine),
      tok_(tokenizer),
      render_chat_(std::move(render_chat)),
      metrics_(metrics),
      opts_(std::move(opts)),
      created_((int64_t)unix_now()),
      last_submit_unix_s_(unix_now()),
      rng_(std::random_device{}()) {
  // Vocabularies that make a call marker a control token detokenize it to nothing; remember
  // such tokens so that the tool-call parser still sees the marker.
  for (const std::string& m : tool_call_markers(opts_.tool_call_format)) {
    try {
      std::vector<int32_t> ids = tok_.encode(m, /*add_special=*/false, /*parse_special=*/true);
      if (ids.size() == 1 && tok_.token_to_piece(ids[0]).empty()) tool_markers_[ids[0]] = m;
    } catch (const std::exception&) {
      // A tokenizer that cannot encode the marker simply never produces it as one token.
    }
  }
}

Handlers::~Handlers() = default;

// nlohmann::json sorts object keys, so the validated request has lost the client's order. Tool
// calls and tools are taken verbatim, in order, from the raw body; everything else (role, joined
// content) from the validated request.
std::string Handlers::render_chat(const std::string& raw_body, const ChatRequest& cr) const {
  nlohmann::ordered_json messages = nlohmann::ordered_json::parse(cr.messages.dump());
  nlohmann::ordered_json tools = nlohmann::ordered_json::parse(cr.tools.dump());
  const auto raw = nlohmann::ordered_json::parse(raw_body, nullptr, false);
  if (!raw.is_discarded() && raw.is_object()) {
    auto raw_msgs = raw.find("messages");
    if (raw_msgs != raw.end() && raw_msgs->is_array() && raw_msgs->size() == messages.size()) {
      for (size_t i = 0; i < messages.size(); ++i) {
        const auto& rm = (*raw_msgs)[i];
        auto calls = rm.find("tool_calls");
        if (messages[i].contains("tool_calls") && calls != rm.end()) {
          messages[i]["tool_calls"] = *calls;
          prepare_tool_calls(messages[i]["tool_calls"]);
        }
      }
    }
    auto raw_tools = raw.find("tools");
    if (!tools.is_null() && raw_tools != raw.end()) tools = *raw_tools;
  }
  try {
    return render_chat_(messages, tools, cr.add_generation_prompt);
  } catch (const std::exception& e) {
    throw ApiError(400, std::string("The chat template rejected the messages: ") + e.what(),
                   "invalid_request_error", "messages");
  }
}

bool Handlers::try_reserve(int n) {
  int cur = inflight_seqs_.load();
  while (true) {
    if (cur + n > opts_.max_inflight_seqs) return false;
    if (inflight_seqs_.compare_exchange_weak(cur, cur + n)) return true;
  }
}

void Handlers::release(int n) { inflight_seqs_ -= n; }

void Handlers::track(const std::shared_ptr<RequestStream>& s) {
  std::lock_guard<std::mutex> lk(mu_);
  active_.insert(s);
}

void Handlers::untrack(const std::shared_ptr<RequestStream>& s) {
  std::lock_guard<std::mutex> lk(mu_);
  active_.erase(s);
}

void Handlers::abort_all() {
  std::lock_guard<std::mutex> lk(mu_);
  for (auto& s : active_) s->abort();
}

std::string Handlers::new_id(const char* prefix) {
  std::lock_guard<std::mutex> lk(mu_);
  char buf[40];
  std::snprintf(buf, sizeof buf, "%s%016llx%08llx", prefix, (unsigned long long)rng_(),
                (unsigned long long)(rng_() & 0xffffffffULL));
  return buf;
}

std::string Handlers::new_tool_call_id() {
  static const char kAlnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  const bool mistral = opts_.tool_call_format == ToolCallFormat::Mistral;
  std::string id = mistral ? "" : "call_";
  std::lock_guard<std::mutex> lk(mu_);
  for (int i = 0; i < (mistral ? 9 : 24); ++i) id += kAlnum[rng_() % (sizeof kAlnum - 1)];
  return id;
}

std::string Handlers::token_text(int32_t id) const {
  if (id < 0 || id >= tok_.vocab_size()) return "";
  return tok_.token_to_piece(id, /*special=*/true);
}

std::vector<int32_t> Handlers::encode_prompt(const std::string& text, bool chat) const {
  if (!chat) return tok_.encode(text, /*add_special=*/true, /*parse_special=*/true);
  // A rendered chat usually spells its own BOS; add one only when the model wants it and the
  // template left it out, never twice.
  std::vector<int32_t> ids = tok_.encode(text, /*add_special=*/false, /*parse_special=*/true);
  if (tok_.add_bos() && tok_.bos_id() >= 0 && (ids.empty() || ids.front() != tok_.bos_id()))
    ids.insert(ids.begin(), tok_.bos_id());
  return ids;
}

void Handlers::check_token_ids(const std::vector<int32_t>& ids, const std::string& param) const {
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= tok_.vocab_size())
      throw ApiError(400,
                     "Invalid value for '" + param + "': token id " + std::to_string(ids[i]) +
                         " is outside the vocabulary (size " + std::to_string(tok_.vocab_size()) +
                         ").",
                     "invalid_request_error", param);
}

// ---- endpoints ----------------------------------------------------------------------------

void Handlers::health(const httplib::Request&, httplib::Response& res) {
  EngineStats s = engine_.stats();
  if (!s.alive) {
    send_json(res, {{"status", "error"}, {"reason", "the engine thread is not running"}}, 503);
    return;
  }
  bool pending = s.running + s.waiting > 0;
  double progress = std::max(s.last_step_unix_s, last_submit_unix_s_.load());
  double idle = unix_now() - progress;
  if (pending && idle > opts_.health_stall_s) {
    send_json(res, {{"status", "error"},
                    {"reason", "the engine has made no progress for " +
                                   std::to_string((int)idle) + " s with work pending"}},
              503);
    return;
  }
  send_json(res, {{"status", "ok"}});
}

json Handlers::model_card() const {
  return {{"id", opts_.model_name},
          {"object", "model"},
          {"created", created_},
          {"owned_by", "pagoda"},
          {"max_model_len", engine_.context_size()}};
}

void Handlers::models(const httplib::Request&, httplib::Response& res) {
  send_json(res, {{"object", "list"}, {"data", json::array({model_card()})}});
}

void Handlers::model(const httplib::Request& req, httplib::Response& res) {
  std::string id = req.matches.size() > 1 ? req.matches[1].str() : "";
  if (id != opts_.model_name) {
    send_api_error(res, ApiError(404, "The model '" + id + "' does not exist; this server runs '" +
                                          opts_.model_name + "'.",
                                 "not_found_error", "model", "model_not_found"));
    return;
  }
  send_json(res, model_card());
}

void Handlers::completions(const httplib::Request& req, httplib::Response& res) {
  GenSpec spec;
  try {
    CompletionRequest cr = parse_completion_request(parse_json_body(req.body));
    spec.chat = false;
    spec.common = std::move(cr.common);
    spec.logprobs = spec.common.sampling.logprobs >= 0;
    spec.prompt_logprobs = cr.echo && spec.logprobs;
    spec.echo_only = cr.echo && spec.common.max_tokens == 0;
    for (size_t i = 0; i < cr.prompts.size(); ++i) {
      std::string param = cr.prompts.size() > 1 ? "prompt[" + std::to_string(i) + "]" : "prompt";
      PromptInput& p = cr.prompts[i];
      std::vector<int32_t> ids = p.is_tokens ? p.tokens : encode_prompt(p.text, false);
      check_token_ids(ids, param);
      spec.echo.push_back(!cr.echo ? "" : p.is_tokens ? tok_.decode(ids) : p.text);
      spec.prompts.push_back(std::move(ids));
    }
  } catch (const ApiError& e) {
    send_api_error(res, e);
    return;
  } catch (const std::exception& e) {  // e.g. the tokenizer refusing the text
    send_api_error(res, ApiError(400, std::string("Invalid prompt: ") + e.what(),
                                 "invalid_request_error", "prompt"));
    return;
  }
  generate(req, res, std::move(spec));
}

void Handlers::chat_completions(const httplib::Request& req, httplib::Response& res) {
  GenSpec spec;
  try {
    ChatRequest cr = parse_chat_request(parse_json_body(req.body));
    const std::string text = render_chat(req.body, cr);
    spec.chat = true;
    spec.common = std::move(cr.common);
    spec.logprobs = cr.logprobs;
    // tool_choice "required" or a named function is validated but does not constrain decoding:
    // the output is read for calls the same way, and is content when it holds none.
    if (cr.tool_choice.mode != ToolChoice::Mode::None && !cr.tool_names.empty()) {
      spec.tool_format = opts_.tool_call_format;
      spec.tool_names.insert(cr.tool_names.begin(), cr.tool_names.end());
      spec.tool_markers = tool_markers_;
    }
    spec.prompts.push_back(encode_prompt(text, true));
    spec.echo.push_back("");
  } catch (const ApiError& e) {
    send_api_error(res, e);
    return;
  } catch (const std::exception& e) {
    send_api_error(res, ApiError(400, std::string("Invalid messages: ") + e.what(),
                                 "invalid_request_error", "messages"));
    return;
  }
  generate(req, res, std::move(spec));
}

void Handlers::generate(const httplib::Request& req, httplib::Response& res, GenSpec spec) {
  const int ctx = engine_.context_size();
  const char* prompt_param = spec.chat ? "messages" : "prompt";
  const int n = spec.common.n;
  auto g = std::make_shared<Generation>(std::move(spec), metrics_,
                                        [this](int32_t id) { return token_text(id); }, opts_.timeout_s);
  // Runs when the request is over, however it ended: frees its queue slots.
  g->on_release = [this, gp = g.get()] {
    for (auto& st : gp->streams()) untrack(st);
    release(gp->reserved);
  };
  g->new_tool_call_id = [this] { return new_tool_call_id(); };
  GenSpec& s = g->spec;
  try {
    for (size_t p = 0; p < s.prompts.size(); ++p) {
      int len = (int)s.prompts[p].size();
      if (len == 0)
        throw ApiError(400, "The prompt is empty.", "invalid_request_error", prompt_param);
      if (len >= ctx)
        throw ApiError(400,
                       "This model's maximum context length is " + std::to_string(ctx) +
                           " tokens. However, your prompt has " + std::to_string(len) +
                           " tokens. Please reduce the length of the " +
                           (s.chat ? "messages." : "prompt."),
                       "invalid_request_error", prompt_param, "context_length_exceeded");
    }
    for (const auto& [id, bias] : s.common.sampling.logit_bias)
      if (id >= tok_.vocab_size())
        throw ApiError(400, "Invalid value for 'logit_bias': token id " + std::to_string(id) +
                                " is outside the vocabulary.",
                       "invalid_request_error", "logit_bias." + std::to_string(id));
    check_token_ids(s.common.stop.stop_token_ids, "stop_token_ids");
    int need = (int)s.prompts.size() * n;
    if (need > opts_.max_inflight_seqs)
      throw ApiError(400, "The request asks for " + std::to_string(need) +
                              " sequences (prompts x n); this server runs at most " +
                              std::to_string(opts_.max_inflight_seqs) + ".",
                     "invalid_request_error", "n");
    if (!try_reserve(need))
      throw ApiError(429, "The server is at capacity; retry shortly.", "rate_limit_error", "",
                     "queue_full");
    g->reserved = need;
  } catch (const ApiError& e) {
    send_api_error(res, e);
    return;
  }

  g->meta.id = new_id(s.chat ? "chatcmpl-" : "cmpl-");
  g->meta.model = opts_.model_name;
  g->meta.created = (int64_t)unix_now();
  current_access_record().request_id = g->meta.id;
  g->init_choices();
  for (size_t p = 0; p < s.prompts.size(); ++p) {
    GenerationRequest gr;
    gr.prompt = s.prompts[p];
    gr.sampling = s.common.sampling;
    gr.stop = s.common.stop;
    int room = ctx - (int)gr.prompt.size();
    int max_tokens = s.common.max_tokens.value_or(s.chat ? room : 16);
    if (!opts_.context_shift || !s.common.max_tokens) max_tokens = std::min(max_tokens, room);
    gr.stop.max_tokens = std::max(1, max_tokens);  // echo_only: the one token is dropped
    if (s.prompt_logprobs) gr.prompt_logprobs = s.common.sampling.logprobs;
    gr.n = n;
    gr.n_keep = s.common.n_keep;
    SubmitError err;
    std::shared_ptr<RequestStream> stream = engine_.submit(std::move(gr), &err);
    if (!stream) {
      // The engine re-checks what the handler validated; only capacity should fail here.
      std::string msg = err.message.empty() ? "The request was refused." : err.message;
      if (err.code == "queue_full")
        send_api_error(res, ApiError(429, "The server is at capacity; retry shortly (" + msg + ").",
                                     "rate_limit_error", "", err.code));
      else if (err.code == "engine_unavailable")
        send_api_error(res, ApiError(503, msg, "service_unavailable_error", "", err.code));
      else
        send_api_error(res, ApiError(400, msg, "invalid_request_error", prompt_param, err.code));
      return;  // ~Generation aborts the prompts already submitted
    }
    track(stream);
    g->add_stream(std::move(stream));
  }
  last_submit_unix_s_ = unix_now();
  res.set_header("X-Request-Id", g->meta.id);
  g->probe = std::make_unique<ConnectionProbe>(req);

  if (s.common.stream) {
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [g](size_t, httplib::DataSink& sink) { return g->stream_step(sink); });
    return;
  }

  g->answer(res);
}

// ---- tokenizer endpoints ----------------------------------------------------------------------

void Handlers::tokenize(const httplib::Request& req, httplib::Response& res) {
  try {
    json body = parse_json_body(req.body);
    std::vector<int32_t> ids;
    if (body.contains("messages")) {
      json chat_body = body;
      ChatRequest cr = parse_chat_request(chat_body);
      const std::string text = render_chat(req.body, cr);
      ids = encode_prompt(text, true);
    } else {
      const char* key = body.contains("prompt") ? "prompt" : "content";
      auto it = body.find(key);
      if (it == body.end() || !it->is_string())
        throw ApiError(400, "Expected a string 'prompt' (or 'content'), or 'messages'.",
                       "invalid_request_error", "prompt");
      bool add_special = true;
      if (auto a = body.find("add_special_tokens"); a != body.end() && !a->is_null()) {
        if (!a->is_boolean())
          throw ApiError(400, "Invalid value for 'add_special_tokens': expected a boolean.",
                         "invalid_request_error", "add_special_tokens");
        add_special = a->get<bool>();
      }
      ids = tok_.encode(it->get<std::string>(), add_special, /*parse_special=*/true);
    }
    json out = {{"tokens", ids}, {"count", ids.size()}, {"max_model_len", engine_.context_size()}};
    if (auto wp = body.find("with_pieces"); wp != body.end() && wp->is_boolean() && wp->get<bool>()) {
      json pieces = json::array();
      for (int32_t id : ids) pieces.push_back(token_text(id));
      out["pieces"] = pieces;
    }
    send_json(res, out);
  } catch (const ApiError& e) {
    send_api_error(res, e);
  } catch (const std::exception& e) {
    send_api_error(res, ApiError(400, std::string("Cannot tokenize: ") + e.what()));
  }
}

void Handlers::detokenize(const httplib::Request& req, httplib::Response& res) {
  try {
    json body = parse_json_body(req.body);
    auto it = body.find("tokens");
    if (it == body.end() || !it->is_array())
      throw ApiError(400, "Expected 'tokens': an array of token ids.", "invalid_request_error",
                     "tokens");
    std::vector<int32_t> ids;
    for (size_t i = 0; i < it->size(); ++i) {
      const json& v = (*it)[i];
      std::string param = "tokens[" + std::to_string(i) + "]";
      if (!v.is_number_integer())
        throw ApiError(400, "Invalid value for '" + param + "': expected an integer.",
                       "invalid_request_error", param);
      int64_t id = v.get<int64_t>();
      if (id < 0 || id >= tok_.vocab_size())
        throw ApiError(400, "Invalid value for '" + param + "': token id out of range.",
                       "invalid_request_error", param);
      ids.push_back((int32_t)id);
    }
    std::string text = tok_.decode(ids);
    send_json(res, {{"prompt", text}, {"content", text}});
  } catch (const ApiError& e) {
    send_api_error(res, e);
  } catch (const std::exception& e) {
    send_api_error(res, ApiError(400, std::string("Cannot detokenize: ") + e.what()));
  }
}

}  // namespace pagoda::server
