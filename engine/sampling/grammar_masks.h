// Token masks of a step's constrained rows (structured output), computed on worker threads
// while the forward pass runs: a mask depends only on the sequence's grammar state, which is
// known before the step, so its cost hides behind the model instead of adding to the step.
// Rows without a grammar cost nothing.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace pagoda {

namespace structured { class GrammarMatcher; }

class StepMasks {
 public:
  // `workers`: threads computing masks (each mask is computed by one thread; rows in parallel).
  explicit StepMasks(int workers = 1);
  ~StepMasks();
  StepMasks(const StepMasks&) = delete;
  StepMasks& operator=(const StepMasks&) = delete;

  // Starts computing the mask of every non-null matcher (`words` uint32 per mask). The
  // matchers must stay unchanged until wait() returns. Call wait() before the next start().
  void start(std::vector<const structured::GrammarMatcher*> matchers, size_t words);
  // Blocks until every mask of the last start() is ready.
  void wait();
  // Row i's mask (bit id%32 of word id/32 set: token allowed), or null when row i has no matcher.
  const uint32_t* mask(size_t i) const;
  // Words of each mask of the last start().
  size_t words() const { return words_; }
  bool any() const { return pending_rows_ > 0; }

 private:
  void work();

  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_work_, cv_done_;
  std::vector<const structured::GrammarMatcher*> matchers_;
  std::vector<uint32_t> bits_;  // matchers_.size() * words_
  size_t words_ = 0;
  size_t next_ = 0;             // next row to take (guarded by mu_)
  size_t remaining_ = 0;        // rows not yet finished (guarded by mu_)
  size_t pending_rows_ = 0;     // rows with a matcher in the last start()
  uint64_t generation_ = 0;     // bumped by start() (guarded by mu_)
  bool stopping_ = false;
};

// How many of tokens 0..vocab-1 the mask allows.
int allowed_tokens(const uint32_t* bits, int vocab);

// Sets the logit of every token the mask disallows to -infinity (before the sampler's
// pipeline, so logprobs and truncation describe the constrained distribution). Returns the
// number of allowed tokens.
int apply_token_mask(float* logits, int vocab, const uint32_t* bits);

}  // namespace pagoda
