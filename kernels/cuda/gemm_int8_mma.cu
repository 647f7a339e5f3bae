// The batch-invariant GEMM on quantized weights and int8 activations:
//   gemm_quant_int8: out[i * ld_out + r] for i < n (any n >= 1), r < rows, with every output
//     bit-identical to what gemv_quant_dp4a (gemv_dp4a.cu) gives for activation row i alone:
//     the same integers, the same float arithmetic, the same order. W [rows, cols] in the GGUF
//     blocks of a device quant type, acts from quantize_acts_q8 with the same n and cols.
//   mma_s8_probe: one warp, one mma_s8_m16n8k16 on a 16x16 A and a 16x8 B from device memory
//     (test hook: checks the fragment placement mma.cuh states, on a GPU and in the emulator).
// What the GEMV computes, per (weight row r, activation row i): the row's 32-value pieces p,
// each as quant_int.cuh's integers w, per half h a scale s[h] and offset o[h], with the
// activation block's int8 q, scale d and half sums qs:
//   h0, h1 = dot(w, q) over half 0 and half 1 (exact integers)
//   t = fmaf(o1, qs1, fmaf(o0, qs0, fmaf(s1, h1, s0 * h0)))
//   lane l (= p mod 32) keeps acc_l = fmaf(d, t, acc_l) over its pieces p = l, l + 32, ... in
//   increasing order, then warp_sum adds the 32 lanes by its butterfly: on lane 0,
//   ((a_0 + a_16) + (a_8 + a_24)) for each l < 8 (= q_l), then (q_0 + q_4) + (q_2 + q_6), ...
// Here: h0 and h1 come from two mma.sync m16n8k16 s8 (one per half, k = 16: the two halves
// need their own sums, which a k = 32 MMA would merge), exact as dp4a's; t and the fmaf chain
// per slot l are the same operations on the same values; slot l's chain runs in warp l % 8 of
// the CUDA block, which finishes (a_l + a_{l+16}) + (a_{l+8} + a_{l+24}) itself, and the block
// adds the eight warps' q_l in warp_sum's order. Nothing depends on n or on the other rows.
// Launch: grid (ceil(n / 16), ceil(rows / 32)) (activation tiles fastest, so the tiles of one
// set of weight rows run together and share them in L2), 256 threads (8 warps). A CUDA block
// owns a 32-weight-row x 16-activation-row tile; warp w runs slots w, w + 16, w + 8, w + 24 in
// turn: per piece, lane j decodes weight row j's piece into the warp's shared rows, the warp
// reads A fragments from there and B fragments (4 bytes each) from the activation buffer, 8 MMAs
// (2 weight-row halves x 2 activation octets x 2 halves of the piece) and 16 outputs' epilogues a
// lane. 29,696 bytes of static shared memory; ptxas -v (CUDA 13, sm_90, -O3): 103-113 registers
// for every type, no spills, no stack, so 2 CUDA blocks (16 warps) an SM.
// Cost: the weights are read once per activation tile (ceil(n / 16) times, mostly from L2), not
// n / 8 times from memory as by the GEMV in chunks; each piece is decoded once per tile. Not
// tuned: each lane reads its own row (uncoalesced, as every decode of these 2-byte-aligned
// blocks), no double buffering, 5 float operations per output and piece (as the GEMV). Not yet
// run on a GPU: correctness under the emulator only, speed unmeasured.
// Assumptions: cols a multiple of the type's block; acts 16-byte aligned (q8_acts_layout);
// W 2-byte aligned; rows <= 65535 * 32.
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/quant_decode.cuh"
#include "kernels/cuda/quant_int.cuh"

