#include "engine/loop/request_stream.h"

namespace pagoda {

ChannelStream::ChannelStream(int n_choices, int prompt_tokens, std::function<void()> on_abort)
    : unfinished_(n_choices), on_abort_(std::move(on_abort)) {
  usage_.prompt_tokens = prompt_tokens;
}

std::optional<Delta> ChannelStream::next(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return !queue_.empty() || unfinished_ == 0; });
  if (queue_.empty()) return std::nullopt;
  Delta d = std::move(queue_.front());
  queue_.pop_front();
  return d;
}

bool ChannelStream::done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return unfinished_ == 0 && queue_.empty();
}

Usage ChannelStream::usage() const {
  std::lock_guard<std::mutex> lock(mu_);
  return usage_;
}

void ChannelStream::abort() {
  if (abort_.exchange(true, std::memory_order_acq_rel)) return;
  if (on_abort_) on_abort_();
}

void ChannelStream::push(Delta d) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (unfinished_ == 0) return;  // the request is over; nothing more may appear
    usage_.completion_tokens += static_cast<int>(d.tokens.size());
    if (d.finish != FinishReason::None) --unfinished_;
    queue_.push_back(std::move(d));
  }
  cv_.notify_all();
}

void ChannelStream::set_cached_prompt_tokens(int n) {
  std::lock_guard<std::mutex> lock(mu_);
  usage_.cached_prompt_tokens = n;
}

void ChannelStream::set_speculation(int drafted, int accepted) {
  std::lock_guard<std::mutex> lock(mu_);
  usage_.spec_drafted_tokens = drafted;
  usage_.spec_accepted_tokens = accepted;
}

void ChannelStream::set_timings(double queue_s, double prefill_s, double decode_s) {
  std::lock_guard<std::mutex> lock(mu_);
  usage_.queue_seconds = queue_s;
  usage_.prefill_seconds = prefill_s;
  usage_.decode_seconds = decode_s;
}

}  // namespace pagoda
