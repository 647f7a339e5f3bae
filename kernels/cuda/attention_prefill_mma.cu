// Paged attention for prefill tiles on tensor cores (FlashAttention-2's scheme over the paged
// cache): for every token t of the tiles (tiles[2i]: first token, tiles[2i+1]: count, one
// sequence per tile) and query head h,
//   out[t, h] = softmax_j(cap(scale * q[t, h] . K[j, g])) V[j, g]
// over logical j in first(t) .. positions[t], first(t) = max(0, positions[t] + 1 - window) with a
// window (window 0: 0), cap(s) = softcap * tanh(s / softcap) when softcap > 0 (else s), and
// g = h / (n_heads / n_kv_heads): attention_prefill's and attention_ext's semantics, which this
// kernel replaces for the head dims it is built for (64, 80, 96, 128, 256). CPU reference: the
// CPU backend's attention / attention_ext (tests/gpu/test_cuda_attention.cpp).
// Launch: grid (n_kv_heads * n_sub, n_tiles), 32 * W threads; a CUDA block serves one tile's
// (up to 16) tokens for W query heads of KV head g (n_sub = ceil(G / max warps) blocks share a
// group of G = n_heads / n_kv_heads heads, W = ceil(G / n_sub)): warp w owns head
// g * G + sub * W + w, i.e. a 16-row M tile of the MMAs, so one K/V tile in shared memory serves
// 16 * W query rows (GQA). Per K/V tile of TK keys (64, or 32 at head_dim 256): the block reads
// the keys' slots through the block table (holes, negative block ids, and keys outside the tile
// rows' union of ranges read as zeros), converts K (row-major, [key][dim]) and V (transposed,
// [dim][key]) to f16 in shared memory (F16/F32 converted, Q8_0 dequantized by kv_load8), then
// each warp: S = Q K^T by mma.sync m16n8k16 on f16 (Q held in registers as A fragments for the whole
// run, K as B fragments by ldmatrix.x4), masks (causal, window), scales and caps S in f32, keeps
// an online softmax per row in f32 (each row's max and sum over its quad of lanes), rounds P to
// f16 straight from the S accumulators into A fragments (the D and A fragment layouts agree)
// and accumulates O += P V by mma.sync (V's B fragments by ldmatrix.x4 from the transposed tile).
// The row sum l adds the f16-rounded P, the same weights the MMAs use. Shared rows are padded
// by 8 values so the eight row addresses of an ldmatrix fall in distinct banks.
// Numerics: q, K, V and P are rounded to f16 (products exact in f32, sums f32): f16 caches are
// read exactly, P (in [0, 1]) and q8_0 / f32 values to 11 significant bits (relative error
// <= 2^-11; f16 rather than bf16 for that: 4x closer to the f32 CPU reference); the tests bound
// the difference. q values beyond the f16 range (|q| > 65504, not seen in practice) are clamped
// to it. The order of the sums depends only on the row's own context (K/V tiles at multiples of
// TK keys), never on the batch or the other rows of its tile (batch and chunking invariance).
// Assumptions: head_dim one of the built ones (the host function returns false otherwise);
// n_heads a multiple of n_kv_heads; a tile's rows belong to one sequence (one block table) and
// are causal rows (token-tree rows go to attention_decode); every row's position >= 0; blocks
// wholly before the tile's first row's window may be holes (released); an F16, F32 or Q8_0
// cache. Not yet tuned (unmeasured on a GPU): no cp.async double buffering, V transposed by
// scalar shared stores instead of ldmatrix.trans, 16-token tiles (G = 1 gets 16-row blocks).
#include <cuda_fp16.h>

#include <climits>
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kv_elem.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/ops.h"

