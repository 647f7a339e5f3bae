#include "server/handlers.h"

#include <algorithm>
#include <thread>

#include "server/access_log.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/openai_protocol.h"

namespace pagoda::server {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

void send_json(httplib::Response& res, const json& j, int status = 200) {
  res.status = status;
  res.set_content(dump_json(j), "application/json");
}

void send_api_error(httplib::Response& res, const ApiError& e) {
  send_json(res, error_body(e), e.status);
  if (e.status == 429) res.set_header("Retry-After", "1");
}

}  // namespace

// A validated generation request, ready to submit.
struct Handlers::GenSpec {
  bool chat = false;
  CommonRequest common;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::string> echo;  // per prompt: text to prepend (completions with echo)
  bool logprobs = false;          // include logprobs in the answer
};

// One request in flight: its engine streams, what each choice has produced, and timings.
// Shared between the handler and (when streaming) the content provider that outlives it.
struct Handlers::Generation {
  Handlers& h;
  GenSpec spec;
  ResponseMeta meta;
  Clock::time_point start = Clock::now();
  std::vector<std::shared_ptr<RequestStream>> streams;  // one per prompt
  std::vector<ChoiceResult> choices;                     // index = prompt * n + choice
  std::vector<int> tokens_seen;                          // per choice
  std::vector<Clock::time_point> last_token;             // per choice
  int unfinished = 0;
  int reserved = 0;
  double ttft_ms = -1;
  bool aborted = false;
  std::unique_ptr<ApiError> error;  // the engine failed the request
  std::unique_ptr<ConnectionProbe> probe;
  // streaming state
  bool started = false;

  Generation(Handlers& handlers, GenSpec s) : h(handlers), spec(std::move(s)) {}

  ~Generation() {
    if (unfinished > 0) abort();
    for (auto& s : streams) h.untrack(s);
    h.release(reserved);
  }

  int n() const { return spec.common.n; }

  void abort() {
    if (aborted) return;
    aborted = true;
    for (auto& s : streams) s->abort();
  }

  bool timed_out() const {
    return h.opts_.timeout_s > 0 && seconds_since(start) > h.opts_.timeout_s;
  }

  Usage usage() {
    Usage u;
    for (size_t p = 0; p < streams.size(); ++p) {
      // Usage is final once the stream reports done(); the last finish may precede it a little.
      for (int i = 0; i < 100 && !streams[p]->done(); ++i) streams[p]->next(milliseconds(2));
      Usage su = streams[p]->usage();
      u.prompt_tokens += (int)spec.prompts[p].size();
      u.cached_prompt_tokens += su.cached_prompt_tokens;
      int seen = 0;
      for (int c = 0; c < n(); ++c) seen += tokens_seen[p * n() + c];
      u.completion_tokens += streams[p]->done() ? su.completion_tokens : seen;
    }
    return u;
  }

  // Pulls every delta that is ready, waiting up to `wait` for the first; calls `on` with the
  // choice index for each. Returns true once every choice has finished (or failed).
  bool pump(milliseconds wait, const std::function<void(int, const Delta&)>& on) {
    bool any = false;
    for (size_t p = 0; p < streams.size() && unfinished > 0; ++p) {
      milliseconds t = any ? milliseconds(0)
                           : (streams.size() == 1 ? wait : std::max(milliseconds(1), wait / 8));
      while (auto d = streams[p]->next(t)) {
        t = milliseconds(0);
        any = true;
        handle((int)p, *d, on);
      }
      if (streams[p]->done() && unfinished > 0 && !error) {
        bool stream_open = false;
        for (int c = 0; c < n(); ++c)
          stream_open |= choices[p * n() + c].finish == FinishReason::None;
        if (stream_open && !aborted)
          error = std::make_unique<ApiError>(500, "The engine ended the request without finishing it.",
                                             "server_error");
      }
    }
    return unfinished == 0 || error != nullptr;
  }

