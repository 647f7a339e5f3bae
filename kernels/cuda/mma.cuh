// Warp-level tensor-core operations for the kernels, one function per PTX instruction used:
//   mma_bf16_m16n8k16(d, a, b)  mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, d += A B:
//     A 16x16 bf16 (row-major), B 16x8 bf16 (column-major), d 16x8 f32, each as the per-lane
//     fragments of the PTX ISA ("Matrix Fragments for mma.m16n8k16 with floating point type"):
//     with g = lane / 4 and t = lane % 4, a[0] holds A[g][2t, 2t+1], a[1] A[g+8][2t, 2t+1],
//     a[2] A[g][2t+8, 2t+9], a[3] A[g+8][2t+8, 2t+9]; b[0] B[2t, 2t+1][g], b[1] B[2t+8, 2t+9][g];
//     d[0..1] D[g][2t, 2t+1], d[2..3] D[g+8][2t, 2t+1] (the lower-numbered element in the low
//     16 bits of a register).
//   mma_f16_m16n8k16(d, a, b)  the same with f16 A and B (mma.sync...row.col.f32.f16.f16.f32),
//     same fragment placement.
//   mma_s8_m16n8k16(d, a, b)  mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32, d += A B exactly
//     in integers: A 16x16 s8 (row-major), B 16x8 s8 (column-major), d 16x8 s32; with g and t
//     as above, a[0] holds A[g][4t .. 4t+3], a[1] A[g+8][4t .. 4t+3], b B[4t .. 4t+3][g] (the
//     lowest k in the lowest byte); d[0..1] D[g][2t, 2t+1], d[2..3] D[g+8][2t, 2t+1].
//   ldmatrix_x4(r, row)  ldmatrix.sync.aligned.m8n8.x4.shared.b16: four 8x8 bf16 matrices from
//     shared memory; lanes 8j .. 8j+7 give the 16-byte-aligned addresses of matrix j's rows
//     0..7, and lane l receives in r[j] the two values of row l / 4, columns 2(l % 4) and +1.
// All are warp-collective: every lane of the warp must call them together (no divergence).
// Built with nvcc they are inline PTX (sm_80 and newer); under the CPU emulation (emu.h
// defines PAGODA_CUDA_EMU) the emulator runs them with the same fragment placement, so a
// fragment layout bug in a kernel gives wrong numbers there as on the hardware.
#pragma once

#include <cstdint>

namespace pagoda::cuda {

#if defined(PAGODA_CUDA_EMU)

inline void mma_bf16_m16n8k16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  ::emu::mma_bf16_m16n8k16(d, a, b);
}
inline void mma_f16_m16n8k16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  ::emu::mma_f16_m16n8k16(d, a, b);
}
inline void mma_s8_m16n8k16(int (&d)[4], const uint32_t (&a)[2], uint32_t b) { ::emu::mma_s8_m16n8k16(d, a, b); }
inline void ldmatrix_x4(uint32_t (&r)[4], const void* row) { ::emu::ldmatrix_x4(r, row); }

#elif defined(__CUDACC__)

__device__ __forceinline__ void mma_bf16_m16n8k16(float (&d)[4], const uint32_t (&a)[4],
                                                  const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ void mma_f16_m16n8k16(float (&d)[4], const uint32_t (&a)[4],
                                                 const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ void mma_s8_m16n8k16(int (&d)[4], const uint32_t (&a)[2], uint32_t b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
      "{%0, %1, %2, %3};\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(b));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

#endif

}  // namespace pagoda::cuda
