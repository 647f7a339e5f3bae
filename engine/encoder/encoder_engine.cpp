// EncoderEngine: the request queue, the step loop that embeds a batch of inputs per forward
// pass, and the streams that carry the one finish delta of each request.
#include "engine/encoder/encoder_engine.h"

#include <algorithm>
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

EncoderEngine::EncoderEngine(const BertModel& model, const Tokenizer& tokenizer, Limits limits)
    : model_(model), tokenizer_(tokenizer), limits_(limits), thread_([this] { run(); }) {}

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
    if (limits_.max_queue > 0 && inflight_ >= limits_.max_queue)
      return refuse(std::to_string(inflight_) + " inputs are waiting", "queue_full");
    if (stop_) return refuse("the engine is stopping", "engine_unavailable");
    ++inflight_;
    queue_.push_back(job);
  }
  cv_.notify_all();
  return job;
}

void EncoderEngine::set_paused(bool paused) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    paused_ = paused;
  }
  cv_.notify_all();
}

void EncoderEngine::run() {
  for (;;) {
    std::vector<std::shared_ptr<Job>> jobs;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || (!paused_ && !queue_.empty()); });
      if (queue_.empty()) return;  // stopping with nothing left
      jobs = take_step();
    }
    run_step(jobs);
  }
}

size_t inputs_in_step(const std::vector<int64_t>& lengths, int max_batch_tokens, int max_seqs) {
  size_t n = 0;
  int64_t tokens = 0;
  for (int64_t len : lengths) {
    if (n > 0 && (tokens + len > max_batch_tokens || n >= size_t(std::max(1, max_seqs)))) break;
    tokens += len;
    ++n;
  }
  return n;
}

std::vector<std::shared_ptr<EncoderEngine::Job>> EncoderEngine::take_step() {
  std::vector<int64_t> lengths;
  for (size_t i = 0; i < queue_.size() && i < size_t(std::max(1, limits_.max_seqs)); ++i)
    lengths.push_back(int64_t(queue_[i]->prompt.size()));
  const size_t n = inputs_in_step(lengths, limits_.max_batch_tokens, limits_.max_seqs);
  std::vector<std::shared_ptr<Job>> jobs(std::make_move_iterator(queue_.begin()),
                                         std::make_move_iterator(queue_.begin() + std::ptrdiff_t(n)));
  queue_.erase(queue_.begin(), queue_.begin() + std::ptrdiff_t(n));
  return jobs;
}

void EncoderEngine::run_step(const std::vector<std::shared_ptr<Job>>& jobs) {
  const auto t0 = Clock::now();
  // Each job's outcome: computed in this step's pass (index into inputs), or finished now.
  std::vector<Delta> deltas(jobs.size());
  std::vector<EncoderInput> inputs;
  std::vector<size_t> computed;  // jobs[computed[i]] is inputs[i]
  for (size_t j = 0; j < jobs.size(); ++j) {
    bool aborted;
    {
      std::lock_guard<std::mutex> lk(jobs[j]->mu);
      aborted = jobs[j]->aborted;
    }
    if (aborted) {
      deltas[j].finish = FinishReason::Abort;
      continue;
    }
    if (std::string bad = model_.check_input(jobs[j]->prompt); !bad.empty()) {
      deltas[j].finish = FinishReason::Error;
      deltas[j].error = std::move(bad);
      continue;
    }
    inputs.push_back(EncoderInput{jobs[j]->prompt, jobs[j]->segment_b});
    computed.push_back(j);
  }
  if (!inputs.empty()) {
    try {
      std::vector<std::vector<float>> out = model_.embed_batch(inputs);
      for (size_t i = 0; i < computed.size(); ++i) {
        deltas[computed[i]].embedding = std::move(out[i]);
        deltas[computed[i]].finish = FinishReason::Stop;
      }
    } catch (const std::exception& e) {
      for (size_t j : computed) {
        deltas[j].finish = FinishReason::Error;
        deltas[j].error = e.what();
      }
    }
  }
  const double took = seconds_since(t0);
  uint64_t tokens = 0;
  for (const auto& job : jobs) tokens += job->prompt.size();
  {
    // The counters first, so that a client holding its result already sees them (stats,
    // /metrics) counting its step.
    std::lock_guard<std::mutex> lk(mu_);
    inflight_ -= static_cast<int>(jobs.size());
    tokens_ += tokens;
    ++steps_;
    compute_seconds_ += took;
    last_unix_s_ = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  }
  for (size_t j = 0; j < jobs.size(); ++j) {
    Job& job = *jobs[j];
    {
      std::lock_guard<std::mutex> lk(job.mu);
      job.use.prompt_tokens = static_cast<int>(job.prompt.size());
      job.use.queue_seconds = std::chrono::duration<double>(t0 - job.submitted).count();
      job.use.prefill_seconds = took;
    }
    job.finish(std::move(deltas[j]));
  }
}

EngineStats EncoderEngine::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  EngineStats s;
  s.running = inflight_ - static_cast<int>(queue_.size());
  s.waiting = static_cast<int>(queue_.size());
  s.prompt_tokens = tokens_;
  s.prefill_tokens_computed = tokens_;
  s.steps = steps_;
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