  void handle(int p, const Delta& d, const std::function<void(int, const Delta&)>& on) {
    if (d.index < 0 || d.index >= n()) return;  // never trust an index blindly
    int idx = p * n() + d.index;
    ChoiceResult& c = choices[idx];
    if (c.finish != FinishReason::None) return;
    if (!d.tokens.empty()) {
      Clock::time_point now = Clock::now();
      if (ttft_ms < 0) {
        ttft_ms = std::chrono::duration<double, std::milli>(now - start).count();
        h.metrics_.record_ttft(ttft_ms / 1000);
      }
      if (tokens_seen[idx] > 0) {
        double per = std::chrono::duration<double>(now - last_token[idx]).count() / d.tokens.size();
        for (size_t i = 0; i < d.tokens.size(); ++i) h.metrics_.record_inter_token(per);
      }
      last_token[idx] = now;
      tokens_seen[idx] += (int)d.tokens.size();
    }
    if (d.finish == FinishReason::Error) {
      error = std::make_unique<ApiError>(500, "Generation failed: " + d.error, "server_error");
    } else if (d.finish == FinishReason::Abort && !aborted) {
      error = std::make_unique<ApiError>(503, "The request was aborted by the server.",
                                         "service_unavailable_error", "", "aborted");
    }
    c.text += d.text;
    c.tokens.insert(c.tokens.end(), d.tokens.begin(), d.tokens.end());
    if (spec.logprobs) c.logprobs.insert(c.logprobs.end(), d.logprobs.begin(), d.logprobs.end());
    on(idx, d);
    if (d.finish != FinishReason::None) {
      c.finish = d.finish;
      --unfinished;
    }
  }

  // Fills the access record and metrics for a request that ran to its end (or failed).
  void account(int status_override) {
    AccessRecord& rec = current_access_record();
    rec.request_id = meta.id;
    rec.status_override = status_override;
    rec.ttft_ms = ttft_ms;
    int completion = 0;
    for (int t : tokens_seen) completion += t;
    for (auto& p : spec.prompts) rec.prompt_tokens += (int)p.size();
    rec.completion_tokens = completion;
    h.metrics_.record_e2e(seconds_since(start));
  }

  // ---- streaming ----------------------------------------------------------------------

  json delta_logprobs(int idx, const Delta& d, size_t text_before) {
    if (!spec.logprobs || d.logprobs.empty()) return nullptr;
    auto text = [this](int32_t id) { return h.token_text(id); };
    return spec.chat ? chat_logprobs_json(d.logprobs, text)
                     : completion_logprobs_json(d.logprobs, text, text_before);
  }

  // One call of the chunked content provider: sends what is ready. Returns false to drop the
  // connection (the client is gone).
  bool stream_step(httplib::DataSink& sink) {
    SseWriter w(sink);
    bool usage_null = spec.common.include_usage;
    bool ok = true;
    if (!started) {
      started = true;
      for (size_t i = 0; i < choices.size() && ok; ++i) {
        if (spec.chat) {
          ok = w.event(chat_chunk(meta, (int)i, {{"role", "assistant"}, {"content", ""}}, nullptr,
                                  nullptr, usage_null));
        } else if (!choices[i].text.empty()) {  // echo
          ok = w.event(completion_chunk(meta, (int)i, choices[i].text, nullptr, nullptr, usage_null));
        }
      }
    }
    bool done = ok && pump(milliseconds(100), [&](int idx, const Delta& d) {
      if (!ok) return;
      size_t before = choices[idx].text.size() - d.text.size();
      if (!d.text.empty() || (spec.logprobs && !d.logprobs.empty())) {
        json lp = delta_logprobs(idx, d, before);
        ok = w.event(spec.chat ? chat_chunk(meta, idx, {{"content", d.text}}, lp, nullptr, usage_null)
                               : completion_chunk(meta, idx, d.text, lp, nullptr, usage_null));
      }
      if (ok && d.finish != FinishReason::None && d.finish != FinishReason::Error &&
          d.finish != FinishReason::Abort) {
        const char* fr = finish_reason_str(d.finish);
        ok = w.event(spec.chat ? chat_chunk(meta, idx, json::object(), nullptr, fr, usage_null)
                               : completion_chunk(meta, idx, "", nullptr, fr, usage_null));
      }
    });
    if (!ok || (probe && probe->closed())) {
      abort();
      h.metrics_.record_aborted();
      account(499);
      return false;
    }
    if (error || (!done && timed_out())) {
      ApiError e = error ? *error
                         : ApiError(408, "The request timed out.", "timeout_error", "", "timeout");
      abort();
      h.metrics_.record_aborted();
      account(e.status);
      w.event(error_body(e));
      w.done();
      return true;
    }
    if (done) {
      Usage u = usage();
      if (spec.common.include_usage)
        w.event(usage_chunk(meta, spec.chat ? "chat.completion.chunk" : "text_completion", u));
      w.done();
      h.metrics_.record_finished(u);
      account(0);
    }
    return true;
  }
};

