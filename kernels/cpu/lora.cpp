#include "kernels/cpu/lora.h"

namespace pagoda::cpu {

void lora_add_row(const float* a, const float* b, int rank, int64_t in, int64_t out, float scale,
                  const float* x, float* y, float* scratch) {
  for (int k = 0; k < rank; ++k) {
    const float* ak = a + static_cast<int64_t>(k) * in;
    float s = 0.0f;
    for (int64_t i = 0; i < in; ++i) s += ak[i] * x[i];
    scratch[k] = s * scale;
  }
  for (int64_t j = 0; j < out; ++j) {
    const float* bj = b + j * rank;
    float s = 0.0f;
    for (int k = 0; k < rank; ++k) s += bj[k] * scratch[k];
    y[j] += s;
  }
}

}  // namespace pagoda::cpu
