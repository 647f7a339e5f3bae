// ChannelStream: the RequestStream the engine hands out. A condition-variable channel of Deltas:
// the engine thread pushes, an HTTP (or CLI) thread pops. Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>

#include "engine/engine_api.h"

namespace pagoda {

class ChannelStream final : public RequestStream {
 public:
  // `n_choices` finish deltas end the stream. `on_abort` is called (once, from the aborting
  // thread) to wake the engine; it must stay callable for the stream's lifetime.
  ChannelStream(int n_choices, int prompt_tokens, std::function<void()> on_abort);

  std::optional<Delta> next(std::chrono::milliseconds timeout) override;
  bool done() const override;
  Usage usage() const override;
  void abort() override;

  // ---- engine side ----
  // Queues a delta; one whose finish is not None ends its choice. Counts its tokens as
  // completion tokens.
  void push(Delta d);
  void set_cached_prompt_tokens(int n);
  // Usage's phase timings (before the last delta is pushed, so a reader sees them once done()).
  void set_timings(double queue_s, double prefill_s, double decode_s);
  // Usage's speculative-decoding counts (likewise before the last delta).
  void set_speculation(int drafted, int accepted);
  bool abort_requested() const { return abort_.load(std::memory_order_acquire); }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Delta> queue_;
  int unfinished_;
  Usage usage_;
  std::atomic<bool> abort_{false};
  std::function<void()> on_abort_;
};

}  // namespace pagoda
