// AVX2 kernels for quantized weights and few activation rows (n <= kFewRowsMax: decode steps) in
// the GGML layout, the counterpart of matmul_rows_avx512.cpp for CPUs without AVX-512 VNNI. The
// kernels are templates in matmul_rows_avx2.h (the decode layout's kernels in
// matmul_packed_avx2.cpp read them for the rows its groups leave over); this file instantiates
// them per weight type.
#include "kernels/cpu/matmul_rows_avx2.h"

namespace pagoda::cpu::detail {

void matmul_few_rows_avx2(const MatmulArgs& a, int64_t o_begin, int64_t o_end) {
  switch (a.type) {
#define PAGODA_CASE(T) \
  case GgmlType::T: return few_rows_range<GgmlType::T>(a, o_begin, o_end);
    PAGODA_INT8_WEIGHT_TYPES(PAGODA_CASE)
#undef PAGODA_CASE
    default: return;
  }
}

}  // namespace pagoda::cpu::detail
