// Test doubles for the server: a byte-level Tokenizer and an EngineApi that "generates"
// deterministic printable bytes on its own step thread, with KV-block accounting visible in
// stats(), an admission bound like the real engine's, and the vocabulary of a Tokenizer (the
// byte-level one unless a test brings its own), so the HTTP layer can be tested without a model.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <list>
#include <mutex>
#include <thread>

#include "engine/engine_api.h"
#include "engine/tokenizer/tokenizer.h"

namespace pagoda::testing {

// Token ids 0..255 are bytes; 256 is "<s>" (BOS), 257 is "</s>" (EOS).
class ByteTokenizer : public Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text, bool add_special,
                              bool parse_special) const override {
    std::vector<int32_t> ids;
    if (add_special) ids.push_back(256);
    for (size_t i = 0; i < text.size(); ++i) {
      if (parse_special && text.substr(i, 3) == "<s>") {
        ids.push_back(256);
        i += 2;
      } else if (parse_special && text.substr(i, 4) == "</s>") {
        ids.push_back(257);
        i += 3;
      } else {
        ids.push_back((unsigned char)text[i]);
      }
    }
    return ids;
  }
  std::string token_to_piece(int32_t id, bool special) const override {
    if (id < 256) return std::string(1, (char)id);
    return special ? token_text(id) : "";
  }
  std::string decode(const std::vector<int32_t>& ids, bool special) const override {
    std::string s;
    for (int32_t id : ids) s += token_to_piece(id, special);
    return s;
  }
  int32_t vocab_size() const override { return 258; }
  const std::string& token_text(int32_t id) const override {
    static const std::string bos = "<s>", eos = "</s>", none;
    return id == 256 ? bos : id == 257 ? eos : none;
  }
  int32_t bos_id() const override { return 256; }
  int32_t eos_id() const override { return 257; }
  int32_t eot_id() const override { return -1; }
  bool add_bos() const override { return true; }
  bool add_eos() const override { return false; }
  bool is_control(int32_t id) const override { return id >= 256; }
  bool is_eog(int32_t id) const override { return id == 257; }
};

// Generates printable ASCII: greedy (temperature 0) output depends only on the prompt; sampled
// output on the seed and the choice index. One token per choice per step.
class FakeEngine : public EngineApi {
 public:
  struct Options {
    int context = 256;
    int max_running = 8;
    int block_size = 16;
    int blocks_total = 1024;
    std::chrono::microseconds step_time{500};
    // Running + waiting sequences beyond which submit refuses ("queue_full"), as the engine
    // does; 0: no bound.
    int max_seqs = 0;
    // The max_tokens rule (MaxTokensRule): the largest max_tokens a request may ask for (0: the
    // context) and whether generation may run past the context.
    int max_tokens_limit = 0;
    bool context_shift = true;
  };

  // One scripted token: its id and the text it detokenizes to (may be empty: a control token).
  struct ScriptToken {
    int32_t id;
    std::string text;
  };
  // One token per byte of `text`.
  static std::vector<ScriptToken> script_bytes(const std::string& text) {
    std::vector<ScriptToken> out;
    for (unsigned char c : text) out.push_back({(int32_t)c, std::string(1, (char)c)});
    return out;
  }

