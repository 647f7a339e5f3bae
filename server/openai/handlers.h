// The API service (OpenAI's endpoints, and Anthropic's Messages API on the same machinery): one
// function per endpoint, parse -> validate -> template -> tokenize
// -> submit -> answer (gathered or streamed as SSE), and the route table that maps the API's
// paths onto them for the HTTP layer. Talks to the engine only through EngineApi (tokenizing
// included), so tests can run it against a test double.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "engine/engine_api.h"
#include "server/http/access_log.h"
#include "server/http/api_error.h"
#include "server/http/api_service.h"
#include "server/openai/reasoning.h"
#include "server/openai/responses_store.h"
#include "server/openai/chat_literals.h"
#include "server/openai/tool_calls.h"

namespace pagoda::server {

class Metrics;
struct GenSpec;
struct ChatRequest;
struct ScorePairs;

class Handlers : public ApiService {
 public:
  // Renders chat messages to prompt text with the model's template; throws (any
  // std::exception) when the template rejects the conversation. The JSON keeps the client's
  // key order: templates print tool schemas and tool-call arguments with `tojson`, and Python
  // (whose rendering models are trained on) keeps that order. `variables`: extra names for the
  // template (the request's chat_template_kwargs, as vLLM passes them), an object or null.
  using ChatRenderer = std::function<std::string(const nlohmann::ordered_json& messages,
                                                 const nlohmann::ordered_json& tools,
                                                 bool add_generation_prompt,
                                                 const nlohmann::ordered_json& variables)>;

  struct Options {
    std::string model_name;       // the id in /v1/models and in responses that name no other
    // More names the model answers to (--served-model-name a,b,c: the first is model_name);
    // a request naming any of them is answered under that name, any other name gets 404.
    std::vector<std::string> model_aliases;
    Pooling pooling = Pooling::Mean;  // embeddings of a model whose GGUF names no pooling
    double timeout_s = 600;       // per request; 0 = none
    double health_stall_s = 60;   // a step with work pending older than this: /health 503
    // Control-token text in chat messages becomes control tokens (the old behaviour); off:
    // the client's text is tokenized as text (chat_literals.h).
    bool chat_special_tokens = false;
    // How chat output is read for tool calls when a request has tools (see tool_calls.h);
    // None: never (the output is always content).
    ToolCallFormat tool_call_format = ToolCallFormat::Hermes;
    // How chat output is read for a <think> block (reasoning.h); None: never.
    ReasoningFormat reasoning_format = ReasoningFormat::None;
    // Responses kept for previous_response_id and GET / DELETE (responses_store.h); 0: none.
    size_t responses_store_count = 1000;
    size_t responses_store_bytes = 64u << 20;
    // POST /v1/load_lora_adapter and /v1/unload_lora_adapter answer (else 404).
    bool allow_runtime_lora = false;
  };

  Handlers(EngineApi& engine, ChatRenderer render_chat, Metrics& metrics, Options opts);
  ~Handlers() override;

  // The API's routes, for HttpServer; they call the Handlers it is given as its service.
  static std::vector<ApiRoute> routes();

  void health(const httplib::Request& req, httplib::Response& res) override;
  EngineStats engine_stats() const override { return engine_.stats(); }

  void models(const httplib::Request& req, httplib::Response& res);
  void model(const httplib::Request& req, httplib::Response& res);  // GET /v1/models/{id}
  void completions(const httplib::Request& req, httplib::Response& res,
                   const std::shared_ptr<AccessRecord>& record);
  void chat_completions(const httplib::Request& req, httplib::Response& res,
                        const std::shared_ptr<AccessRecord>& record);
  void embeddings(const httplib::Request& req, httplib::Response& res,
                  const std::shared_ptr<AccessRecord>& record);  // embeddings.cpp
  // POST /v1/responses, GET and DELETE /v1/responses/{id} (OpenAI's Responses API).
  void responses(const httplib::Request& req, httplib::Response& res,
                 const std::shared_ptr<AccessRecord>& record);
  void get_response(const httplib::Request& req, httplib::Response& res);
  // POST /v1/messages and /v1/messages/count_tokens (Anthropic's Messages API; messages.cpp).
  void messages(const httplib::Request& req, httplib::Response& res,
                const std::shared_ptr<AccessRecord>& record);
  void count_message_tokens(const httplib::Request& req, httplib::Response& res);
  // POST /v1/rerank (/rerank, /v2/rerank) and vLLM's POST /v1/score (rerank.cpp).
  void rerank(const httplib::Request& req, httplib::Response& res, const std::shared_ptr<AccessRecord>& record);
  void score(const httplib::Request& req, httplib::Response& res, const std::shared_ptr<AccessRecord>& record);
  void delete_response(const httplib::Request& req, httplib::Response& res);
  void tokenize(const httplib::Request& req, httplib::Response& res);
  // POST /v1/cache/save (cache_admin.cpp): the prefix cache to the --kv-cache-dir file, now.
  void save_cache(const httplib::Request& req, httplib::Response& res);
  // GET /v1/cache/blocks (cache_admin.cpp): the prefix cache as the --kv-events stream names it.
  void cache_blocks(const httplib::Request& req, httplib::Response& res);
  void detokenize(const httplib::Request& req, httplib::Response& res);
  // POST /v1/load_lora_adapter and /v1/unload_lora_adapter, vLLM's shape (lora_admin.cpp).
  void load_lora_adapter(const httplib::Request& req, httplib::Response& res);
  void unload_lora_adapter(const httplib::Request& req, httplib::Response& res);