namespace pagoda::cuda {
namespace {

constexpr int kWarps = 8, kTileRows = 32, kTileActs = 16;
constexpr int kOuts = 16;  // outputs a lane holds: 2 weight-row halves x 2 octets x 4
constexpr int kLdw = 9;    // words per shared weight row: 8 + 1 of padding against bank conflicts

// Output o of a lane (g = lane / 4, t = lane % 4): weight row and activation row in the tile.
__device__ __forceinline__ int out_row(int o, int g) { return 16 * (o / 8) + g + 8 * ((o % 4) / 2); }
__device__ __forceinline__ int out_act(int o, int t) { return 8 * ((o / 4) % 2) + 2 * t + (o % 2); }

template <class B>
__global__ void __launch_bounds__(kWarps * 32)
    gemm_int8_kernel(const uint8_t* w, const int8_t* q, const float* d, const int* qsum, float* out, int rows,
                     int n, int pieces, int64_t row_bytes, int64_t ld_out) {
  __shared__ int sw[kWarps][kTileRows * kLdw];       // the warp's decoded piece, one row a lane
  __shared__ float ssc[kWarps][kTileRows][4];        // its scale[0..1], offset[0..1]
  __shared__ float part[kWarps][kTileRows * kTileActs];  // each warp's q_l per output
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int i0 = blockIdx.x * kTileActs, r0 = blockIdx.y * kTileRows;
  const int my_row = r0 + lane;  // the weight row this lane decodes
  const uint8_t* wr = w + (int64_t)(my_row < rows ? my_row : 0) * row_bytes;
  // The activation rows of this lane's outputs and of its B fragments (clamped: rows past n
  // are computed from row 0's data and never stored).
  int64_t act_of[4], frag_act[2];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int a = i0 + 8 * (j / 2) + 2 * t + (j % 2);
    act_of[j] = a < n ? a : 0;
  }
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) {
    const int a = i0 + 8 * nt + g;
    frag_act[nt] = a < n ? a : -1;
  }

  float pair[kOuts], quad[kOuts];
  for (int step = 0; step < 4; ++step) {
    const int slot = warp + (step == 1 ? 16 : step == 2 ? 8 : step == 3 ? 24 : 0);
    float acc[kOuts];
#pragma unroll
    for (int o = 0; o < kOuts; ++o) acc[o] = 0.0f;
    for (int p = slot; p < pieces; p += 32) {
      quant::IntPiece wp;
      if (my_row < rows) {
        quant::IntDecode<B>::piece(wr + (int64_t)(p / B::kPieces) * B::kBytes, p % B::kPieces, wp);
      } else {
#pragma unroll
        for (int j = 0; j < 8; ++j) wp.w[j] = 0;
        wp.scale[0] = wp.scale[1] = wp.offset[0] = wp.offset[1] = 0.0f;
      }
      __syncwarp();  // the previous piece's fragments have been read
#pragma unroll
      for (int j = 0; j < 8; ++j) sw[warp][lane * kLdw + j] = wp.w[j];
      ssc[warp][lane][0] = wp.scale[0];
      ssc[warp][lane][1] = wp.scale[1];
      ssc[warp][lane][2] = wp.offset[0];
      ssc[warp][lane][3] = wp.offset[1];
      __syncwarp();
      // A: weight rows 16 mt + g (+ 8), words 4 h + t of the piece; B: activation row 8 nt + g,
      // bytes 16 h + 4 t .. + 3 of its block p.
      uint32_t a[2][2][2], b[2][2];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          a[mt][h][0] = (uint32_t)sw[warp][(16 * mt + g) * kLdw + 4 * h + t];
          a[mt][h][1] = (uint32_t)sw[warp][(16 * mt + g + 8) * kLdw + 4 * h + t];
        }
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          b[nt][h] = frag_act[nt] < 0
                         ? 0u
                         : *reinterpret_cast<const uint32_t*>(q + (frag_act[nt] * pieces + p) * 32 + 16 * h + 4 * t);
      int dot[2][2][2][4];  // [mt][nt][half][c]
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
#pragma unroll
            for (int c = 0; c < 4; ++c) dot[mt][nt][h][c] = 0;
            mma_s8_m16n8k16(dot[mt][nt][h], a[mt][h], b[nt][h]);
          }
      // The GEMV's per-piece epilogue (row_dot in gemv_dp4a.cu), operation for operation.
#pragma unroll
      for (int o = 0; o < kOuts; ++o) {
        const int mt = o / 8, nt = (o / 4) % 2, c = o % 4;
        const float* sc = ssc[warp][out_row(o, g)];
        const int64_t blk = act_of[(o / 4) % 2 * 2 + (o % 2)] * pieces + p;
        float v = __fmul_rn(sc[0], (float)dot[mt][nt][0][c]);
        v = fmaf(sc[1], (float)dot[mt][nt][1][c], v);
        v = fmaf(sc[2], (float)qsum[2 * blk], v);
        v = fmaf(sc[3], (float)qsum[2 * blk + 1], v);
        acc[o] = fmaf(d[blk], v, acc[o]);
      }
    }
    // warp_sum's first two levels for lane `warp`: (a_w + a_{w+16}) + (a_{w+8} + a_{w+24}).