  // `vocab`, when given, must outlive the engine; otherwise the engine's vocabulary is bytes.
  explicit FakeEngine(Options o, const Tokenizer* vocab = nullptr)
      : opts_(o), vocab_(vocab ? *vocab : bytes_), thread_([this] { loop(); }) {}
  FakeEngine() : FakeEngine(Options{}) {}
  ~FakeEngine() override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  std::shared_ptr<RequestStream> submit(GenerationRequest req, SubmitError* err) override {
    if ((int)req.prompt.size() >= opts_.context) {
      if (err) *err = {"prompt too long", "context_length_exceeded"};
      return nullptr;
    }
    auto s = std::make_shared<Stream>();
    s->req = std::move(req);
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (opts_.max_seqs > 0 && sequences_in_flight() + s->req.n > opts_.max_seqs) {
        if (err) *err = {"the queue is full", "queue_full"};
        return nullptr;
      }
      s->script = script_;
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      last_prompt_ = s->req.prompt;
    }
    s->outputs.resize(s->req.n);
    s->finished.assign(s->req.n, false);
    s->totals.prompt_tokens = (int)s->req.prompt.size();
    std::lock_guard<std::mutex> lk(mu_);
    waiting_.push_back(s);
    cv_.notify_all();
    return s;
  }

  // Accepts every constraint without compiling it (the script decides the output; the real
  // compiler is tested with the engine) and records it for the tests to check.
  std::shared_ptr<const structured::CompiledGrammar> compile_constraint(
      const OutputConstraint& c) const override {
    std::lock_guard<std::mutex> lk(mu_);
    constraints_.push_back(c);
    return nullptr;
  }
  // The prompt of the last request submitted.
  std::vector<int32_t> last_prompt() const {
    std::lock_guard<std::mutex> lk(mu_);
    return last_prompt_;
  }
  std::vector<OutputConstraint> constraints() const {
    std::lock_guard<std::mutex> lk(mu_);
    return constraints_;
  }

  EngineStats stats() const override {
    std::lock_guard<std::mutex> lk(mu_);
    EngineStats st;
    st.running = (int)running_.size();
    st.waiting = (int)waiting_.size();
    st.kv_blocks_total = opts_.blocks_total;
    st.kv_block_size = opts_.block_size;
    for (auto& s : running_) st.kv_blocks_used += s->blocks(opts_.block_size);
    st.steps = steps_;
    st.last_step_unix_s = last_step_;
    st.generation_tokens = generated_;
    st.alive = !dead_;
    return st;
  }
  int context_size() const override { return opts_.context; }
  int admission_limit() const override { return opts_.max_seqs; }
  int inflight_seqs() const override {
    std::lock_guard<std::mutex> lk(mu_);
    return sequences_in_flight();
  }
  MaxTokensRule max_tokens_rule() const override {
    return MaxTokensRule{opts_.context, opts_.max_tokens_limit, opts_.context_shift};
  }
  std::vector<int32_t> tokenize(std::string_view text, bool add_special,
                                bool parse_special) const override {
    return vocab_.encode(text, add_special, parse_special);
  }
  std::vector<int32_t> tokenize_marked(std::string_view text, bool add_special,
                                       const std::vector<std::pair<size_t, size_t>>& plain) const override {
    return vocab_.encode_marked(text, add_special, plain);
  }
  std::string detokenize(const std::vector<int32_t>& ids) const override {
    return vocab_.decode(ids);
  }
  std::string token_piece(int32_t id, bool special) const override {
    return vocab_.token_to_piece(id, special);
  }
  int32_t vocab_size() const override { return vocab_.vocab_size(); }
  int32_t prompt_bos_id() const override { return vocab_.add_bos() ? vocab_.bos_id() : -1; }

  // Requests submitted from now on emit these tokens (every choice the same), one per step,
  // then finish with "stop" (or "length" at max_tokens). Empty: generated letters again.
  void set_script(std::vector<ScriptToken> script) {
    std::lock_guard<std::mutex> lk(mu_);
    script_ = std::move(script);
  }

  // Makes the step thread stop stepping (a dead engine for /health tests).
  void kill() {
    std::lock_guard<std::mutex> lk(mu_);
    dead_ = true;
  }
  // Pauses stepping while keeping alive = true (a stalled engine).
  void pause(bool p) {
    std::lock_guard<std::mutex> lk(mu_);
    paused_ = p;
  }

  static int32_t greedy_token(const std::vector<int32_t>& prompt, size_t pos) {
    uint64_t h = 1469598103934665603ULL;
    for (int32_t t : prompt) h = (h ^ (uint64_t)t) * 1099511628211ULL;
    h = (h ^ pos) * 1099511628211ULL;
    return 'a' + (int32_t)((h >> 17) % 26);
  }

 private:
  struct Stream : RequestStream {
    std::mutex mu;
    std::condition_variable cv;
    GenerationRequest req;
    std::deque<Delta> queue;
    std::vector<std::vector<int32_t>> outputs;
    std::vector<bool> finished;
    std::vector<ScriptToken> script;
    Usage totals;
    std::atomic<bool> aborted{false};
    bool all_done = false;

    std::optional<Delta> next(std::chrono::milliseconds timeout) override {
      std::unique_lock<std::mutex> lk(mu);
      cv.wait_for(lk, timeout, [&] { return !queue.empty() || all_done; });
      if (queue.empty()) return std::nullopt;
      Delta d = std::move(queue.front());
      queue.pop_front();
      return d;
    }
    bool done() const override {
      auto* self = const_cast<Stream*>(this);
      std::lock_guard<std::mutex> lk(self->mu);
      return all_done && queue.empty();
    }
    Usage usage() const override {
      auto* self = const_cast<Stream*>(this);
      std::lock_guard<std::mutex> lk(self->mu);
      return self->totals;
    }
    void abort() override { aborted = true; }
    int blocks(int bs) const {
      size_t len = req.prompt.size();
      for (auto& o : outputs) len += o.size();
      return (int)((len + bs - 1) / bs);
    }
  };

  // Under mu_.
  int sequences_in_flight() const {
    int n = 0;
    for (auto& s : waiting_) n += s->req.n;
    for (auto& s : running_) n += s->req.n;
    return n;
  }

  int32_t next_token(const Stream& s, int choice) const {
    size_t pos = s.outputs[choice].size();
    if (s.req.sampling.temperature == 0) return greedy_token(s.req.prompt, pos);
    uint64_t seed = s.req.sampling.seed.value_or(0x9e3779b97f4a7c15ULL ^ (uint64_t)(uintptr_t)&s);
    uint64_t h = (seed + 0x9e3779b97f4a7c15ULL * (pos + 1) + 1315423911ULL * choice);
    h ^= h >> 31;
    h *= 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 29;
    return 'a' + (int32_t)(h % 26);
  }

  void step_one(Stream& s) {
    std::lock_guard<std::mutex> lk(s.mu);
    for (int c = 0; c < s.req.n; ++c) {
      if (s.finished[c]) continue;
      Delta d;
      d.index = c;
      if (s.aborted) {
        d.finish = FinishReason::Abort;
      } else {
        const size_t pos = s.outputs[c].size();
        int32_t t = s.script.empty() ? next_token(s, c) : s.script[pos].id;
        s.outputs[c].push_back(t);
        d.tokens = {t};
        d.text = s.script.empty() ? std::string(1, (char)t) : s.script[pos].text;
        if (!s.script.empty() && pos + 1 == s.script.size()) d.finish = FinishReason::Stop;
        // Stop strings, matched within one token's text only: the text before it, then "stop".
        for (const std::string& stop : s.req.stop.stop)
          if (size_t at = d.text.find(stop); at != std::string::npos && d.finish == FinishReason::None) {
            d.text.resize(at);
            d.finish = FinishReason::Stop;
            d.stop_string = stop;
          }
        if (s.req.sampling.logprobs >= 0) {
          TokenLogprob lp{t, -0.25f, {}};
          for (int k = 0; k < s.req.sampling.logprobs; ++k)
            lp.top.push_back({k == 0 ? t : (int32_t)('A' + k), -0.25f - k});
          d.logprobs.push_back(lp);
        }
        ++s.totals.completion_tokens;
        ++generated_;
        int room = opts_.context - (int)s.req.prompt.size();
        if (d.finish == FinishReason::None &&
            (int)s.outputs[c].size() >= std::min(s.req.stop.max_tokens, room))
          d.finish = FinishReason::Length;
      }
      if (d.finish != FinishReason::None) s.finished[c] = true;
      s.queue.push_back(std::move(d));
    }
    bool all = true;
    for (bool f : s.finished) all = all && f;
    s.all_done = all;
    s.cv.notify_all();
  }

  void loop() {
    std::unique_lock<std::mutex> lk(mu_);
    while (!stop_) {
      if (dead_ || paused_ || (running_.empty() && waiting_.empty()))
        cv_.wait_for(lk, std::chrono::milliseconds(5));
      if (stop_) break;
      if (dead_ || paused_) continue;
      while ((int)running_.size() < opts_.max_running && !waiting_.empty()) {
        running_.push_back(waiting_.front());
        waiting_.pop_front();
      }
      // Aborted waiting requests leave the queue at once.
      for (auto it = waiting_.begin(); it != waiting_.end();) {
        if ((*it)->aborted) {
          running_.push_back(*it);
          it = waiting_.erase(it);
        } else {
          ++it;
        }
      }
      if (running_.empty()) continue;
      lk.unlock();
      std::this_thread::sleep_for(opts_.step_time);
      lk.lock();
      for (auto& s : running_) step_one(*s);
      running_.remove_if([](const std::shared_ptr<Stream>& s) {
        std::lock_guard<std::mutex> l(s->mu);
        return s->all_done;
      });
      ++steps_;
      last_step_ = std::chrono::duration<double>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
    }
  }

  Options opts_;
  ByteTokenizer bytes_;
  const Tokenizer& vocab_;
  mutable std::mutex mu_;
  mutable std::vector<OutputConstraint> constraints_;  // every compile_constraint call, in order
  std::condition_variable cv_;
  std::vector<ScriptToken> script_;
  std::deque<std::shared_ptr<Stream>> waiting_;
  std::list<std::shared_ptr<Stream>> running_;
  uint64_t steps_ = 0, generated_ = 0;
  double last_step_ = 0;
  std::vector<int32_t> last_prompt_;
  bool stop_ = false, dead_ = false, paused_ = false;
  std::thread thread_;  // last: starts after every member above exists
};

}  // namespace pagoda::testing
