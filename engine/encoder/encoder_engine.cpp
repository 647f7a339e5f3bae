// EncoderEngine: the request queue, the worker that embeds, and the streams that carry the one
// finish delta of each request.
#include "engine/encoder/encoder_engine.h"

#include <chrono>

namespace pagoda::encoder {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

// One request: its prompt, and the stream state the worker fills.
struct EncoderEngine::Job final : RequestStream {
  std::vector<int32_t> prompt;
  Clock::time_point submitted = Clock::now();
  mutable std::mutex mu;
  std::condition_variable cv;
  std::optional<Delta> result;  // set once, taken by next()
  bool finished = false, taken = false, aborted = false;
  Usage use;

  std::optional<Delta> next(std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lk(mu);
    cv.wait_for(lk, timeout, [&] { return finished; });
    if (!finished || taken) return std::nullopt;
    taken = true;
    return std::move(result);
  }
  bool done() const override {
    std::lock_guard<std::mutex> lk(mu);
    return finished && taken;
  }
  Usage usage() const override {
    std::lock_guard<std::mutex> lk(mu);
    return use;
  }
  void abort() override {
    std::lock_guard<std::mutex> lk(mu);
    aborted = true;
  }
  void finish(Delta d) {
    {
      std::lock_guard<std::mutex> lk(mu);
      result = std::move(d);
      finished = true;
    }
    cv.notify_all();
  }
};

EncoderEngine::EncoderEngine(const BertModel& model, const Tokenizer& tokenizer, int max_queue)
    : model_(model), tokenizer_(tokenizer), max_queue_(max_queue), thread_([this] { run(); }) {}

EncoderEngine::~EncoderEngine() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::optional<pagoda::Pooling> EncoderEngine::model_pooling() const {
  return model_.config().pooling == encoder::Pooling::Cls ? pagoda::Pooling::Cls : pagoda::Pooling::Mean;
}

std::shared_ptr<RequestStream> EncoderEngine::submit(GenerationRequest req, SubmitError* err) {
  auto refuse = [&](std::string message, std::string code) -> std::shared_ptr<RequestStream> {
    if (err) *err = SubmitError{std::move(message), std::move(code)};
    return nullptr;
  };
  if (!req.embed)
    return refuse("this model is an encoder (" + model_.config().name +
                      "): it serves /v1/embeddings, /v1/rerank and /v1/score, not text generation",
                  "model_not_generative");
  if (req.prompt.empty()) return refuse("the input has no tokens", "empty_input");
  if (static_cast<int>(req.prompt.size()) > context_size())
    return refuse("the input has " + std::to_string(req.prompt.size()) + " tokens, over the model's context of " +
                      std::to_string(context_size()),
                  "context_length_exceeded");
  auto job = std::make_shared<Job>();
  job->prompt = std::move(req.prompt);
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (max_queue_ > 0 && inflight_ >= max_queue_)
      return refuse(std::to_string(inflight_) + " inputs are waiting", "queue_full");
    if (stop_) return refuse("the engine is stopping", "engine_unavailable");
    ++inflight_;
    queue_.push_back(job);
  }
  cv_.notify_all();
  return job;
}

void EncoderEngine::run() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping with nothing left
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    const double queued = seconds_since(job->submitted);
    const auto t0 = Clock::now();
    Delta d;
    bool aborted;
    {
      std::lock_guard<std::mutex> lk(job->mu);
      aborted = job->aborted;
    }
    if (aborted) {
      d.finish = FinishReason::Abort;
    } else {
      try {
        d.embedding = model_.embed(job->prompt);
        d.finish = FinishReason::Stop;
      } catch (const std::exception& e) {
        d.finish = FinishReason::Error;
        d.error = e.what();
      }
    }
    const double took = seconds_since(t0);
    {
      std::lock_guard<std::mutex> lk(job->mu);
      job->use.prompt_tokens = static_cast<int>(job->prompt.size());
      job->use.queue_seconds = queued;
      job->use.prefill_seconds = took;
    }
    job->finish(std::move(d));
    std::lock_guard<std::mutex> lk(mu_);
    --inflight_;
    ++done_requests_;
    tokens_ += job->prompt.size();
    compute_seconds_ += took;
    last_unix_s_ = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  }
}

EngineStats EncoderEngine::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  EngineStats s;
  s.running = inflight_ - static_cast<int>(queue_.size());
  s.waiting = static_cast<int>(queue_.size());
  s.prompt_tokens = tokens_;
  s.prefill_tokens_computed = tokens_;
  s.steps = done_requests_;
  s.last_step_unix_s = last_unix_s_;
  s.alive = !stop_;
  s.step_seconds = s.forward_seconds = compute_seconds_;
  return s;
}

int EncoderEngine::inflight_seqs() const {
  std::lock_guard<std::mutex> lk(mu_);
  return inflight_;
}

}  // namespace pagoda::encoder