namespace pagoda::cuda {
namespace {

static_assert(kPrefillTileQ == 16, "a warp's MMA tile is 16 query rows: one prefill tile");

template <int HD>
struct Shape {
  static constexpr int kTK = HD > 128 ? 32 : 64;  // keys per K/V tile (registers at HD 256)
  static constexpr int kLdK = HD + 8;             // f16 per shared K row
  static constexpr int kLdV = kTK + 8;            // f16 per shared V^T row
  static constexpr int kMaxWarps = HD > 128 ? 4 : 8;
  static constexpr size_t kSmem = sizeof(uint16_t) * (kTK * kLdK + HD * kLdV) + sizeof(int64_t) * kTK;
};

// x rounded to f16 (to nearest; beyond the f16 range, to +-65504 instead of infinity).
__device__ __forceinline__ __half to_f16(float x) { return __float2half_rn(fminf(fmaxf(x, -65504.0f), 65504.0f)); }
__device__ __forceinline__ uint16_t f16_bits(float x) { return __half_as_ushort(to_f16(x)); }
__device__ __forceinline__ uint32_t pack_f16x2(float lo, float hi) {
  return static_cast<uint32_t>(f16_bits(lo)) | (static_cast<uint32_t>(f16_bits(hi)) << 16);
}
__device__ __forceinline__ float round_f16(float x) { return __half2float(to_f16(x)); }

// The sum / max of v over the 4 lanes of a quad (the lanes holding one row of a D fragment).
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

template <int HD>
__global__ void __launch_bounds__(Shape<HD>::kMaxWarps * 32)
    prefill_mma_kernel(const float* q, float* out, int n_heads, float scale, int window, float softcap,
                       PagedKv kv, AttnIndex idx, const int32_t* tiles, int heads_per_block) {
  using S = Shape<HD>;
  constexpr int TK = S::kTK, LDK = S::kLdK, LDV = S::kLdV;
  extern __shared__ float smem[];
  uint16_t* sK = reinterpret_cast<uint16_t*>(smem);           // [TK][LDK]
  uint16_t* sVt = sK + TK * LDK;                               // [HD][LDV]
  int64_t* sSlot = reinterpret_cast<int64_t*>(sVt + HD * LDV);  // [TK]

  const int G = n_heads / kv.n_kv_heads;
  const int n_sub = (G + heads_per_block - 1) / heads_per_block;
  const int g = blockIdx.x / n_sub, sub = blockIdx.x % n_sub;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, nthreads = blockDim.x;
  const int gq = sub * heads_per_block + warp;
  const bool active = gq < G;  // warp-uniform: idle warps only help load
  const int h = g * G + (active ? gq : 0);
  const int t0 = tiles[2 * blockIdx.y], nq = tiles[2 * blockIdx.y + 1];
  const int32_t* bt = idx.block_tables + idx.token_bt[t0];
  const int64_t q_stride = (int64_t)n_heads * HD;

  // The keys any row of the tile reads: [kv_begin, kv_end).
  int kv_begin = INT_MAX, kv_end = 0;
  for (int r = 0; r < nq; ++r) {
    const int ctx = idx.positions[t0 + r] + 1;
    kv_end = max(kv_end, ctx);
    kv_begin = min(kv_begin, window > 0 ? max(0, ctx - window) : 0);
  }
  // K/V tiles start at multiples of TK whatever the tile's first row, so a row's online softmax
  // meets its keys in the same groups in any tile (a window's start would otherwise move the
  // groups with the tile's rows, and a prompt's bits with its chunking). Keys before a row's
  // window are masked as any other; at most one more K/V tile.
  kv_begin -= kv_begin % TK;

  // This lane's rows of the D fragments: gr and gr + 8 (the tile's token order); padding rows
  // (past nq) mask every key (pos -1).
  const int gr = lane >> 2, tq = lane & 3;
  int pos[2], first[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = gr + 8 * i;
    pos[i] = r < nq ? idx.positions[t0 + r] : -1;
    first[i] = window > 0 ? max(0, pos[i] + 1 - window) : 0;
  }

  // Q as A fragments, 16 head dims per k step: a[0] rows gr, dims 2tq..+1; a[1] row gr + 8;
  // a[2], a[3] the same 8 dims further.
  uint32_t qa[HD / 16][4];
#pragma unroll
  for (int c = 0; c < HD / 16; ++c)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = gr + 8 * (i & 1), d = 16 * c + 2 * tq + 8 * (i >> 1);
      float x0 = 0.0f, x1 = 0.0f;
      if (r < nq) {
        const float* qp = q + (int64_t)(t0 + r) * q_stride + (int64_t)h * HD + d;
        x0 = qp[0];
        x1 = qp[1];
      }
      qa[c][i] = pack_f16x2(x0, x1);
    }

