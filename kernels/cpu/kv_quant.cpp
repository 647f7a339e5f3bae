// Q8_0 KV head rows: d = max|x| / 127 (f32), q = roundf(x * (1/d)), d stored as f16; value =
// q * f16(d). The same rule as ggml's quantize_row_q8_0_ref, group by group.
#include "kernels/cpu/kv_quant.h"

#include <cmath>
#include <cstring>

#include "kernels/cpu/quants.h"

namespace pagoda::cpu {

void kv_q8_quantize(const float* x, int64_t n, int group, uint8_t* dst) {
  for (int64_t g0 = 0; g0 < n; g0 += group, x += group, dst += group + 2) {
    float amax = 0.0f;
    for (int i = 0; i < group; ++i) amax = std::fmax(amax, std::fabs(x[i]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t dh = fp32_to_fp16(d);
    std::memcpy(dst, &dh, 2);
    auto* q = reinterpret_cast<int8_t*>(dst + 2);
    for (int i = 0; i < group; ++i) q[i] = static_cast<int8_t>(std::round(x[i] * id));
  }
}

void kv_q8_dequantize(const uint8_t* src, int64_t n, int group, float* y) {
  for (int64_t g0 = 0; g0 < n; g0 += group, y += group, src += group + 2) {
    uint16_t dh;
    std::memcpy(&dh, src, 2);
    const float d = fp16_to_fp32(dh);
    const auto* q = reinterpret_cast<const int8_t*>(src + 2);
    for (int i = 0; i < group; ++i) y[i] = static_cast<float>(q[i]) * d;
  }
}

}  // namespace pagoda::cpu
