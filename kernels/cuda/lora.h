// LoRA on the GPU: one adapter's low-rank update over a gathered set of rows (the CUDA side of
// Backend::lora_add; the CPU reference is kernels/cpu/lora.h). Plain C++ declarations; the
// kernel is in lora.cu.
#pragma once

#include <cstdint>

namespace pagoda::cuda {

// For i < n_rows, r = rows[i]: y[r, :] += B t with t = scale * A x[r, :]. A is [rank x in] and
// B [out x rank], F32 row-major on the device; x rows are `in` floats apart, y rows `out`;
// rows is a device array. rank at most kLoraMaxRank.
constexpr int kLoraMaxRank = 1024;
void lora_add(const float* a, const float* b, int rank, int64_t in, int64_t out, float scale, const float* x,
              float* y, const int32_t* rows, int64_t n_rows, void* stream);

}  // namespace pagoda::cuda
