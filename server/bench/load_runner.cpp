#include "server/bench/load_runner.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <random>
#include <thread>

namespace pagoda::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Shared state of one run: hands out request indices and collects results.
class RunState {
 public:
  RunState(const BenchOptions& opt) : opt_(opt), t0_(Clock::now()) {
    max_requests_ = opt.requests > 0 ? opt.requests : (opt.duration_s > 0 ? -1 : 100);
  }

  // The next request index, or -1 when the run should issue no more.
  long next_index() {
    if (opt_.duration_s > 0 && elapsed() >= opt_.duration_s) return -1;
    long i = issued_.fetch_add(1);
    if (max_requests_ >= 0 && i >= max_requests_) return -1;
    return i;
  }

  void record(RequestResult r) {
    std::lock_guard<std::mutex> lk(mu_);
    if (r.error == ErrorKind::None) {
      ++ok_;
      tokens_ += r.completion_tokens;
    } else {
      ++failed_;
    }
    results_.push_back(std::move(r));
    cv_.notify_all();
  }

  double elapsed() const { return std::chrono::duration<double>(Clock::now() - t0_).count(); }
  Clock::time_point t0() const { return t0_; }

  void print_progress(int in_flight) {
    std::lock_guard<std::mutex> lk(mu_);
    const double t = elapsed();
    const std::string total = max_requests_ >= 0 ? std::to_string(max_requests_) : "?";
    std::fprintf(stderr, "\r[%6.1fs] done %ld/%s  failed %ld  in flight %d  output %.1f tok/s   ",
                 t, ok_ + failed_, total.c_str(), failed_, in_flight, t > 0 ? tokens_ / t : 0.0);
    std::fflush(stderr);
  }

  std::vector<RequestResult> take_results() {
    std::lock_guard<std::mutex> lk(mu_);
    return std::move(results_);
  }

 private:
  const BenchOptions& opt_;
  Clock::time_point t0_;
  long max_requests_;
  std::atomic<long> issued_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<RequestResult> results_;
  long ok_ = 0, failed_ = 0, tokens_ = 0;
};

const char* endpoint_path(Endpoint e) {
  return e == Endpoint::Chat ? "/v1/chat/completions" : "/v1/completions";
}

RequestResult send_one(const BenchOptions& opt, const Workload& wl, const std::string& model,
                       long index, RunState& state) {
  ClientTarget target{opt.url, opt.api_key, opt.request_timeout_s};
  const double start = state.elapsed();
  auto body = make_request_body(opt, model, wl.at(static_cast<size_t>(index)));
  RequestResult r = run_streaming_request(target, endpoint_path(opt.endpoint), body,
                                          opt.endpoint == Endpoint::Chat);
  r.start_s = start;
  return r;
}

}  // namespace

RunResult run_load(const BenchOptions& opt, const Workload& wl, const std::string& model) {
  RunState state(opt);
  std::atomic<int> in_flight{0};
  std::atomic<bool> finished{false};

  std::thread progress([&] {
    while (!finished.load()) {
      for (int i = 0; i < 10 && !finished.load(); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (opt.progress) state.print_progress(in_flight.load());
    }
  });

  auto do_request = [&](long idx) {
    in_flight.fetch_add(1);
    state.record(send_one(opt, wl, model, idx, state));
    in_flight.fetch_sub(1);
  };

  RunResult out;
  if (opt.rate > 0) {
    // Open loop: arrivals do not wait for replies, up to max_concurrency in flight.
    out.rate = opt.rate;
    std::mt19937_64 rng(opt.seed ^ 0x9e3779b97f4a7c15ull);
    std::exponential_distribution<double> gap(opt.rate);
    std::vector<std::thread> workers;
    double next_at = 0;
    for (long idx; (idx = state.next_index()) >= 0;) {
      std::this_thread::sleep_until(state.t0() + std::chrono::duration_cast<Clock::duration>(
                                                     std::chrono::duration<double>(next_at)));
      while (in_flight.load() >= opt.max_concurrency)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      in_flight.fetch_add(1);  // counted before the thread starts so the cap holds
      workers.emplace_back([&, idx] {
        state.record(send_one(opt, wl, model, idx, state));
        in_flight.fetch_sub(1);
      });
      next_at += gap(rng);
    }
    for (auto& w : workers) w.join();
  } else {
    // Closed loop: each user sends, waits for the whole reply, thinks, repeats.
    out.users = opt.users;
    std::vector<std::thread> users;
    for (int u = 0; u < opt.users; ++u) {
      users.emplace_back([&, u] {
        std::mt19937_64 rng(opt.seed + 1000003ull * static_cast<uint64_t>(u + 1));
        std::exponential_distribution<double> think(opt.think_time_s > 0 ? 1.0 / opt.think_time_s : 1.0);
        for (long idx; (idx = state.next_index()) >= 0;) {
          do_request(idx);
          if (opt.think_time_s > 0)
            std::this_thread::sleep_for(std::chrono::duration<double>(think(rng)));
        }
      });
    }
    for (auto& t : users) t.join();
  }
  out.wall_s = state.elapsed();
  finished.store(true);
  progress.join();
  if (opt.progress) {
    state.print_progress(0);
    std::fprintf(stderr, "\n");
  }
  out.requests = state.take_results();
  return out;
}

}  // namespace pagoda::bench