  // The engine's admission bound and its sequences in flight (EngineApi), for the HTTP layer.
  int admission_limit() const override { return engine_.admission_limit(); }
  int inflight_seqs() const override { return engine_.inflight_seqs(); }
  // Aborts every request in flight, and those submitted from now on (shutdown after the grace
  // period: a handler past the drain check may still be about to submit).
  void abort_all() override;

  // The name a request's `model` is answered under: itself when served (empty: model_name);
  // ApiError 404 model_not_found, in OpenAI's shape, for any other. Every endpoint that takes
  // `model` calls it.
  std::string served_model(const std::string& requested) const;
  // The LoRA adapter a served name stands for: the name itself when it is a loaded adapter's,
  // "" for the base model's names.
  std::string lora_of(const std::string& served) const;

 private:
  // The client's error for a refused submit (429 queue full, 503 shutting down, else 400 on
  // `param`).
  static ApiError submit_error(const SubmitError& err, const std::string& param);
  static void send_json(httplib::Response& res, const nlohmann::json& j, int status = 200);
  // 400 context_length_exceeded: `param` has `tokens` tokens, more than the context takes.
  static ApiError context_exceeded(int context, const std::string& param, size_t tokens);
  static double unix_now();
  // A chat request's prompt: the rendered template (text) and its tokens, the client's text
  // kept as text unless chat_special_tokens; ApiError(400) when the template rejects it.
  struct ChatPrompt {
    std::string text;
    std::vector<int32_t> ids;
  };
  ChatPrompt chat_prompt(const ChatRequest& cr) const;
  // Reasoning models: the output is read for the <think> block, and a constraint waits for its
  // end. `prompt_text`: the rendered chat (whether it opened or closed the block).
  void read_reasoning(GenSpec& spec, const std::string& prompt_text) const;
  // What a chat request runs as: the rendered prompt, tool-call reading and forced calls,
  // reasoning. Throws ApiError.
  GenSpec chat_spec(ChatRequest& cr) const;
  // A stored response, or ApiError(404) naming `param` (empty: the path's id).
  StoredResponse stored_response(const std::string& id, const std::string& param);
  // Streams in flight, so that abort_all reaches them.
  void track(const std::shared_ptr<RequestStream>& s);
  void untrack(const std::shared_ptr<RequestStream>& s);
  std::string new_id(const char* prefix);
  // A tool call's id: "call_" + 24 alphanumerics, or 9 alphanumerics for Mistral models (their
  // template refuses any other id when the call comes back in the conversation).
  std::string new_tool_call_id();
  nlohmann::json model_card(const std::string& name) const;
  std::string token_text(int32_t id) const;
  std::vector<int32_t> encode_prompt(const std::string& text) const;
  // A rendered chat usually spells its own BOS; adds one when the model wants it and the
  // template left it out, never twice.
  void ensure_bos(std::vector<int32_t>& ids) const;
  void check_token_ids(const std::vector<int32_t>& ids, const std::string& param) const;

  // A request of run_prefill_batch, finished: every delta's logprobs, the finish delta (its
  // embedding), its usage.
  struct PrefillResult {
    std::vector<TokenLogprob> logprobs;
    Delta last;
    Usage usage;
  };
  // Submits requests that end after their prompt (embeddings; rerank's one token) together so
  // the engine batches them, waits for each in order and records it in the metrics. Throws
  // ApiError: a refused submit (naming `param`), the timeout, a closed connection (499), a
  // request aborted or failed (500). What is left is aborted on the way out (prefill_batch.cpp).
  std::vector<PrefillResult> run_prefill_batch(const httplib::Request& req, std::vector<GenerationRequest> reqs,
                                               const std::string& param);
  // The scores of text pairs (rerank.h's ScorePairs), by the model's kind: an embedding model's
  // cosine similarity, else a generative reranker's yes/no probability. Adds the prompt tokens
  // to `tokens`. Throws ApiError.
  std::vector<double> score_pairs(const httplib::Request& req, const ScorePairs& pairs, int* tokens);

  // Shared by completions and chat: submit every prompt x n and answer.
  void generate(const httplib::Request& req, httplib::Response& res,
                const std::shared_ptr<AccessRecord>& record, GenSpec spec);

  EngineApi& engine_;
  ChatRenderer render_chat_;
  Metrics& metrics_;
  Options opts_;
  int64_t created_;  // unix time the handlers were made (the model's "created")
  std::atomic<double> last_submit_unix_s_;  // with the engine's last step: /health's progress

  std::mutex mu_;
  bool aborting_ = false;  // guarded by mu_: abort_all() was called
  std::mt19937_64 rng_;
  std::set<std::shared_ptr<RequestStream>> active_;
  std::map<int32_t, std::string> tool_markers_;  // control tokens that open a tool call
  ResponseStore store_;
  std::unique_ptr<ChatLiterals> literals_;  // null with chat_special_tokens
};

}  // namespace pagoda::server
