// Handlers: the OpenAI endpoints and their route table (see handlers.h).
#include "server/openai/handlers.h"

#include <algorithm>

#include "server/http/api_error.h"
#include "server/http/metrics.h"
#include "server/openai/generation.h"
#include "server/openai/request_parse.h"
#include "server/openai/response_build.h"
#include "server/openai/responses_parse.h"
#include "server/openai/responses_stream.h"

namespace pagoda::server {

double Handlers::unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void Handlers::send_json(httplib::Response& res, const json& j, int status) {
  res.status = status;
  res.set_content(dump_json(j), "application/json");
}

ApiError Handlers::submit_error(const SubmitError& err, const std::string& param) {
  // The engine re-checks what the handler validated, and holds the admission bound.
  std::string msg = err.message.empty() ? "The request was refused." : err.message;
  if (err.code == "queue_full")
    return ApiError(429, "The server is at capacity; retry shortly (" + msg + ").", "rate_limit_error", "", err.code);
  if (err.code == "engine_unavailable") return ApiError(503, msg, "service_unavailable_error", "", err.code);
  if (err.code == "model_not_found") return ApiError(404, msg, "invalid_request_error", "", err.code);
  return ApiError(400, msg, "invalid_request_error", param, err.code);
}

std::string Handlers::served_model(const std::string& requested) const {
  if (requested.empty() || requested == opts_.model_name) return opts_.model_name;
  for (const std::string& alias : opts_.model_aliases)
    if (requested == alias) return alias;
  if (!lora_of(requested).empty()) return requested;
  throw ApiError(404, "The model '" + requested + "' does not exist; this server runs '" + opts_.model_name + "'.",
                 "invalid_request_error", "", "model_not_found");
}

std::string Handlers::lora_of(const std::string& served) const {
  if (served.empty() || served == opts_.model_name) return "";
  for (const LoraInfo& l : engine_.lora_adapters())
    if (l.name == served) return served;
  return "";
}

Handlers::Handlers(EngineApi& engine, ChatRenderer render_chat, Metrics& metrics, Options opts)
    : engine_(engine),
      render_chat_(std::move(render_chat)),
      metrics_(metrics),
      opts_(std::move(opts)),
      created_((int64_t)unix_now()),
      last_submit_unix_s_(unix_now()),
      rng_(std::random_device{}()),
      store_(opts_.responses_store_count, opts_.responses_store_bytes) {
  // Vocabularies that make a call marker a control token detokenize it to nothing; remember
  // such tokens so that the tool-call parser still sees the marker.
  for (const std::string& m : tool_call_markers(opts_.tool_call_format)) {
    try {
      std::vector<int32_t> ids = engine_.tokenize(m, /*add_special=*/false, /*parse_special=*/true);
      if (ids.size() == 1 && engine_.token_piece(ids[0], /*special=*/false).empty())
        tool_markers_[ids[0]] = m;
    } catch (const std::exception&) {
      // A tokenizer that cannot encode the marker simply never produces it as one token.
    }
  }
  if (!opts_.chat_special_tokens) {
    // Control tokens read as "" unless spelled out: their spellings are what message text
    // must not produce.
    std::vector<std::string> control;
    for (int32_t id = 0; id < engine_.vocab_size(); ++id)
      if (engine_.token_piece(id, /*special=*/false).empty())
        if (std::string t = engine_.token_piece(id, /*special=*/true); !t.empty()) control.push_back(std::move(t));
    literals_ = std::make_unique<ChatLiterals>(control);
  }
}

Handlers::~Handlers() = default;

std::vector<ApiRoute> Handlers::routes() {
  return {member_route("GET", "/v1/models", &Handlers::models),
          member_route("GET", "/v1/models/(.+)", &Handlers::model),
          member_route("POST", "/v1/completions", &Handlers::completions),
          member_route("POST", "/v1/chat/completions", &Handlers::chat_completions),
          member_route("POST", "/v1/embeddings", &Handlers::embeddings),
          member_route("POST", "/v1/rerank", &Handlers::rerank),
          member_route("POST", "/v2/rerank", &Handlers::rerank),
          member_route("POST", "/rerank", &Handlers::rerank),
          member_route("POST", "/v1/score", &Handlers::score),
          member_route("POST", "/v1/responses", &Handlers::responses),
          member_route("GET", "/v1/responses/([^/]+)", &Handlers::get_response),
          member_route("DELETE", "/v1/responses/([^/]+)", &Handlers::delete_response),
          member_route("POST", "/v1/messages", &Handlers::messages),
          member_route("POST", "/v1/messages/count_tokens", &Handlers::count_message_tokens),
          member_route("POST", "/v1/cache/save", &Handlers::save_cache),
          member_route("GET", "/v1/cache/blocks", &Handlers::cache_blocks),
          member_route("POST", "/v1/load_lora_adapter", &Handlers::load_lora_adapter),
          member_route("POST", "/v1/unload_lora_adapter", &Handlers::unload_lora_adapter),
          member_route("POST", "/tokenize", &Handlers::tokenize),
          member_route("POST", "/detokenize", &Handlers::detokenize)};
}

// The parsed request already holds the template's inputs in the client's key order
// (request_parse.h).
Handlers::ChatPrompt Handlers::chat_prompt(const ChatRequest& cr) const {
  ChatLiterals::Restored prompt;
  try {
    if (literals_) {
      prompt = literals_->restore(
          render_chat_(literals_->escape(cr.messages), literals_->escape(cr.tools), cr.add_generation_prompt, cr.template_variables));
    } else {
      prompt.text = render_chat_(cr.messages, cr.tools, cr.add_generation_prompt, cr.template_variables);
    }
  } catch (const std::exception& e) {
    throw ApiError(400, std::string("The chat template rejected the messages: ") + e.what(),
                   "invalid_request_error", "messages");
  }
  std::vector<int32_t> ids = prompt.plain.empty()
                                 ? engine_.tokenize(prompt.text, /*add_special=*/false, /*parse_special=*/true)
                                 : engine_.tokenize_marked(prompt.text, /*add_special=*/false, prompt.plain);
  ensure_bos(ids);
  return {std::move(prompt.text), std::move(ids)};
}

void Handlers::read_reasoning(GenSpec& spec, const std::string& prompt_text) const {
  if (opts_.reasoning_format == ReasoningFormat::None) return;
  spec.reasoning_format = opts_.reasoning_format;
  spec.reasoning_start = reasoning_start(prompt_text);
  if (!spec.common.constraint || spec.reasoning_start == ReasoningStart::Answer) return;
  // The same reading as the parser's: the constraint starts where the answer does.
  OutputConstraint& c = spec.common.constraint->constraint;
  c.reasoning_end = kReasoningEnd;
  if (spec.reasoning_start == ReasoningStart::Open && opts_.reasoning_format == ReasoningFormat::Qwen3)
    c.reasoning_start = "<think>";
}

void Handlers::track(const std::shared_ptr<RequestStream>& s) {
  std::lock_guard<std::mutex> lk(mu_);
  active_.insert(s);
  if (aborting_) s->abort();
}

void Handlers::untrack(const std::shared_ptr<RequestStream>& s) {
  std::lock_guard<std::mutex> lk(mu_);
  active_.erase(s);
}

void Handlers::abort_all() {
  std::lock_guard<std::mutex> lk(mu_);
  aborting_ = true;
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
  if (id < 0 || id >= engine_.vocab_size()) return "";
  return engine_.token_piece(id, /*special=*/true);
}

// A completions prompt: special-token text in it is parsed (documented: the client writes the
// whole prompt, markup included).
std::vector<int32_t> Handlers::encode_prompt(const std::string& text) const {
  return engine_.tokenize(text, /*add_special=*/true, /*parse_special=*/true);
}

void Handlers::ensure_bos(std::vector<int32_t>& ids) const {
  const int32_t bos = engine_.prompt_bos_id();
  if (bos >= 0 && (ids.empty() || ids.front() != bos)) ids.insert(ids.begin(), bos);
}

void Handlers::check_token_ids(const std::vector<int32_t>& ids, const std::string& param) const {
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= engine_.vocab_size())
      throw ApiError(400,
                     "Invalid value for '" + param + "': token id " + std::to_string(ids[i]) +
                         " is outside the vocabulary (size " + std::to_string(engine_.vocab_size()) +
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

json Handlers::model_card(const std::string& name) const {
  json card = {{"id", name},
               {"object", "model"},
               {"created", created_},
               {"owned_by", "pagoda"},
               {"max_model_len", engine_.context_size()}};
  // A LoRA adapter names its base model as `parent` and its file as `root` (vLLM's card).
  for (const LoraInfo& l : engine_.lora_adapters())
    if (l.name == name && name != opts_.model_name) {
      card["root"] = l.path;
      card["parent"] = opts_.model_name;
    }
  return card;
}

void Handlers::models(const httplib::Request&, httplib::Response& res) {
  json data = json::array({model_card(opts_.model_name)});
  for (const std::string& alias : opts_.model_aliases) data.push_back(model_card(alias));
  for (const LoraInfo& l : engine_.lora_adapters()) data.push_back(model_card(l.name));
  send_json(res, {{"object", "list"}, {"data", std::move(data)}});
}

void Handlers::model(const httplib::Request& req, httplib::Response& res) {
  std::string id = req.matches.size() > 1 ? req.matches[1].str() : "";
  try {
    send_json(res, model_card(served_model(id)));
  } catch (const ApiError& e) {
    send_error(res, e);
  }
}

void Handlers::completions(const httplib::Request& req, httplib::Response& res,
                           const std::shared_ptr<AccessRecord>& record) {
  GenSpec spec;
  try {
    CompletionRequest cr = parse_completion_request(parse_json_body(req.body));
    spec.chat = false;
    cr.common.model = served_model(cr.common.model);
    spec.common = std::move(cr.common);
    spec.logprobs = spec.common.sampling.logprobs >= 0;
    spec.prompt_logprobs = cr.echo && spec.logprobs;
    spec.echo_only = cr.echo && spec.common.max_tokens == 0;
    for (size_t i = 0; i < cr.prompts.size(); ++i) {
      std::string param = cr.prompts.size() > 1 ? "prompt[" + std::to_string(i) + "]" : "prompt";
      PromptInput& p = cr.prompts[i];
      std::vector<int32_t> ids = p.is_tokens ? p.tokens : encode_prompt(p.text);
      check_token_ids(ids, param);
      spec.echo.push_back(!cr.echo ? "" : p.is_tokens ? engine_.detokenize(ids) : p.text);
      spec.prompts.push_back(std::move(ids));
    }
  } catch (const ApiError& e) {
    send_error(res, e);
    return;
  } catch (const std::exception& e) {  // e.g. the tokenizer refusing the text
    send_error(res, ApiError(400, std::string("Invalid prompt: ") + e.what(),
                             "invalid_request_error", "prompt"));
    return;
  }
  generate(req, res, record, std::move(spec));
}

GenSpec Handlers::chat_spec(ChatRequest& cr) const {
  GenSpec spec;
  cr.common.model = served_model(cr.common.model);
  ChatPrompt prompt = chat_prompt(cr);
  spec.chat = true;
  spec.common = std::move(cr.common);
  spec.logprobs = cr.logprobs;
  // tool_choice "required" or a named function constrains decoding to one call in the
  // model's own format (structured_output.h); either way the output is read for calls.
  if (auto forced = tool_choice_constraint(cr.tool_choice, cr.tools, opts_.tool_call_format)) {
    if (spec.common.constraint)
      throw ApiError(400, "Invalid 'tool_choice': a required or named tool call cannot be combined with '" +
                              spec.common.constraint->param + "'.",
                     "invalid_request_error", "tool_choice");
    spec.common.constraint = std::move(forced);
  }
  if (cr.tool_choice.mode != ToolChoice::Mode::None && !cr.tool_names.empty()) {
    spec.tool_format = opts_.tool_call_format;
    spec.tool_names.insert(cr.tool_names.begin(), cr.tool_names.end());
    spec.tool_markers = tool_markers_;
  }
  read_reasoning(spec, prompt.text);
  spec.prompts.push_back(std::move(prompt.ids));
  spec.echo.push_back("");
  return spec;
}

void Handlers::chat_completions(const httplib::Request& req, httplib::Response& res,
                                const std::shared_ptr<AccessRecord>& record) {
  GenSpec spec;
  try {
    ChatRequest cr = parse_chat_request(parse_json_body(req.body));
    spec = chat_spec(cr);
  } catch (const ApiError& e) {
    send_error(res, e);
    return;
  } catch (const std::exception& e) {
    send_error(res, ApiError(400, std::string("Invalid messages: ") + e.what(),
                             "invalid_request_error", "messages"));
    return;
  }
  generate(req, res, record, std::move(spec));
}

// ---- the Responses API ---------------------------------------------------------------------

StoredResponse Handlers::stored_response(const std::string& id, const std::string& param) {
  if (auto r = store_.get(id)) return std::move(*r);
  throw ApiError(404,
                 (param.empty() ? "Response" : "Previous response") + std::string(" with id '") + id +
                     "' not found." + (store_.enabled() ? "" : " (this server stores no responses)"),
                 "invalid_request_error", param, "not_found");
}

void Handlers::responses(const httplib::Request& req, httplib::Response& res,
                         const std::shared_ptr<AccessRecord>& record) {
  GenSpec spec;
  try {
    const RequestJson body = parse_json_body(req.body);
    const std::string previous_id = previous_response_id(body);
    RequestJson previous;
    if (!previous_id.empty()) previous = stored_response(previous_id, "previous_response_id").conversation;
    ResponsesRequest rr = parse_responses_request(body, previous);
    try {
      spec = chat_spec(rr.chat);
    } catch (const ApiError& e) {
      if (e.param != "messages") throw;
      throw ApiError(e.status, e.what(), e.type, "input", e.code);
    }
    const bool store = rr.store && store_.enabled();
    rr.settings["store"] = store;
    ResponsesAnswer::Setup setup;
    setup.settings = std::move(rr.settings);
    setup.store = store ? &store_ : nullptr;
    setup.conversation = std::move(rr.conversation);
    setup.new_id = [this](const char* prefix) { return new_id(prefix); };
    setup.count_tokens = [this](const std::string& text) {
      return (int)engine_.tokenize(text, /*add_special=*/false, /*parse_special=*/false).size();
    };
    spec.format = std::make_shared<ResponsesAnswer>(std::move(setup));
  } catch (const ApiError& e) {
    send_error(res, e);
    return;
  } catch (const std::exception& e) {
    send_error(res, ApiError(400, std::string("Invalid input: ") + e.what(), "invalid_request_error", "input"));
    return;
  }
  generate(req, res, record, std::move(spec));
}

void Handlers::get_response(const httplib::Request& req, httplib::Response& res) {
  try {
    send_json(res, stored_response(req.matches[1].str(), "").response);
  } catch (const ApiError& e) {
    send_error(res, e);
  }
}

void Handlers::delete_response(const httplib::Request& req, httplib::Response& res) {
  const std::string id = req.matches[1].str();
  if (!store_.erase(id)) {
    send_error(res, ApiError(404, "Response with id '" + id + "' not found.", "invalid_request_error", "",
                             "not_found"));
    return;
  }
  send_json(res, {{"id", id}, {"object", "response"}, {"deleted", true}});
}

void Handlers::generate(const httplib::Request& req, httplib::Response& res,
                        const std::shared_ptr<AccessRecord>& record, GenSpec spec) {
  const int ctx = engine_.context_size();
  const char* prompt_param = spec.format ? spec.format->prompt_param() : spec.chat ? "messages" : "prompt";
  const ErrorShape shape = spec.format ? spec.format->error_shape() : ErrorShape::OpenAI;
  try {
    for (size_t p = 0; p < spec.prompts.size(); ++p) {
      int len = (int)spec.prompts[p].size();
      if (len == 0)
        throw ApiError(400, "The prompt is empty.", "invalid_request_error", prompt_param);
      if (len >= ctx)
        throw ApiError(400,
                       "This model's maximum context length is " + std::to_string(ctx) +
                           " tokens. However, your prompt has " + std::to_string(len) +
                           " tokens. Please reduce the length of the " +
                           (spec.chat ? "messages." : "prompt."),
                       "invalid_request_error", prompt_param, "context_length_exceeded");
    }
    for (const auto& [id, bias] : spec.common.sampling.logit_bias)
      if (id >= engine_.vocab_size())
        throw ApiError(400, "Invalid value for 'logit_bias': token id " + std::to_string(id) +
                                " is outside the vocabulary.",
                       "invalid_request_error", "logit_bias." + std::to_string(id));
    check_token_ids(spec.common.stop.stop_token_ids, "stop_token_ids");
    const int64_t max_tokens_cap = engine_.max_tokens_rule().cap();
    if (spec.common.max_tokens && *spec.common.max_tokens > max_tokens_cap)
      throw ApiError(400, "Invalid value for '" + spec.common.max_tokens_param + "': must be at most " +
                              std::to_string(max_tokens_cap) + ".",
                     "invalid_request_error", spec.common.max_tokens_param);
    // Structured output: compiled here, on this HTTP worker, so a large schema never stalls
    // the engine thread; a constraint that does not compile is the client's 400.
    if (const auto& c = spec.common.constraint) {
      try {
        spec.common.sampling.grammar = engine_.compile_constraint(c->constraint);
      } catch (const ConstraintError& e) {
        throw ApiError(400, std::string("Invalid '") + c->param + "': " + e.what(), "invalid_request_error",
                       c->param);
      }
    }
  } catch (const ApiError& e) {
    send_error(res, e, shape);
    return;
  }

  ResponseMeta meta;
  meta.id = new_id(spec.format ? spec.format->id_prefix() : spec.chat ? "chatcmpl-" : "cmpl-");
  meta.model = spec.common.model.empty() ? opts_.model_name : spec.common.model;
  meta.created = (int64_t)unix_now();
  record->request_id = meta.id;
  // What is submitted, per prompt (the Generation keeps the spec).
  std::vector<GenerationRequest> requests;
  for (const std::vector<int32_t>& prompt : spec.prompts) {
    GenerationRequest gr;
    gr.prompt = prompt;
    gr.sampling = spec.common.sampling;
    gr.stop = spec.common.stop;
    // Checked against the cap above. Chat's default is the rest of the context, a completion's
    // OpenAI's 16; echo_only runs with one token, which is dropped.
    gr.stop.max_tokens = engine_.max_tokens_rule().resolve(
        spec.common.max_tokens, spec.chat ? 0 : kCompletionDefaultMaxTokens, (int)gr.prompt.size());
    if (spec.prompt_logprobs) gr.prompt_logprobs = spec.common.sampling.logprobs;
    gr.n = spec.common.n;
    gr.n_keep = spec.common.n_keep;
    gr.speculative = spec.common.speculative;
    gr.lora = lora_of(spec.common.model);
    requests.push_back(std::move(gr));
  }
  const bool stream = spec.common.stream;
  Generation::Context gctx{metrics_,
                           [this](int32_t id) { return token_text(id); },
                           [this] { return new_tool_call_id(); },
                           opts_.timeout_s,
                           record,
                           // However the request ended: its streams are no longer in flight.
                           [this](const std::vector<std::shared_ptr<RequestStream>>& streams) {
                             for (auto& st : streams) untrack(st);
                           }};
  auto g = std::make_shared<Generation>(std::move(spec), std::move(meta), std::move(gctx), req);
  for (GenerationRequest& gr : requests) {
    SubmitError err;
    std::shared_ptr<RequestStream> st = engine_.submit(std::move(gr), &err);
    if (!st) {
      send_error(res, submit_error(err, prompt_param), shape);
      return;  // ~Generation aborts the prompts already submitted
    }
    track(st);
    g->add_stream(std::move(st));
  }
  last_submit_unix_s_ = unix_now();
  res.set_header("X-Request-Id", record->request_id);

  if (stream) {
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
    const RequestJson body = parse_json_body(req.body);
    if (auto m = body.find("model"); m != body.end() && m->is_string()) served_model(m->get<std::string>());
    std::vector<int32_t> ids;
    if (body.contains("messages")) {
      ids = chat_prompt(parse_chat_request(body)).ids;
    } else {
      const char* key = body.contains("prompt") ? "prompt" : "content";
      auto it = body.find(key);
      if (it == body.end() || !it->is_string())
        throw ApiError(400, "Expected a string 'prompt' (or 'content'), or 'messages'.",
                       "invalid_request_error", "prompt");
      // llama-server spells it add_special, vLLM add_special_tokens.
      bool add_special = true;
      for (const char* key : {"add_special", "add_special_tokens"})
        if (auto a = body.find(key); a != body.end() && !a->is_null()) {
          if (!a->is_boolean())
            throw ApiError(400, std::string("Invalid value for '") + key + "': expected a boolean.",
                           "invalid_request_error", key);
          add_special = a->get<bool>();
        }
      ids = engine_.tokenize(it->get<std::string>(), add_special, /*parse_special=*/true);
    }
    json out = {{"tokens", ids}, {"count", ids.size()}, {"max_model_len", engine_.context_size()}};
    if (auto wp = body.find("with_pieces"); wp != body.end() && wp->is_boolean() && wp->get<bool>()) {
      // llama-server's shape: tokens become [{id, piece}]; the bare texts stay in "pieces".
      json tokens = json::array(), pieces = json::array();
      for (int32_t id : ids) {
        tokens.push_back({{"id", id}, {"piece", token_text(id)}});
        pieces.push_back(token_text(id));
      }
      out["tokens"] = std::move(tokens);
      out["pieces"] = std::move(pieces);
    }
    send_json(res, out);
  } catch (const ApiError& e) {
    send_error(res, e);
  } catch (const std::exception& e) {
    send_error(res, ApiError(400, std::string("Cannot tokenize: ") + e.what()));
  }
}

void Handlers::detokenize(const httplib::Request& req, httplib::Response& res) {
  try {
    const RequestJson body = parse_json_body(req.body);
    auto it = body.find("tokens");
    if (it == body.end() || !it->is_array())
      throw ApiError(400, "Expected 'tokens': an array of token ids.", "invalid_request_error",
                     "tokens");
    std::vector<int32_t> ids;
    for (size_t i = 0; i < it->size(); ++i) {
      const RequestJson& v = (*it)[i];
      std::string param = "tokens[" + std::to_string(i) + "]";
      if (!v.is_number_integer())
        throw ApiError(400, "Invalid value for '" + param + "': expected an integer.",
                       "invalid_request_error", param);
      int64_t id = v.get<int64_t>();
      if (id < 0 || id >= engine_.vocab_size())
        throw ApiError(400, "Invalid value for '" + param + "': token id out of range.",
                       "invalid_request_error", param);
      ids.push_back((int32_t)id);
    }
    std::string text = engine_.detokenize(ids);
    send_json(res, {{"prompt", text}, {"content", text}});
  } catch (const ApiError& e) {
    send_error(res, e);
  } catch (const std::exception& e) {
    send_error(res, ApiError(400, std::string("Cannot detokenize: ") + e.what()));
  }
}

}  // namespace pagoda::server
