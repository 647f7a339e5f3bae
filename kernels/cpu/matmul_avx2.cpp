// AVX2 matmul kernels: placeholder forwarding to scalar until written.
#include "kernels/cpu/matmul_internal.h"
namespace pagoda::cpu::detail {
void matmul_range_avx2(const MatmulArgs& a, int64_t o_begin, int64_t o_end) { matmul_range_scalar(a, o_begin, o_end); }
}  // namespace pagoda::cpu::detail
