#include "engine/sampling/grammar_masks.h"

#include <algorithm>
#include <limits>

#include "engine/structured/structured.h"

namespace pagoda {

StepMasks::StepMasks(int workers) {
  if (workers < 1) workers = 1;
  for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { work(); });
}

StepMasks::~StepMasks() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
  }
  cv_work_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void StepMasks::start(std::vector<const structured::GrammarMatcher*> matchers, size_t words) {
  std::lock_guard<std::mutex> lk(mu_);
  matchers_ = std::move(matchers);
  words_ = words;
  bits_.assign(matchers_.size() * words_, 0);
  next_ = 0;
  pending_rows_ = 0;
  for (const auto* m : matchers_) pending_rows_ += m != nullptr;
  remaining_ = matchers_.size();
  ++generation_;
  if (pending_rows_ > 0) {
    cv_work_.notify_all();
  } else {
    next_ = matchers_.size();  // nothing to compute: workers stay asleep
    remaining_ = 0;
  }
}

void StepMasks::wait() {
  std::unique_lock<std::mutex> lk(mu_);
  cv_done_.wait(lk, [this] { return remaining_ == 0; });
}

const uint32_t* StepMasks::mask(size_t i) const {
  if (i >= matchers_.size() || matchers_[i] == nullptr) return nullptr;
  return bits_.data() + i * words_;
}

void StepMasks::work() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    cv_work_.wait(lk, [this] { return stopping_ || next_ < matchers_.size(); });
    if (stopping_) return;
    const size_t row = next_++;
    const structured::GrammarMatcher* m = matchers_[row];
    uint32_t* out = bits_.data() + row * words_;
    // The mask is written outside the lock: rows are disjoint and bits_ is not resized until
    // every row is done (start() is only called after wait()).
    lk.unlock();
    if (m != nullptr) m->fill_mask(out);
    lk.lock();
    if (--remaining_ == 0) cv_done_.notify_all();
  }
}

int allowed_tokens(const uint32_t* bits, int vocab) {
  int n = 0;
  for (int w = 0; w * 32 < vocab; ++w) {
    const int tail = vocab - w * 32;  // tokens of this word inside the vocabulary
    const uint32_t in_vocab = tail >= 32 ? ~0u : (1u << tail) - 1;
    n += __builtin_popcount(bits[w] & in_vocab);
  }
  return n;
}

int apply_token_mask(float* logits, int vocab, const uint32_t* bits) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  int allowed = 0;
  for (int w = 0; w * 32 < vocab; ++w) {
    const uint32_t word = bits[w];
    const int end = std::min(vocab, (w + 1) * 32);
    if (word == 0) {
      for (int id = w * 32; id < end; ++id) logits[id] = kNegInf;
      continue;
    }
    for (int id = w * 32; id < end; ++id) {
      if ((word >> (id - w * 32)) & 1u) ++allowed;
      else logits[id] = kNegInf;
    }
  }
  return allowed;
}

}  // namespace pagoda
