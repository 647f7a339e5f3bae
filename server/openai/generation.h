// One generation request in flight: the engine streams of its prompts, what each choice has
// produced so far, timings, and the two ways of answering it (gathered JSON, or SSE chunks).
// Shared between the handler and, when streaming, the content provider that outlives it.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <httplib.h>

#include "engine/engine_api.h"
#include "server/http/access_log.h"
#include "server/http/api_error.h"
#include "server/openai/reasoning.h"
#include "server/openai/request_parse.h"
#include "server/openai/response_build.h"
#include "server/openai/tool_calls.h"

namespace pagoda::server {

class ConnectionProbe;
class SseWriter;
class Metrics;

// An answer shape other than chat / completions' (the Responses API, Anthropic's Messages API):
// it gets what each delta released (reasoning, content, finished tool calls), gathered or
// streamed through the same calls, so the two answers cannot differ. One choice (n = 1) per
// request.
class AnswerFormat {
 public:
  virtual ~AnswerFormat() = default;
  // The prefix of the answer's id ("resp_", "msg_").
  virtual const char* id_prefix() const = 0;
  // The shape of the errors answered before the stream begins, and the request field that holds
  // the prompt (what a refusal of the prompt names).
  virtual ErrorShape error_shape() const = 0;
  virtual const char* prompt_param() const = 0;
  // The request's id, model and time, before anything else.
  virtual void begin(const ResponseMeta& meta) = 0;
  // Streaming: the events before any output; false when the client left.
  virtual bool open(httplib::DataSink& sink) = 0;
  // What one delta released; `sink` is null when the answer is gathered.
  virtual bool output(httplib::DataSink* sink, const std::string& reasoning, const std::string& content,
                      const std::vector<ToolCallOut>& calls) = 0;
  // The choice finished: the closing events when streaming, and the answer's body.
  virtual json close(httplib::DataSink* sink, const ChoiceResult& result, const Usage& usage) = 0;
  // Streaming: the request failed after the status line went out.
  virtual void fail(httplib::DataSink& sink, const ApiError& e) = 0;
};

// A validated generation request, ready to submit.
struct GenSpec {
  bool chat = false;
  CommonRequest common;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::string> echo;  // per prompt: text to prepend (completions with echo)
  bool logprobs = false;          // include logprobs in the answer
  // Completions with echo and logprobs: the logprobs cover the prompt tokens (the first with
  // null logprob), then the generated ones. Streaming sends each choice's echo chunk with the
  // prompt's logprobs once its first delta arrives.
  bool prompt_logprobs = false;
  // Completions with echo and max_tokens 0: the engine runs with max_tokens 1 and the answer
  // holds only the echoed prompt (finish "length", no completion tokens).
  bool echo_only = false;
  // Chat with tools: the output is read for tool calls in this format (None: plain content).
  ToolCallFormat tool_format = ToolCallFormat::None;
  std::set<std::string> tool_names;             // the request's functions
  std::map<int32_t, std::string> tool_markers;  // control tokens that open a call -> their text
  // Chat from a reasoning model: the <think> block is read out of the output (reasoning.h).
  ReasoningFormat reasoning_format = ReasoningFormat::None;
  ReasoningStart reasoning_start = ReasoningStart::Open;
  // Set: the answer takes this shape instead of a chat completion's.
  std::shared_ptr<AnswerFormat> format;
};

class Generation {
 public:
  using Clock = std::chrono::steady_clock;

  // What a generation needs from the handler that makes it.
  struct Context {
    Metrics& metrics;
    TokenText token_text;                           // a token as the client sees it in logprobs
    std::function<std::string()> new_tool_call_id;  // ids of the tool calls found in the output
    double timeout_s = 0;                           // 0: none
    // The request's access-log record: filled in when the request ends; latencies count from
    // its start (the request's arrival, parsing included).
    std::shared_ptr<AccessRecord> record;
    // Runs in the destructor, however the request ended, with the streams submitted.
    std::function<void(const std::vector<std::shared_ptr<RequestStream>>&)> on_release;
  };

  // Builds every choice's state (prompts x n); `req` is the request being answered, whose
  // connection is watched for a client that leaves.
  Generation(GenSpec spec, ResponseMeta meta, Context ctx, const httplib::Request& req);
  // Aborts whatever is unfinished, then runs ctx.on_release.
  ~Generation();

  // Adds the stream of the next prompt (in prompt order).
  void add_stream(std::shared_ptr<RequestStream> s);

  // Non-streaming: waits for the end; fills `res` with the answer or the error. A client that
  // left or a timeout aborts the request.
  void answer(httplib::Response& res);
  // Streaming: one call of the chunked content provider. Returns false to drop the connection.
  bool stream_step(httplib::DataSink& sink);

 private:
  // One choice: what it produced, its timing, its tool-call reading.
  struct Choice {
    ChoiceResult result;  // text, tokens, logprobs, tool calls, finish
    int tokens_seen = 0;
    Clock::time_point last_token;
    std::optional<ReasoningParser> reasoning_parser;  // set for reasoning models
    std::optional<ToolCallParser> tool_parser;  // set when the output is read for tool calls
    std::string content;                        // read by a parser: the content released
    std::string reasoning_out;                  // released by the parsers, not yet streamed
    ToolCallEvents tool_out;
    std::vector<TokenLogprob> prompt_logprobs;  // with spec_.prompt_logprobs
    bool echo_sent = false;                     // streaming: the echo chunk went out
  };

  int n() const { return spec_.common.n; }
  bool reads_tool_calls() const { return spec_.chat && spec_.tool_format != ToolCallFormat::None; }
  // Whether the output goes through parsers (reasoning, tool calls) before the client sees it.
  bool parses_output() const {
    return reads_tool_calls() || spec_.reasoning_format != ReasoningFormat::None || spec_.format;
  }
  // Pulls every delta that is ready, waiting up to `wait` for the first; calls `on` with the
  // choice index for each. Returns true once every choice has finished or the engine failed.
  bool pump(std::chrono::milliseconds wait, const std::function<void(int, const Delta&)>& on);
  void handle(int prompt, const Delta& d, const std::function<void(int, const Delta&)>& on);
  // Stops every stream (idempotent).
  void abort();
  bool timed_out() const;
  // Final usage over all prompts and choices.
  Usage usage() const;
  // Fills the access record and the latency metric once the request has ended.
  void account(int status_override);
  json delta_logprobs(const Delta& d, size_t text_before);
  // Reasoning and tool calls: feeds a delta's text to the choice's parsers; what they release
  // waits in reasoning_out / tool_out until the answer takes it.
  void parse_output(int idx, const Delta& d);
  void parse_tools(Choice& choice, std::string text, bool final);
  // Streaming a parsed output: the chunks for one delta (reasoning, content, then each new call).
  bool stream_parsed_delta(SseWriter& w, int idx, const Delta& d);
  // An AnswerFormat's share of a delta (what the parsers released since the last one).
  bool format_output(httplib::DataSink* sink, int idx);

  const GenSpec spec_;
  const ResponseMeta meta_;
  Context ctx_;
  Clock::time_point start_;
  std::unique_ptr<ConnectionProbe> probe_;
  std::vector<std::shared_ptr<RequestStream>> streams_;  // one per prompt
  std::vector<Choice> choices_;                          // index = prompt * n + choice
  int unfinished_ = 0;
  double ttft_ms_ = -1;
  bool aborted_ = false;
  bool started_ = false;             // streaming: the opening chunks were sent
  std::unique_ptr<ApiError> error_;  // the engine failed the request
};

}  // namespace pagoda::server
