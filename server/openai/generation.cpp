#include "server/openai/generation.h"

#include <algorithm>

#include "server/http/access_log.h"
#include "server/openai/echo_logprobs.h"
#include "server/http/http_server.h"
#include "server/http/metrics.h"

namespace pagoda::server {

using std::chrono::milliseconds;

namespace {

double seconds_since(Generation::Clock::time_point t) {
  return std::chrono::duration<double>(Generation::Clock::now() - t).count();
}

}  // namespace

Generation::Generation(GenSpec s, Metrics& metrics, TokenText token_text, double timeout_s)
    : spec(std::move(s)), metrics_(metrics), token_text_(std::move(token_text)), timeout_s_(timeout_s) {
  // Latencies count from the request's arrival (set by the HTTP layer), parsing included.
  Clock::time_point arrival = current_access_record().start;
  if (arrival != Clock::time_point{}) start_ = arrival;
}

Generation::~Generation() {
  if (unfinished_ > 0) abort();
  if (on_release) on_release();
}

void Generation::init_choices() {
  choices_.resize(spec.prompts.size() * n());
  tokens_seen_.assign(choices_.size(), 0);
  last_token_.assign(choices_.size(), Clock::now());
  for (size_t i = 0; i < choices_.size(); ++i) {
    choices_[i].index = (int)i;
    choices_[i].text = spec.echo[i / n()];
  }
  prompt_lps_.assign(choices_.size(), {});
  echo_sent_.assign(choices_.size(), 0);
  if (spec.chat && spec.tool_format != ToolCallFormat::None) {
    tool_parsers_.assign(choices_.size(), ToolCallParser(spec.tool_format, spec.tool_names));
    tool_content_.assign(choices_.size(), "");
    tool_out_.assign(choices_.size(), ToolCallEvents{});
  }
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

bool Generation::timed_out() const { return timeout_s_ > 0 && seconds_since(start_) > timeout_s_; }

Usage Generation::usage() {
  Usage u;
  for (size_t p = 0; p < streams_.size(); ++p) {
    // Usage is final once the stream reports done(); the last finish may precede it a little.
    for (int i = 0; i < 100 && !streams_[p]->done(); ++i) streams_[p]->next(milliseconds(2));
    Usage su = streams_[p]->usage();
    u.prompt_tokens += (int)spec.prompts[p].size();
    u.cached_prompt_tokens += su.cached_prompt_tokens;
    int seen = 0;
    for (int c = 0; c < n(); ++c) seen += tokens_seen_[p * n() + c];
    if (!spec.echo_only) u.completion_tokens += streams_[p]->done() ? su.completion_tokens : seen;
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
      for (int c = 0; c < n(); ++c) open |= choices_[p * n() + c].finish == FinishReason::None;
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
  ChoiceResult& c = choices_[idx];
  if (c.finish != FinishReason::None) return;
  // max_tokens 0 (echo only): the token the engine had to generate is not part of the answer.
  Delta prompt_only;
  if (spec.echo_only) {
    prompt_only.index = raw.index;
    prompt_only.prompt_logprobs = raw.prompt_logprobs;
    prompt_only.finish = raw.finish == FinishReason::Stop ? FinishReason::Length : raw.finish;
    prompt_only.error = raw.error;
  }
  const Delta& d = spec.echo_only ? prompt_only : raw;
  if (spec.prompt_logprobs && !d.prompt_logprobs.empty()) prompt_lps_[idx] = d.prompt_logprobs;
  if (!d.tokens.empty()) {
    Clock::time_point now = Clock::now();
    if (ttft_ms_ < 0) {
      ttft_ms_ = std::chrono::duration<double, std::milli>(now - start_).count();
      metrics_.record_ttft(ttft_ms_ / 1000);
    }
    if (tokens_seen_[idx] > 0) {
      double per = std::chrono::duration<double>(now - last_token_[idx]).count() / d.tokens.size();
      for (size_t i = 0; i < d.tokens.size(); ++i) metrics_.record_inter_token(per);
    }
    last_token_[idx] = now;
    tokens_seen_[idx] += (int)d.tokens.size();
  }
  if (d.finish == FinishReason::Error) {
    error_ = std::make_unique<ApiError>(500, "Generation failed: " + d.error, "server_error");
  } else if (d.finish == FinishReason::Abort && !aborted_) {
    error_ = std::make_unique<ApiError>(503, "The request was aborted by the server.",
                                        "service_unavailable_error", "", "aborted");
  }
  c.text += d.text;
  c.tokens.insert(c.tokens.end(), d.tokens.begin(), d.tokens.end());
  if (spec.logprobs) c.logprobs.insert(c.logprobs.end(), d.logprobs.begin(), d.logprobs.end());
  if (!tool_parsers_.empty()) parse_tools(idx, d);
  on(idx, d);
  if (d.finish != FinishReason::None) {
    c.finish = d.finish;
    --unfinished_;
  }
}

void Generation::parse_tools(int idx, const Delta& d) {
  // A marker that is a control token detokenizes to nothing; the parser gets its text.
  std::string text;
  for (int32_t t : d.tokens)
    if (auto m = spec.tool_markers.find(t); m != spec.tool_markers.end()) text += m->second;
  text += d.text;
  ToolCallParser& p = tool_parsers_[idx];
  ToolCallEvents ev = p.feed(text);
  if (d.finish == FinishReason::Stop || d.finish == FinishReason::Length) {
    ToolCallEvents rest = p.finish();
    ev.content += rest.content;
    for (auto& c : rest.calls) ev.calls.push_back(std::move(c));
  }
  // A control-token marker that opened no call goes back to being invisible, as it is without
  // tool parsing (ordinary text hardly ever spells it: that text encodes as the token itself).
  for (const auto& [token, marker] : spec.tool_markers) {
    for (size_t at = ev.content.find(marker); at != std::string::npos; at = ev.content.find(marker, at))
      ev.content.erase(at, marker.size());
  }
  tool_content_[idx] += ev.content;
  ToolCallEvents& out = tool_out_[idx];
  out.content += ev.content;
  for (ParsedToolCall& pc : ev.calls) {
    choices_[idx].tool_calls.push_back(
        {new_tool_call_id ? new_tool_call_id() : "call_0", pc.name, pc.arguments});
    out.calls.push_back(std::move(pc));
  }
}

bool Generation::stream_tool_delta(SseWriter& w, int idx, const Delta& d) {
  const bool usage_null = spec.common.include_usage;
  ToolCallEvents ev = std::move(tool_out_[idx]);
  tool_out_[idx] = ToolCallEvents{};
  bool ok = true;
  // Logprobs travel with the content chunk even while the text itself is held back.
  json lp = delta_logprobs(d, 0);
  if (!ev.content.empty() || !lp.is_null())
    ok = w.event(chat_chunk(meta, idx, {{"content", ev.content}}, lp, nullptr, usage_null));
  const std::vector<ToolCallOut>& all = choices_[idx].tool_calls;
  for (size_t k = all.size() - ev.calls.size(); k < all.size() && ok; ++k) {
    ok = w.event(chat_chunk(meta, idx, tool_call_head_delta((int)k, all[k]), nullptr, nullptr,
                            usage_null)) &&
         w.event(chat_chunk(meta, idx, tool_call_arguments_delta((int)k, all[k].arguments),
                            nullptr, nullptr, usage_null));
  }
  return ok;
}

void Generation::account(int status_override) {
  AccessRecord& rec = current_access_record();
  rec.request_id = meta.id;
  rec.status_override = status_override;
  rec.ttft_ms = ttft_ms_;
  rec.prompt_tokens = 0;
  for (auto& p : spec.prompts) rec.prompt_tokens += (int)p.size();
  rec.completion_tokens = 0;
  for (int t : tokens_seen_) rec.completion_tokens += t;
  metrics_.record_e2e(seconds_since(start_));
}

void Generation::answer(httplib::Response& res) {
  auto fail = [&](const ApiError& e, int log_status) {
    abort();
    metrics_.record_aborted();
    account(log_status);
    res.status = e.status;
    res.set_content(dump_json(error_body(e)), "application/json");
  };
  while (!pump(milliseconds(50), [](int, const Delta&) {})) {
    if (probe && probe->closed()) {
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
  for (size_t i = 0; i < tool_content_.size(); ++i) choices_[i].text = tool_content_[i];
  Usage u = usage();
  json body = spec.chat ? chat_response(meta, choices_, u, spec.logprobs, token_text_)
                        : completion_response(meta, choices_, u, spec.logprobs, token_text_);
  if (spec.prompt_logprobs)
    for (size_t i = 0; i < choices_.size(); ++i)
      body["choices"][i]["logprobs"] =
          echo_logprobs_json(spec.prompts[i / n()], prompt_lps_[i], choices_[i].logprobs,
                             spec.echo[i / n()].size(), token_text_);
  res.status = 200;
  res.set_content(dump_json(body), "application/json");
  metrics_.record_finished(u);
  account(0);
}

json Generation::delta_logprobs(const Delta& d, size_t text_before) {
  if (!spec.logprobs || d.logprobs.empty()) return nullptr;
  return spec.chat ? chat_logprobs_json(d.logprobs, token_text_)
                   : completion_logprobs_json(d.logprobs, token_text_, text_before);
}

bool Generation::stream_step(httplib::DataSink& sink) {
  SseWriter w(sink);
  const bool usage_null = spec.common.include_usage;
  bool ok = true;
  if (!started_) {
    started_ = true;
    for (size_t i = 0; i < choices_.size() && ok; ++i) {
      if (spec.chat) {
        ok = w.event(chat_chunk(meta, (int)i, {{"role", "assistant"}, {"content", ""}}, nullptr,
                                nullptr, usage_null));
      } else if (!choices_[i].text.empty() && !spec.prompt_logprobs) {  // echo
        ok = w.event(completion_chunk(meta, (int)i, choices_[i].text, nullptr, nullptr, usage_null));
      }
    }
  }
  bool done = ok && pump(milliseconds(100), [&](int idx, const Delta& d) {
    if (!ok) return;
    if (spec.prompt_logprobs && !echo_sent_[idx] && d.finish != FinishReason::Error &&
        d.finish != FinishReason::Abort) {
      // The echo waits for the choice's first delta, which brings the prompt's logprobs.
      echo_sent_[idx] = 1;
      ok = w.event(completion_chunk(meta, idx, spec.echo[idx / n()],
                                    prompt_logprobs_json(spec.prompts[idx / n()], prompt_lps_[idx], token_text_),
                                    nullptr, usage_null));
      if (!ok) return;
    }
    size_t before = choices_[idx].text.size() - d.text.size();
    if (!tool_parsers_.empty()) {
      ok = stream_tool_delta(w, idx, d);
    } else if (!d.text.empty() || (spec.logprobs && !d.logprobs.empty())) {
      json lp = delta_logprobs(d, before);
      ok = w.event(spec.chat ? chat_chunk(meta, idx, {{"content", d.text}}, lp, nullptr, usage_null)
                             : completion_chunk(meta, idx, d.text, lp, nullptr, usage_null));
    }
    if (ok && (d.finish == FinishReason::Stop || d.finish == FinishReason::Length)) {
      const char* fr =
          choices_[idx].tool_calls.empty() ? finish_reason_str(d.finish) : "tool_calls";
      ok = w.event(spec.chat ? chat_chunk(meta, idx, json::object(), nullptr, fr, usage_null)
                             : completion_chunk(meta, idx, "", nullptr, fr, usage_null));
    }
  });
  if (!ok || (probe && probe->closed())) {
    abort();
    metrics_.record_aborted();
    account(499);
    return false;
  }
  if (error_ || (!done && timed_out())) {
    // The status line is long gone: the error travels as an event, then the stream ends.
    ApiError e = error_ ? *error_ : ApiError(408, "The request timed out.", "timeout_error", "", "timeout");
    abort();
    metrics_.record_aborted();
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
    metrics_.record_finished(u);
    account(0);
  }
  return true;
}

}  // namespace pagoda::server
