// Generation: pumping engine deltas into per-choice state and answering, gathered or streamed
// (see generation.h).
#include "server/openai/generation.h"

#include <algorithm>

#include "server/http/connection_probe.h"
#include "server/http/metrics.h"
#include "server/http/sse_writer.h"
#include "server/openai/echo_logprobs.h"

namespace pagoda::server {

using std::chrono::milliseconds;

namespace {

double seconds_since(Generation::Clock::time_point t) {
  return std::chrono::duration<double>(Generation::Clock::now() - t).count();
}

}  // namespace

Generation::Generation(GenSpec spec, ResponseMeta meta, Context ctx, const httplib::Request& req)
    : spec_(std::move(spec)),
      meta_(std::move(meta)),
      ctx_(std::move(ctx)),
      start_(ctx_.record->start != Clock::time_point{} ? ctx_.record->start : Clock::now()),
      probe_(std::make_unique<ConnectionProbe>(req)),
      choices_(spec_.prompts.size() * n()) {
  if (spec_.format) spec_.format->begin(meta_);
  const Clock::time_point now = Clock::now();
  for (size_t i = 0; i < choices_.size(); ++i) {
    Choice& c = choices_[i];
    c.result.index = (int)i;
    c.result.text = spec_.echo[i / n()];
    c.last_token = now;
    if (reads_tool_calls()) c.tool_parser.emplace(spec_.tool_format, spec_.tool_names);
    if (spec_.reasoning_format != ReasoningFormat::None)
      c.reasoning_parser.emplace(spec_.reasoning_format, spec_.reasoning_start);
  }
}

Generation::~Generation() {
  if (unfinished_ > 0) abort();
  if (ctx_.on_release) ctx_.on_release(streams_);
}

void Generation::add_stream(std::shared_ptr<RequestStream> s) {
  streams_.push_back(std::move(s));
  unfinished_ += n();
}

void Generation::abort() {
  if (aborted_) return;
  aborted_ = true;
  for (auto& s : streams_) s->abort();
}

bool Generation::timed_out() const {
  return ctx_.timeout_s > 0 && seconds_since(start_) > ctx_.timeout_s;
}

// Called once every choice has finished: a stream is done() as soon as its last finish delta
// has been read, and its usage is final then.
Usage Generation::usage() const {
  Usage u;
  for (size_t p = 0; p < streams_.size(); ++p) {
    Usage su = streams_[p]->usage();
    u.prompt_tokens += (int)spec_.prompts[p].size();
    u.cached_prompt_tokens += su.cached_prompt_tokens;
    u.spec_drafted_tokens += su.spec_drafted_tokens;
    u.spec_accepted_tokens += su.spec_accepted_tokens;
    // Several prompts run side by side: each phase took as long as its slowest.
    u.queue_seconds = std::max(u.queue_seconds, su.queue_seconds);
    u.prefill_seconds = std::max(u.prefill_seconds, su.prefill_seconds);
    u.decode_seconds = std::max(u.decode_seconds, su.decode_seconds);
    int seen = 0;
    for (int c = 0; c < n(); ++c) seen += choices_[p * n() + c].tokens_seen;
    if (!spec_.echo_only) u.completion_tokens += streams_[p]->done() ? su.completion_tokens : seen;
  }
  return u;
}

bool Generation::pump(milliseconds wait, const std::function<void(int, const Delta&)>& on) {
  bool any = false;
  for (size_t p = 0; p < streams_.size() && unfinished_ > 0; ++p) {
    // With several prompts, no single stream may hold up the others for the whole wait.
    milliseconds t = any ? milliseconds(0)
                         : (streams_.size() == 1 ? wait : std::max(milliseconds(1), wait / 8));
    while (auto d = streams_[p]->next(t)) {
      t = milliseconds(0);
      any = true;
      handle((int)p, *d, on);
    }
    if (streams_[p]->done() && unfinished_ > 0 && !error_ && !aborted_) {
      bool open = false;
      for (int c = 0; c < n(); ++c) open |= choices_[p * n() + c].result.finish == FinishReason::None;
      if (open)
        error_ = std::make_unique<ApiError>(500, "The engine ended the request without finishing it.",
                                            "server_error");
    }
  }
  return unfinished_ == 0 || error_ != nullptr;
}

void Generation::handle(int p, const Delta& raw, const std::function<void(int, const Delta&)>& on) {
  if (raw.index < 0 || raw.index >= n()) return;  // never trust an index blindly
  int idx = p * n() + raw.index;
  Choice& choice = choices_[idx];
  ChoiceResult& c = choice.result;
  if (c.finish != FinishReason::None) return;
  // max_tokens 0 (echo only): the token the engine had to generate is not part of the answer.
  Delta prompt_only;
  if (spec_.echo_only) {
    prompt_only.index = raw.index;
    prompt_only.prompt_logprobs = raw.prompt_logprobs;
    prompt_only.finish = raw.finish == FinishReason::Stop ? FinishReason::Length : raw.finish;
    prompt_only.error = raw.error;
  }
  const Delta& d = spec_.echo_only ? prompt_only : raw;
  if (spec_.prompt_logprobs && !d.prompt_logprobs.empty()) choice.prompt_logprobs = d.prompt_logprobs;
  if (!d.tokens.empty()) {
    Clock::time_point now = Clock::now();
    if (ttft_ms_ < 0) {
      ttft_ms_ = std::chrono::duration<double, std::milli>(now - start_).count();
      ctx_.metrics.record_ttft(ttft_ms_ / 1000);
    }
    if (choice.tokens_seen > 0) {
      double per = std::chrono::duration<double>(now - choice.last_token).count() / d.tokens.size();
      for (size_t i = 0; i < d.tokens.size(); ++i) ctx_.metrics.record_inter_token(per);
    }
    choice.last_token = now;
    choice.tokens_seen += (int)d.tokens.size();
  }
  if (d.finish == FinishReason::Error) {
    error_ = std::make_unique<ApiError>(500, "Generation failed: " + d.error, "server_error");
  } else if (d.finish == FinishReason::Abort && !aborted_) {
    error_ = std::make_unique<ApiError>(503, "The request was aborted by the server.",
                                        "service_unavailable_error", "", "aborted");
  }
  c.text += d.text;
  c.tokens.insert(c.tokens.end(), d.tokens.begin(), d.tokens.end());
  if (spec_.logprobs) c.logprobs.insert(c.logprobs.end(), d.logprobs.begin(), d.logprobs.end());
  if (parses_output()) parse_output(idx, d);
  on(idx, d);
  if (d.finish != FinishReason::None) {
    c.finish = d.finish;
    c.stop_string = d.stop_string;
    --unfinished_;
  }
}

void Generation::parse_output(int idx, const Delta& d) {
  Choice& choice = choices_[idx];
  const bool final = d.finish == FinishReason::Stop || d.finish == FinishReason::Length;
  // A marker that is a control token detokenizes to nothing; the tool parser gets its text.
  std::string text;
  if (choice.tool_parser)
    for (int32_t t : d.tokens)
      if (auto m = spec_.tool_markers.find(t); m != spec_.tool_markers.end()) text += m->second;
  text += d.text;
  if (choice.reasoning_parser) {
    ReasoningSplit split = choice.reasoning_parser->feed(text);
    if (final) {
      ReasoningSplit rest = choice.reasoning_parser->finish();
      split.reasoning += rest.reasoning;
      split.content += rest.content;
    }
    choice.result.reasoning += split.reasoning;
    choice.reasoning_out += split.reasoning;
    text = std::move(split.content);
  }
  if (choice.tool_parser) {
    parse_tools(choice, std::move(text), final);
  } else {
    choice.content += text;
    choice.tool_out.content += text;
  }
}

void Generation::parse_tools(Choice& choice, std::string text, bool final) {
  ToolCallParser& p = *choice.tool_parser;
  ToolCallEvents ev = p.feed(text);
  if (final) {
    ToolCallEvents rest = p.finish();
    ev.content += rest.content;
    for (auto& c : rest.calls) ev.calls.push_back(std::move(c));
  }
  // A control-token marker that opened no call goes back to being invisible, as it is without
  // tool parsing (ordinary text hardly ever spells it: that text encodes as the token itself).
  for (const auto& [token, marker] : spec_.tool_markers) {
    for (size_t at = ev.content.find(marker); at != std::string::npos; at = ev.content.find(marker, at))
      ev.content.erase(at, marker.size());
  }
  choice.content += ev.content;
  ToolCallEvents& out = choice.tool_out;
  out.content += ev.content;
  for (ParsedToolCall& pc : ev.calls) {
    choice.result.tool_calls.push_back(
        {ctx_.new_tool_call_id ? ctx_.new_tool_call_id() : "call_0", pc.name, pc.arguments});
    out.calls.push_back(std::move(pc));
  }
}

bool Generation::format_output(httplib::DataSink* sink, int idx) {
  Choice& choice = choices_[idx];
  ToolCallEvents ev = std::move(choice.tool_out);
  choice.tool_out = ToolCallEvents{};
  std::string reasoning = std::move(choice.reasoning_out);
  choice.reasoning_out.clear();
  const std::vector<ToolCallOut>& all = choice.result.tool_calls;
  std::vector<ToolCallOut> calls(all.end() - (std::ptrdiff_t)ev.calls.size(), all.end());
  if (reasoning.empty() && ev.content.empty() && calls.empty()) return true;
  return spec_.format->output(sink, reasoning, ev.content, calls);
}

bool Generation::stream_parsed_delta(SseWriter& w, int idx, const Delta& d) {
  const bool usage_null = spec_.common.include_usage;
  Choice& choice = choices_[idx];
  ToolCallEvents ev = std::move(choice.tool_out);
  choice.tool_out = ToolCallEvents{};
  bool ok = true;
  if (!choice.reasoning_out.empty()) {
    ok = w.event(chat_chunk(meta_, idx, {{"reasoning_content", choice.reasoning_out}}, nullptr, nullptr,
                            usage_null));
    choice.reasoning_out.clear();
  }
  // Logprobs travel with the content chunk even while the text itself is held back.
  json lp = delta_logprobs(d, 0);
  if (ok && (!ev.content.empty() || !lp.is_null()))
    ok = w.event(chat_chunk(meta_, idx, {{"content", ev.content}}, lp, nullptr, usage_null));
  const std::vector<ToolCallOut>& all = choice.result.tool_calls;
  for (size_t k = all.size() - ev.calls.size(); k < all.size() && ok; ++k) {
    ok = w.event(chat_chunk(meta_, idx, tool_call_head_delta((int)k, all[k]), nullptr, nullptr,
                            usage_null)) &&
         w.event(chat_chunk(meta_, idx, tool_call_arguments_delta((int)k, all[k].arguments),
                            nullptr, nullptr, usage_null));
  }
  return ok;
}

void Generation::account(int status_override) {
  AccessRecord& rec = *ctx_.record;
  rec.request_id = meta_.id;
  rec.status_override = status_override;
  rec.ttft_ms = ttft_ms_;
  rec.prompt_tokens = 0;
  for (auto& p : spec_.prompts) rec.prompt_tokens += (int)p.size();
  rec.completion_tokens = 0;
  for (const Choice& c : choices_) rec.completion_tokens += c.tokens_seen;
  ctx_.metrics.record_e2e(seconds_since(start_));
}

void Generation::answer(httplib::Response& res) {
  auto fail = [&](const ApiError& e, int log_status) {
    abort();
    ctx_.metrics.record_aborted();
    account(log_status);
    send_error(res, e, spec_.format ? spec_.format->error_shape() : ErrorShape::OpenAI);
  };
  auto gathered = [this](int idx, const Delta&) {
    if (spec_.format) format_output(nullptr, idx);
  };
  while (!pump(milliseconds(50), gathered)) {
    if (probe_->closed()) {
      // Nobody will read this; 499 (nginx's "client closed request") is for the access log.
      fail(ApiError(499, "Client closed the connection."), 499);
      return;
    }
    if (timed_out()) {
      fail(ApiError(408, "The request timed out.", "timeout_error", "", "timeout"), 408);
      return;
    }
  }
  if (error_) {
    fail(*error_, 0);
    return;
  }
  // With tool calls the message holds what the parser released as content: the text around
  // the calls (exactly the raw text when there are none), as the stream sends it.
  Usage u = usage();
  const char* reason = finish_reason_str(choices_.front().result.finish);
  // The answer is the last use of the choices: their results move into it.
  std::vector<ChoiceResult> results;
  results.reserve(choices_.size());
  for (Choice& c : choices_) {
    if (parses_output()) c.result.text = std::move(c.content);
    results.push_back(std::move(c.result));
  }
  const TokenText& text = ctx_.token_text;
  json body = spec_.format ? spec_.format->close(nullptr, results[0], u)
              : spec_.chat ? chat_response(meta_, results, u, spec_.logprobs, text)
                           : completion_response(meta_, results, u, spec_.logprobs, text);
  if (spec_.prompt_logprobs)
    for (size_t i = 0; i < choices_.size(); ++i)
      body["choices"][i]["logprobs"] =
          echo_logprobs_json(spec_.prompts[i / n()], choices_[i].prompt_logprobs,
                             results[i].logprobs, spec_.echo[i / n()].size(), text);
  res.status = 200;
  res.set_content(dump_json(body), "application/json");
  ctx_.metrics.record_finished(u, reason);
  account(0);
}

json Generation::delta_logprobs(const Delta& d, size_t text_before) {
  if (!spec_.logprobs || d.logprobs.empty()) return nullptr;
  return spec_.chat ? chat_logprobs_json(d.logprobs, ctx_.token_text)
                    : completion_logprobs_json(d.logprobs, ctx_.token_text, text_before);
}

bool Generation::stream_step(httplib::DataSink& sink) {
  SseWriter w(sink);
  const bool usage_null = spec_.common.include_usage;
  bool ok = true;
  if (!started_) {
    started_ = true;
    if (spec_.format) ok = spec_.format->open(sink);
    for (size_t i = 0; i < choices_.size() && ok && !spec_.format; ++i) {
      if (spec_.chat) {
        ok = w.event(chat_chunk(meta_, (int)i, {{"role", "assistant"}, {"content", ""}}, nullptr,
                                nullptr, usage_null));
      } else if (!choices_[i].result.text.empty() && !spec_.prompt_logprobs) {  // echo
        ok = w.event(completion_chunk(meta_, (int)i, choices_[i].result.text, nullptr, nullptr,
                                      usage_null));
      }
    }
  }
  bool done = ok && pump(milliseconds(100), [&](int idx, const Delta& d) {
    if (!ok) return;
    Choice& choice = choices_[idx];
    if (spec_.prompt_logprobs && !choice.echo_sent && d.finish != FinishReason::Error &&
        d.finish != FinishReason::Abort) {
      // The echo waits for the choice's first delta, which brings the prompt's logprobs.
      choice.echo_sent = true;
      ok = w.event(completion_chunk(
          meta_, idx, spec_.echo[idx / n()],
          prompt_logprobs_json(spec_.prompts[idx / n()], choice.prompt_logprobs, ctx_.token_text),
          nullptr, usage_null));
      if (!ok) return;
    }
    if (spec_.format) {
      ok = format_output(&sink, idx);
      return;
    }
    size_t before = choice.result.text.size() - d.text.size();
    if (parses_output()) {
      ok = stream_parsed_delta(w, idx, d);
    } else if (!d.text.empty() || (spec_.logprobs && !d.logprobs.empty())) {
      json lp = delta_logprobs(d, before);
      ok = w.event(spec_.chat ? chat_chunk(meta_, idx, {{"content", d.text}}, lp, nullptr, usage_null)
                             : completion_chunk(meta_, idx, d.text, lp, nullptr, usage_null));
    }
    if (ok && (d.finish == FinishReason::Stop || d.finish == FinishReason::Length)) {
      const char* fr =
          choice.result.tool_calls.empty() ? finish_reason_str(d.finish) : "tool_calls";
      ok = w.event(spec_.chat ? chat_chunk(meta_, idx, json::object(), nullptr, fr, usage_null)
                             : completion_chunk(meta_, idx, "", nullptr, fr, usage_null));
    }
  });
  if (!ok || probe_->closed()) {
    abort();
    ctx_.metrics.record_aborted();
    account(499);
    return false;
  }
  if (error_ || (!done && timed_out())) {
    // The status line is long gone: the error travels as an event, then the stream ends.
    ApiError e = error_ ? *error_ : ApiError(408, "The request timed out.", "timeout_error", "", "timeout");
    abort();
    ctx_.metrics.record_aborted();
    account(e.status);
    if (spec_.format) {
      spec_.format->fail(sink, e);
      sink.done();
      return true;
    }
    w.event(error_body(e));
    w.done();
    return true;
  }
  if (done && spec_.format) {
    Usage u = usage();
    Choice& c = choices_[0];
    c.result.text = std::move(c.content);
    spec_.format->close(&sink, c.result, u);
    sink.done();
    ctx_.metrics.record_finished(u);
    account(0);
  } else if (done) {
    Usage u = usage();
    if (spec_.common.include_usage)
      w.event(usage_chunk(meta_, spec_.chat ? "chat.completion.chunk" : "text_completion", u));
    w.done();
    ctx_.metrics.record_finished(u, finish_reason_str(choices_.front().result.finish));
    account(0);
  }
  return true;
}

}  // namespace pagoda::server