  float o[HD / 8][4];
#pragma unroll
  for (int j = 0; j < HD / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[j][e] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  for (int kt = kv_begin; kt < kv_end; kt += TK) {
    __syncthreads();  // the previous tile is no longer read
    for (int i = tid; i < TK; i += nthreads) {
      const int key = kt + i;
      int64_t slot = -1;
      if (key < kv_end) {
        const int blk = bt[key / kv.block_size];
        if (blk >= 0) slot = (int64_t)blk * kv.block_size + key % kv.block_size;
      }
      sSlot[i] = slot;
    }
    __syncthreads();
    for (int i = tid; i < TK * (HD / 8); i += nthreads) {
      const int kk = i / (HD / 8), d0 = (i % (HD / 8)) * 8;
      const int64_t slot = sSlot[kk];
      float kx[8], vx[8];
      if (slot >= 0) {
        const int64_t head_row = slot * kv.n_kv_heads + g;
        kv_load8(kv_head(kv.k, kv.k_type, head_row, HD), kv.k_type, HD, d0, kx);
        kv_load8(kv_head(kv.v, kv.v_type, head_row, HD), kv.v_type, HD, d0, vx);
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) kx[e] = vx[e] = 0.0f;
      }
      *reinterpret_cast<uint4*>(sK + kk * LDK + d0) =
          make_uint4(pack_f16x2(kx[0], kx[1]), pack_f16x2(kx[2], kx[3]), pack_f16x2(kx[4], kx[5]),
                     pack_f16x2(kx[6], kx[7]));
#pragma unroll
      for (int e = 0; e < 8; ++e) sVt[(d0 + e) * LDV + kk] = f16_bits(vx[e]);
    }
    __syncthreads();
    if (!active) continue;

    // S = Q K^T: per 16 keys, one ldmatrix.x4 gives the B fragments of two 8-key MMAs
    // (matrices: keys 0-7 dims 0-7, keys 0-7 dims 8-15, keys 8-15 dims 0-7, keys 8-15 dims 8-15).
    float s[TK / 8][4];
#pragma unroll
    for (int j = 0; j < TK / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[j][e] = 0.0f;
#pragma unroll
    for (int c = 0; c < HD / 16; ++c)
#pragma unroll
      for (int nj = 0; nj < TK / 16; ++nj) {
        uint32_t b4[4];
        ldmatrix_x4(b4, sK + (nj * 16 + (lane >> 4) * 8 + (lane & 7)) * LDK + c * 16 + ((lane >> 3) & 1) * 8);
        const uint32_t b0[2] = {b4[0], b4[1]}, b1[2] = {b4[2], b4[3]};
        mma_f16_m16n8k16(s[2 * nj], qa[c], b0);
        mma_f16_m16n8k16(s[2 * nj + 1], qa[c], b1);
      }

    // Mask, scale, cap; the tile's row maxima. Element e of n-tile j: row gr + 8 (e / 2), key
    // kt + 8j + 2tq + e % 2.
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < TK / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = e >> 1, key = kt + 8 * j + 2 * tq + (e & 1);
        float x = -INFINITY;
        if (key >= first[i] && key <= pos[i]) {
          x = s[j][e] * scale;
          if (softcap > 0.0f) x = softcap * tanhf(x / softcap);
        }
        s[j][e] = x;
        mx[i] = fmaxf(mx[i], x);
      }
    float corr[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const float m_new = fmaxf(m[i], quad_max(mx[i]));
      const float base = m_new == -INFINITY ? 0.0f : m_new;  // a row with no key yet: p = 0
      corr[i] = expf(m[i] - base);                           // 0 when m is -inf
      m[i] = m_new;
      mx[i] = base;
    }
    float rs[2] = {0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < TK / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float p = round_f16(expf(s[j][e] - mx[e >> 1]));  // 0 for masked keys
        s[j][e] = p;
        rs[e >> 1] += p;
      }
#pragma unroll
    for (int i = 0; i < 2; ++i) l[i] = l[i] * corr[i] + quad_sum(rs[i]);
#pragma unroll
    for (int j = 0; j < HD / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[j][e] *= corr[e >> 1];

    // O += P V: P's A fragment for keys 16kc..16kc+15 is n-tiles 2kc and 2kc + 1 of S; V's B
    // fragments per 16 dims from V^T as K's from K.
#pragma unroll
    for (int kc = 0; kc < TK / 16; ++kc) {
      const uint32_t pa[4] = {pack_f16x2(s[2 * kc][0], s[2 * kc][1]), pack_f16x2(s[2 * kc][2], s[2 * kc][3]),
                              pack_f16x2(s[2 * kc + 1][0], s[2 * kc + 1][1]),
                              pack_f16x2(s[2 * kc + 1][2], s[2 * kc + 1][3])};
#pragma unroll
      for (int dj = 0; dj < HD / 16; ++dj) {
        uint32_t b4[4];
        ldmatrix_x4(b4, sVt + (dj * 16 + (lane >> 4) * 8 + (lane & 7)) * LDV + kc * 16 + ((lane >> 3) & 1) * 8);
        const uint32_t b0[2] = {b4[0], b4[1]}, b1[2] = {b4[2], b4[3]};
        mma_f16_m16n8k16(o[2 * dj], pa, b0);
        mma_f16_m16n8k16(o[2 * dj + 1], pa, b1);
      }
    }
  }

  if (!active) return;
#pragma unroll
  for (int j = 0; j < HD / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = gr + 8 * (e >> 1);
      if (r < nq)
        out[(int64_t)(t0 + r) * q_stride + (int64_t)h * HD + 8 * j + 2 * tq + (e & 1)] = o[j][e] / l[e >> 1];
    }
}

template <int HD>
void launch(const float* q, float* out, int n_heads, float scale, int window, float softcap, const PagedKv& kv,
            const AttnIndex& idx, const int32_t* tiles, int64_t n_tiles, cudaStream_t st) {
  const int G = n_heads / kv.n_kv_heads;
  const int n_sub = (G + Shape<HD>::kMaxWarps - 1) / Shape<HD>::kMaxWarps;
  const int w = (G + n_sub - 1) / n_sub;
  const dim3 grid(static_cast<unsigned>(kv.n_kv_heads * n_sub), static_cast<unsigned>(n_tiles));
  prefill_mma_kernel<HD><<<grid, 32 * w, Shape<HD>::kSmem, st>>>(q, out, n_heads, scale, window, softcap, kv,
                                                                  idx, tiles, w);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

bool attention_prefill_mma(const float* q, float* out, int n_heads, float scale, int window, float softcap,
                           const PagedKv& kv, const AttnIndex& idx, const int32_t* tiles, int64_t n_tiles,
                           void* stream) {
  if (kv.n_kv_heads <= 0 || n_heads % kv.n_kv_heads != 0)
    throw CudaError("attention_prefill_mma: n_heads must be a multiple of n_kv_heads");
  if (n_tiles > 65535) throw CudaError("attention_prefill_mma: more than 65535 tiles in one step");
  cudaStream_t st = as_stream(stream);
  switch (kv.head_dim) {
    case 64: if (n_tiles > 0) launch<64>(q, out, n_heads, scale, window, softcap, kv, idx, tiles, n_tiles, st); return true;
    case 80: if (n_tiles > 0) launch<80>(q, out, n_heads, scale, window, softcap, kv, idx, tiles, n_tiles, st); return true;
    case 96: if (n_tiles > 0) launch<96>(q, out, n_heads, scale, window, softcap, kv, idx, tiles, n_tiles, st); return true;
    case 128: if (n_tiles > 0) launch<128>(q, out, n_heads, scale, window, softcap, kv, idx, tiles, n_tiles, st); return true;
    case 256: if (n_tiles > 0) launch<256>(q, out, n_heads, scale, window, softcap, kv, idx, tiles, n_tiles, st); return true;
    default: return false;
  }
}

}  // namespace pagoda::cuda
