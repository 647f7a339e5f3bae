// StepCostModel: how long a forward pass takes, learnt online from timed steps, so the
// scheduler can size prefill chunks to a step-time target (stall-free prefill;
// docs/architecture.md, "The scheduler").
//
// A step's time is modelled as linear in four features of its StepPlan:
//   fixed (weights streamed once per step, launch overhead) + per token (every row goes through
//   every matmul) + per logit row (the LM head, the widest matmul, runs only on sampled rows)
//   + per attention pair (each new token attends to its sequence's past: n * (n_past + n/2)).
// The coefficients are a least-squares fit (non-negative, lightly ridged) over recent steps,
// kept in buckets by kind (with prefill or decode-only) and size (log2 of the token count), the
// last few of each: a long run of identical steps (twelve streams decoding for minutes) then
// never erases what steps of other shapes cost, which is what separates the fixed cost from
// the per-token one. Deterministic: the same observations give the same predictions, which is
// what the scheduler's unit tests rely on.
//
// A host's timings are noisy and the features move together (the streams' contexts grow while
// the host's load changes), so the fit can be far off for prompt chunks in particular, which
// are rarer than decodes: a coefficient per attention pair ten times too high makes every
// chunk look ten times too dear, and the prompt crawls at the minimum chunk. So the
// prediction of a step with prompt tokens is also scaled by how the fit has been doing lately
// on such steps: a running geometric mean of actual over fitted time. Steps that keep overrunning
// their target are thereby cut smaller, steps that keep finishing early larger, until they take
// the target time (a feedback loop around the fit). Steps of decodes alone, what the target is
// derived from, are predicted by the fit as it is (they are most of what it learns from).
#pragma once

#include <array>
#include <cstddef>
#include <vector>

namespace pagoda {

struct StepPlan;

struct StepFeatures {
  double tokens = 0;
  double logit_rows = 0;
  double attention_pairs = 0;  // sum over sequences of n * (n_past + (n + 1) / 2)

  // `n` new tokens after `n_past` cached ones, `rows` of them sampled.
  void add_chunk(int n_past, int n, int rows);
  static StepFeatures of(const StepPlan& plan);
};

class StepCostModel {
 public:
  static constexpr int kCoefficients = 4;  // fixed, per token, per logit row, per attention pair
  using Coefficients = std::array<double, kCoefficients>;  // ms; pairs per 1e6

  // Records a step that took `ms`; `prefill` says which kind of bucket it joins.
  void observe(const StepFeatures& f, double ms, bool prefill);
  // Predicted step time in ms (0 until ready()): the fit, times prompt_correction() for a step
  // with prompt tokens (more tokens than sampled rows).
  double predict_ms(const StepFeatures& f) const;
  // The fit alone.
  double fitted_ms(const StepFeatures& f) const;
  // Actual / fitted time of the recent steps with prompt tokens.
  double prompt_correction() const { return prompt_correction_; }
  // Enough steps seen to trust a prediction.
  bool ready() const { return ready_; }
  const Coefficients& coefficients() const { return coef_; }
  // Sets the coefficients directly (tests, or a model known in advance); ready() afterwards.
  void set_coefficients(const Coefficients& c);

 private:
  struct Sample {
    Coefficients x;
    double ms;
  };
  static constexpr size_t kPerBucket = 4;  // steps kept per bucket
  static constexpr int kSizes = 24;        // log2 size classes of the token count
  struct Bucket {
    std::vector<Sample> ring;
    size_t next = 0;
  };
  void refit();

  Bucket buckets_[2][kSizes];  // [decode-only | with prefill][size class]
  Coefficients coef_{};
  double prompt_correction_ = 1.0;
  bool ready_ = false;
};

}  // namespace pagoda
