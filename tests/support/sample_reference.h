// The GPU sampling rule (kernels/cuda/sample.cu, documented at SampleRequest in
// engine/backend/backend.h) on the host, for tests: the GPU kernel tests compare the device
// against it, and the engine tests use it in a CPU test double of a backend that samples. P is
// any struct with temperature, top_k, top_p, min_p, seed and counter (DrawParams, SampleRequest).
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "kernels/cuda/philox.h"

namespace pagoda::test {

// The token drawn from one row of `vocab` logits. In *ambiguous (when given) whether float
// rounding could reasonably flip the result (the draw or the top-p target within a hair of a
// boundary; this reference sums in double, the kernel in float), in which case a different
// GPU answer is not an error.
template <class P>
int reference_sample(const float* x, int vocab, const P& p, bool* ambiguous = nullptr) {
  bool amb = false;
  const int amax = static_cast<int>(std::max_element(x, x + vocab) - x);  // lowest index on ties
  if (p.temperature <= 0.0f) {
    if (ambiguous) *ambiguous = false;
    return amax;
  }
  const float inv_t = 1.0f / p.temperature, mx = x[amax];
  std::vector<float> e(static_cast<size_t>(vocab));
  for (int j = 0; j < vocab; ++j) e[static_cast<size_t>(j)] = std::exp((x[j] - mx) * inv_t);
  std::vector<float> sorted = e;
  std::sort(sorted.begin(), sorted.end(), std::greater<float>());
  float thr = 0.0f;
  if (p.top_k > 0 && p.top_k < vocab) thr = sorted[static_cast<size_t>(p.top_k - 1)];
  auto mass = [&](float t) {
    double s = 0;
    for (float v : e)
      if (v >= t) s += v;
    return s;
  };
  if (p.top_p < 1.0f) {
    const double target = p.top_p * mass(thr);
    for (float v : sorted) {  // descending: the first value whose mass reaches the target
      if (v < thr) break;
      const double m = mass(v);
      if (std::fabs(m - target) < 1e-5 * target) amb = true;
      if (m >= target) {
        thr = std::max(thr, v);
        break;
      }
    }
  }
  if (p.min_p > 0.0f) thr = std::max(thr, std::min(p.min_p, 1.0f));
  const double total = mass(thr);
  const double target = static_cast<double>(cuda::philox_uniform(p.seed, p.counter)) * total;
  double run = 0;
  int last = amax;
  for (int j = 0; j < vocab; ++j) {
    const float v = e[static_cast<size_t>(j)];
    if (v < thr || !(v > 0.0f)) continue;
    last = j;
    if (std::fabs(run + v - target) < 1e-5 * total || std::fabs(run - target) < 1e-5 * total) amb = true;
    run += v;
    if (run > target) {
      if (ambiguous) *ambiguous = amb;
      return j;
    }
  }
  if (ambiguous) *ambiguous = amb;
  return last;
}

}  // namespace pagoda::test
