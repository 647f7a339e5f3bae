// DrawParams: the knobs of one token drawn on a backend. The engine's SampleRequest
// (engine/backend/backend.h) extends it with the logit row, and the CUDA sampler's launchers
// (kernels/cuda/ops.h) take arrays of it as they are, so the backend uploads the engine's
// values without copying them field by field. Plain C++ (no CUDA headers), like ggml_type.h.
// The rule these fields drive is documented at SampleRequest and in kernels/cuda/sample.cu.
#pragma once

#include <cstdint>

namespace pagoda {

struct DrawParams {
  float temperature = 0.0f;  // <= 0: greedy (argmax, lowest id on ties)
  int32_t top_k = 0;         // 0: off; keeps every token whose logit is >= the k-th largest
  float top_p = 1.0f;        // 1: off; keeps the smallest top set whose probability reaches top_p
  float min_p = 0.0f;        // 0: off; keeps tokens with probability >= min_p * max probability
  uint64_t seed = 0;         // Philox key (kernels/cuda/philox.h)
  uint64_t counter = 0;      // Philox counter: the sequence's number of generated tokens
};

}  // namespace pagoda