#pragma unroll
    for (int o = 0; o < kOuts; ++o) {
      if (step == 0 || step == 2) pair[o] = acc[o];
      else if (step == 1) quad[o] = __fadd_rn(pair[o], acc[o]);
      else quad[o] = __fadd_rn(quad[o], __fadd_rn(pair[o], acc[o]));
    }
  }
#pragma unroll
  for (int o = 0; o < kOuts; ++o) part[warp][out_row(o, g) * kTileActs + out_act(o, t)] = quad[o];
  __syncthreads();
  // The last three levels over the warps' q_0..q_7: ((q0 + q4) + (q2 + q6)) + ((q1 + q5) + (q3 + q7)).
  for (int e = threadIdx.x; e < kTileRows * kTileActs; e += kWarps * 32) {
    const int r = r0 + e / kTileActs, i = i0 + e % kTileActs;
    const float s = __fadd_rn(__fadd_rn(__fadd_rn(part[0][e], part[4][e]), __fadd_rn(part[2][e], part[6][e])),
                              __fadd_rn(__fadd_rn(part[1][e], part[5][e]), __fadd_rn(part[3][e], part[7][e])));
    if (r < rows && i < n) out[(int64_t)i * ld_out + r] = s;
  }
}

__global__ void __launch_bounds__(32) mma_s8_probe_kernel(const int8_t* a, const int8_t* b, int32_t* c) {
  const int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
  auto word = [](const int8_t* p) {
    return (uint32_t)(uint8_t)p[0] | ((uint32_t)(uint8_t)p[1] << 8) | ((uint32_t)(uint8_t)p[2] << 16) |
           ((uint32_t)(uint8_t)p[3] << 24);
  };
  const uint32_t af[2] = {word(a + g * 16 + 4 * t), word(a + (g + 8) * 16 + 4 * t)};
  const int8_t bk[4] = {b[(4 * t) * 8 + g], b[(4 * t + 1) * 8 + g], b[(4 * t + 2) * 8 + g], b[(4 * t + 3) * 8 + g]};
  int d[4] = {1, 2, 3, 4};  // accumulated into: the probe's expected values include them
  mma_s8_m16n8k16(d, af, word(bk));
  for (int i = 0; i < 4; ++i) c[(g + 8 * (i / 2)) * 8 + 2 * t + i % 2] = d[i];
}

}  // namespace

bool gemm_quant_int8(const void* w, GgmlType type, const void* acts, float* out, int64_t n, int64_t rows,
                     int64_t cols, int64_t ld_out, void* stream) {
  const bool aligned = (reinterpret_cast<uintptr_t>(acts) & 15) == 0 && (reinterpret_cast<uintptr_t>(w) & 1) == 0;
  if (!aligned || n < 1 || rows < 1 || ceil_div(rows, kTileRows) > 65535 || ceil_div(n, kTileActs) > (1ll << 31) - 1)
    return false;
  const Q8ActsLayout L = q8_acts_layout(n, cols);
  const auto* base = static_cast<const uint8_t*>(acts);
  bool ok = false;
  quant::with_quant_type(type, [&](auto blk) {
    using B = decltype(blk);
    if (cols % B::kElems != 0 || cols / 32 > (int64_t(1) << 30)) return;
    ok = true;
    const dim3 grid(static_cast<unsigned>(ceil_div(n, kTileActs)), static_cast<unsigned>(ceil_div(rows, kTileRows)));
    gemm_int8_kernel<B><<<grid, kWarps * 32, 0, as_stream(stream)>>>(
        static_cast<const uint8_t*>(w), reinterpret_cast<const int8_t*>(base + L.q_offset),
        reinterpret_cast<const float*>(base + L.d_offset), reinterpret_cast<const int*>(base + L.sum_offset), out,
        static_cast<int>(rows), static_cast<int>(n), static_cast<int>(cols / 32), cols / B::kElems * B::kBytes, ld_out);
    CUDA_CHECK_LAUNCH();
  });
  return ok;
}

void mma_s8_probe(const int8_t* a, const int8_t* b, int32_t* c, void* stream) {
  mma_s8_probe_kernel<<<1, 32, 0, as_stream(stream)>>>(a, b, c);
  CUDA_CHECK_LAUNCH();
}

}  // namespace pagoda::cuda
