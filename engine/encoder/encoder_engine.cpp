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
  int segment_b = -1;
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
  // A reranker's head reads the first token's state.
  return model_.config().pooling == encoder::Pooling::Mean ? pagoda::Pooling::Mean : pagoda::Pooling::Cls;
}

std::optional<EngineApi::PairPrompt> EncoderEngine::rank_pair_prompt(std::string_view a, std::string_view b) const {
  if (model_.config().pooling != encoder::Pooling::Rank) return std::nullopt;
  PairPrompt p;
  const int32_t eos = tokenizer_.eos_id() >= 0 ? tokenizer_.eos_id() : tokenizer_.sep_id();
  auto append = [&](std::string_view text) {
    const std::vector<int32_t> ids = tokenizer_.encode(text, /*add_special=*/false, /*parse_special=*/false);
    p.ids.insert(p.ids.end(), ids.begin(), ids.end());
  };
  if (tokenizer_.add_bos() && tokenizer_.bos_id() >= 0) p.ids.push_back(tokenizer_.bos_id());
  append(a);
  if (tokenizer_.add_eos() && eos >= 0) p.ids.push_back(eos);
  if (tokenizer_.add_sep() && tokenizer_.sep_id() >= 0) p.ids.push_back(tokenizer_.sep_id());
  p.segment_b = static_cast<int>(p.ids.size());
  append(b);
  if (tokenizer_.add_eos() && eos >= 0) p.ids.push_back(eos);
  return p;
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
  const bool reranker = model_.config().pooling == encoder::Pooling::Rank;
  if (reranker && req.segment_b < 0)
    return refuse("this model is a reranker (" + model_.config().name +
                      "): it scores text pairs on /v1/rerank and /v1/score, and makes no embeddings",
                  "model_is_reranker");
  if (req.prompt.empty()) return refuse("the input has no tokens", "empty_input");
  if (static_cast<int>(req.prompt.size()) > context_size())
    return refuse("the input has " + std::to_string(req.prompt.size()) + " tokens, over the model's context of " +
                      std::to_string(context_size()),
                  "context_length_exceeded");
  auto job = std::make_shared<Job>();
  job->prompt = std::move(req.prompt);
  job->segment_b = reranker ? req.segment_b : -1;
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
        d.embedding = model_.embed(job->prompt, job->segment_b);
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
