// One function per endpoint: parse -> validate -> template -> tokenize -> submit -> answer
// (gathered or streamed as SSE). Talks to the engine only through EngineApi, so tests can run it
// against a test double.
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

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "engine/engine_api.h"
#include "engine/tokenizer/tokenizer.h"
#include "server/openai/tool_calls.h"

namespace pagoda::server {

class Metrics;
struct GenSpec;
struct ChatRequest;

class Handlers {
 public:
  // Renders chat messages to prompt text with the model's template; throws (any
  // std::exception) when the template rejects the conversation. The JSON keeps the client's
  // key order: templates print tool schemas and tool-call arguments with `tojson`, and Python
  // (whose rendering models are trained on) keeps that order.
  using ChatRenderer = std::function<std::string(const nlohmann::ordered_json& messages,
                                                 const nlohmann::ordered_json& tools,
                                                 bool add_generation_prompt)>;

  struct Options {
    std::string model_name;       // the id in /v1/models and in every response
    int max_inflight_seqs = 320;  // running + waiting sequences before 429
    double timeout_s = 600;       // per request; 0 = none
    double health_stall_s = 60;   // a step with work pending older than this: /health 503
    bool context_shift = true;    // when off, max_tokens is capped by the free context
    // How chat output is read for tool calls when a request has tools (see tool_calls.h);
    // None: never (the output is always content).
    ToolCallFormat tool_call_format = ToolCallFormat::Hermes;
  };

  Handlers(EngineApi& engine, const Tokenizer& tokenizer, ChatRenderer render_chat,
           Metrics& metrics, Options opts);
  ~Handlers();

  void health(const httplib::Request& req, httplib::Response& res);
  void models(const httplib::Request& req, httplib::Response& res);
  void model(const httplib::Request& req, httplib::Response& res);  // GET /v1/models/{id}
  void completions(const httplib::Request& req, httplib::Response& res);
  void chat_completions(const httplib::Request& req, httplib::Response& res);
  void tokenize(const httplib::Request& req, httplib::Response& res);
  void detokenize(const httplib::Request& req, httplib::Response& res);

  EngineStats engine_stats() const { return engine_.stats(); }
  // Sequences admitted by the HTTP layer and not yet finished.
  int inflight_seqs() const { return inflight_seqs_.load(); }
  // Aborts every request in flight (shutdown after the grace period).
  void abort_all();

 private:
  // The prompt text of a chat request; ApiError(400) when the template rejects it.
  std::string render_chat(const std::string& raw_body, const ChatRequest& cr) const;
  // Reserves `n` sequences against the queue bound; false when full.
  bool try_reserve(int n);
  void release(int n);
  void track(const std::shared_ptr<RequestStream>& s);
  void untrack(const std::shared_ptr<RequestStream>& s);
  std::string new_id(const char* prefix);
  // A tool call's id: "call_" + 24 alphanumerics, or 9 alphanumerics for Mistral models (their
  // template refuses any other id when the call comes back in the conversation).
  std::string new_tool_call_id();
  nlohmann::json model_card() const;
  std::string token_text(int32_t id) const;
  std::vector<int32_t> encode_prompt(const std::string& text, bool chat) const;
  void check_token_ids(const std::vector<int32_t>& ids, const std::string& param) const;

  // Shared by completions and chat: submit every prompt x n and answer.
  void generate(const httplib::Request& req, httplib::Response& res, GenSpec spec);

  EngineApi& engine_;
  const Tokenizer& tok_;
  ChatRenderer render_chat_;
  Metrics& metrics_;
  Options opts_;
  int64_t created_;  // unix time the handlers were made (the model's "created")
  std::atomic<double> last_submit_unix_s_;  // with the engine's last step: /health's progress

  std::atomic<int> inflight_seqs_{0};
  std::mutex mu_;
  std::mt19937_64 rng_;
  std::set<std::shared_ptr<RequestStream>> active_;
  std::map<int32_t, std::string> tool_markers_;  // control tokens that open a tool call
};

}  // namespace pagoda::server
