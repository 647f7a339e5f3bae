// LoRA: one row's low-rank update, the CPU reference of every backend's adapted matmul.
//
// lora_add_row computes y += scale * B (A x) for one activation row x, where A is the adapter's
// [rank x in] down-projection and B its [out x rank] up-projection (both F32, row-major, as
// llama.cpp's convert_lora_to_gguf.py stores lora_a and lora_b: ggml dims {in, rank} and
// {rank, out}). The rank-sized intermediate t = A x goes through `scratch`. Each dot product is
// summed in index order, so a row's result depends only on that row (batch invariance).
#pragma once

#include <cstdint>

namespace pagoda::cpu {

// y[j] += sum_k b[j*rank + k] * t[k], j < out, where t[k] = scale * sum_i a[k*in + i] * x[i]
// (the scale is folded into the rank-sized intermediate); scratch holds t (rank floats).
void lora_add_row(const float* a, const float* b, int rank, int64_t in, int64_t out, float scale,
                  const float* x, float* y, float* scratch);

}  // namespace pagoda::cpu
