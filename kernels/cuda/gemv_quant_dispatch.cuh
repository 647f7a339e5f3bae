// The shape rule and template dispatch shared by the decode GEMVs on quantized weights
// (gemv_quant.cu, f32 activations; gemv_dp4a.cu, int8 activations): which (type, n, rows, cols)
// they serve, and the instantiation per block type and row count.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/quant_decode.cuh"

namespace pagoda::cuda {

// Calls f(std::integral_constant<int, n>{}) for n in 1..8 (n > 8 as 8): the row count of the
// decode GEMVs, a template parameter so each row's accumulator stays in registers.
template <class F>
void with_row_count(int64_t n, F&& f) {
  switch (n) {
    case 1: f(std::integral_constant<int, 1>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 3: f(std::integral_constant<int, 3>{}); break;
    case 4: f(std::integral_constant<int, 4>{}); break;
    case 5: f(std::integral_constant<int, 5>{}); break;
    case 6: f(std::integral_constant<int, 6>{}); break;
    case 7: f(std::integral_constant<int, 7>{}); break;
    default: f(std::integral_constant<int, 8>{}); break;
  }
}

// Calls f(Block{}, std::integral_constant<int, n>{}) and returns true when a decode GEMV can
// take n activation rows over a [rows, cols] matrix of `type`: 1 <= n <= kQuantGemvMaxRows, a
// device quant type, cols a multiple of its block, sizes within int range. False otherwise,
// calling nothing.
template <class F>
bool with_quant_gemv(GgmlType type, int64_t n, int64_t rows, int64_t cols, F&& f) {
  if (n < 1 || n > kQuantGemvMaxRows || rows < 1 || rows > (int64_t(1) << 30)) return false;
  bool ok = false;
  quant::with_quant_type(type, [&](auto blk) {
    using B = decltype(blk);
    if (cols % B::kElems != 0 || cols / 32 > (int64_t(1) << 30)) return;
    ok = true;
    with_row_count(n, [&](auto rows_n) { f(blk, rows_n); });
  });
  return ok;
}

}  // namespace pagoda::cuda