Handlers::Handlers(EngineApi& engine, const Tokenizer& tokenizer, ChatRenderer render_chat,
                   Metrics& metrics, Options opts)
    : engine_(engine),
      tok_(tokenizer),
      render_chat_(std::move(render_chat)),
      metrics_(metrics),
      opts_(std::move(opts)),
      created_((int64_t)unix_now()),
      last_submit_unix_s_(unix_now()),
      rng_(std::random_device{}()) {}

Handlers::~Handlers() = default;

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
    std::string text;
    try {
      text = render_chat_(cr.messages, cr.tools, cr.add_generation_prompt);
    } catch (const std::exception& e) {
      throw ApiError(400, std::string("The chat template rejected the messages: ") + e.what(),
                     "invalid_request_error", "messages");
    }
    spec.chat = true;
    spec.common = std::move(cr.common);
    spec.logprobs = cr.logprobs;
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
  auto g = std::make_shared<Generation>(*this, std::move(spec));
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
  g->choices.resize(s.prompts.size() * n);
  g->tokens_seen.assign(g->choices.size(), 0);
  g->last_token.assign(g->choices.size(), Clock::now());
  for (size_t i = 0; i < g->choices.size(); ++i) {
    g->choices[i].index = (int)i;
    g->choices[i].text = s.echo[i / n];
  }
  for (size_t p = 0; p < s.prompts.size(); ++p) {
    GenerationRequest gr;
    gr.prompt = s.prompts[p];
    gr.sampling = s.common.sampling;
    gr.stop = s.common.stop;
    int room = ctx - (int)gr.prompt.size();
    int max_tokens = s.common.max_tokens.value_or(s.chat ? room : 16);
    if (!opts_.context_shift || !s.common.max_tokens) max_tokens = std::min(max_tokens, room);
    gr.stop.max_tokens = std::max(1, max_tokens);
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
    g->streams.push_back(std::move(stream));
    g->unfinished += n;
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

  while (!g->pump(milliseconds(50), [](int, const Delta&) {})) {
    if (g->probe->closed()) {
      g->abort();
      metrics_.record_aborted();
      g->account(499);
      send_json(res, error_body(ApiError(499, "Client closed the connection.")), 499);
      return;
    }
    if (g->timed_out()) {
      g->abort();
      metrics_.record_aborted();
      g->account(408);
      send_api_error(res, ApiError(408, "The request timed out.", "timeout_error", "", "timeout"));
      return;
    }
  }
  if (g->error) {
    g->abort();
    metrics_.record_aborted();
    g->account(0);
    send_api_error(res, *g->error);
    return;
  }
  Usage u = g->usage();
  auto text = [this](int32_t id) { return token_text(id); };
  send_json(res, s.chat ? chat_response(g->meta, g->choices, u, s.logprobs, text)
                        : completion_response(g->meta, g->choices, u, s.logprobs, text));
  metrics_.record_finished(u);
  g->account(0);
}

// ---- tokenizer endpoints ----------------------------------------------------------------------

void Handlers::tokenize(const httplib::Request& req, httplib::Response& res) {
  try {
    json body = parse_json_body(req.body);
    std::vector<int32_t> ids;
    if (body.contains("messages")) {
      json chat_body = body;
      ChatRequest cr = parse_chat_request(chat_body);
      std::string text;
      try {
        text = render_chat_(cr.messages, cr.tools, cr.add_generation_prompt);
      } catch (const std::exception& e) {
        throw ApiError(400, std::string("The chat template rejected the messages: ") + e.what(),
                       "invalid_request_error", "messages");
      }
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
