// One generation request in flight: the engine streams of its prompts, what each choice has
// produced so far, timings, and the two ways of answering it (gathered JSON, or SSE chunks).
// Shared between the handler and, when streaming, the content provider that outlives it.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <httplib.h>

#include "engine/engine_api.h"
#include "server/openai/openai_protocol.h"
#include "server/openai/tool_calls.h"

namespace pagoda::server {

class ConnectionProbe;
class SseWriter;
class Metrics;

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
};

class Generation {
 public:
  using Clock = std::chrono::steady_clock;

  Generation(GenSpec spec, Metrics& metrics, TokenText token_text, double timeout_s);
  // Aborts whatever is unfinished, then runs on_release (which returns the queue reservation).
  ~Generation();

  // Sizes the per-choice state once `meta` and the number of prompts are known.
  void init_choices();
  // Adds the stream of the next prompt (in prompt order).
  void add_stream(std::shared_ptr<RequestStream> s);

  // Pulls every delta that is ready, waiting up to `wait` for the first; calls `on` with the
  // choice index for each. Returns true once every choice has finished or the engine failed.
  bool pump(std::chrono::milliseconds wait, const std::function<void(int, const Delta&)>& on);
  // Stops every stream (idempotent).
  void abort();
  bool timed_out() const;
  // Final usage over all prompts and choices.
  Usage usage();
  // Fills the access record and the latency metric once the request has ended.
  void account(int status_override);

  // Non-streaming: waits for the end; fills `res` with the answer or the error. A client that
  // left (per `probe`) or a timeout aborts the request.
  void answer(httplib::Response& res);
  // Streaming: one call of the chunked content provider. Returns false to drop the connection.
  bool stream_step(httplib::DataSink& sink);

  GenSpec spec;
  ResponseMeta meta;
  std::unique_ptr<ConnectionProbe> probe;
  int reserved = 0;                     // sequences reserved against the queue bound
  std::function<void()> on_release;     // runs in the destructor
  std::function<std::string()> new_tool_call_id;  // ids of the tool calls found in the output
  const std::vector<std::shared_ptr<RequestStream>>& streams() const { return streams_; }

 private:
  int n() const { return spec.common.n; }
  void handle(int prompt, const Delta& d, const std::function<void(int, const Delta&)>& on);
  json delta_logprobs(const Delta& d, size_t text_before);
  // Tool calls: feeds a delta's text to the choice's parser; what it releases waits in
  // tool_out_ until the stream sends it.
  void parse_tools(int idx, const Delta& d);
  // Streaming with tool calls: the chunks for one delta (content, then each new call).
  bool stream_tool_delta(SseWriter& w, int idx, const Delta& d);

  Metrics& metrics_;
  TokenText token_text_;
  double timeout_s_;
  Clock::time_point start_ = Clock::now();
  std::vector<std::shared_ptr<RequestStream>> streams_;  // one per prompt
  std::vector<ChoiceResult> choices_;                     // index = prompt * n + choice
  std::vector<int> tokens_seen_;                          // per choice
  std::vector<Clock::time_point> last_token_;             // per choice
  std::vector<ToolCallParser> tool_parsers_;              // per choice, when reading tool calls
  std::vector<std::string> tool_content_;                 // per choice: content outside calls
  std::vector<ToolCallEvents> tool_out_;                  // per choice: released, not yet streamed
  std::vector<std::vector<TokenLogprob>> prompt_lps_;     // per choice, with spec.prompt_logprobs
  std::vector<char> echo_sent_;                           // streaming: the echo chunk went out
  int unfinished_ = 0;
  double ttft_ms_ = -1;
  bool aborted_ = false;
  bool started_ = false;             // streaming: the opening chunks were sent
  std::unique_ptr<ApiError> error_;  // the engine failed the request
};

}  // namespace pagoda::server
