// AVX2 + FMA + F16C matmul kernels: the level for x86 CPUs without AVX-512 VNNI. Compiled with
// AVX2 flags (see CMakeLists.txt), only called when cpu_supports(CpuIsa::Avx2).
//
// Same scheme as matmul_avx512.cpp with 8 lanes: quantized weights are decoded per K chunk into
// tiles of 8 outputs interleaved by 4-byte groups (one ymm = 4 bytes of 8 outputs), multiplied
// by broadcast activation dwords with vpmaddubsw + vpmaddwd, which yields exact per-lane integer
// sums (no 16-bit saturation: see dot4), then the float epilogue of accumulate_block.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <new>

#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/matmul_unpack_x86.h"

namespace pagoda::cpu::detail {

namespace {

constexpr int kLanes = 8;   // outputs per tile: one ymm
constexpr int kChunk = 16;  // 32-element blocks per K chunk; a multiple of 8 (K-quant super-blocks)
constexpr int kRows = 4;    // activation rows per micro-kernel call

struct alignas(64) Tile {
  uint8_t qs[kChunk][8][kLanes][4];  // [block][dword group g][lane][byte]
  float s0[kChunk][kLanes], s1[kChunk][kLanes], m[kChunk][kLanes], m1[kChunk][kLanes];
  uint8_t rows[kLanes][kChunk * 32];
};

struct TileDeleter {
  void operator()(Tile* t) const { ::operator delete(t, std::align_val_t(64)); }
};

// 8x8 transpose of dwords: rows r (32 bytes at src + r * stride) -> dst + 32 * g = dword g of
// rows 0..7.
inline void interleave8(const uint8_t* src, size_t stride, uint8_t* dst) {
  __m256i r[8], t[8], u[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i * stride));
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int h = 0; h < 2; ++h) {
    u[4 * h + 0] = _mm256_unpacklo_epi64(t[4 * h + 0], t[4 * h + 2]);
    u[4 * h + 1] = _mm256_unpackhi_epi64(t[4 * h + 0], t[4 * h + 2]);
    u[4 * h + 2] = _mm256_unpacklo_epi64(t[4 * h + 1], t[4 * h + 3]);
    u[4 * h + 3] = _mm256_unpackhi_epi64(t[4 * h + 1], t[4 * h + 3]);
  }
  // u[g] (g < 4) = [rows 0-3: dword g | rows 0-3: dword g+4]; u[g + 4] the same for rows 4-7.
  for (int g = 0; g < 4; ++g) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(dst + 32 * g), _mm256_permute2x128_si256(u[g], u[g + 4], 0x20));
    _mm256_store_si256(reinterpret_cast<__m256i*>(dst + 32 * (g + 4)), _mm256_permute2x128_si256(u[g], u[g + 4], 0x31));
  }
}

template <GgmlType T>
void fill_tile(Tile& tile, const MatmulArgs& a, int64_t o0, int valid, int64_t b0, int nblk) {
  for (int l = 0; l < kLanes; ++l) {
    if (l < valid) {
      const uint8_t* row = a.w + (o0 + l) * a.row_bytes;
      for (int b = 0; b < nblk; ++b) {
        if constexpr (generic_unpack(T)) {
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(tile.rows[l] + 32 * b), unpack_block<T>(row, b0 + b));
          const BlockScales bs = block_scales(T, row, b0 + b);
          tile.s0[b][l] = bs.s0, tile.s1[b][l] = bs.s1, tile.m[b][l] = bs.m0, tile.m1[b][l] = bs.m1;
        } else {
          decode_block32(T, row, b0 + b, tile.rows[l] + 32 * b, tile.s0[b][l], tile.s1[b][l], tile.m[b][l],
                         tile.m1[b][l]);
        }
      }
    } else {
      std::memset(tile.rows[l], 0, static_cast<size_t>(nblk) * 32);
      for (int b = 0; b < nblk; ++b) tile.s0[b][l] = tile.s1[b][l] = tile.m[b][l] = tile.m1[b][l] = 0.f;
    }
  }
  for (int b = 0; b < nblk; ++b) interleave8(tile.rows[0] + 32 * b, sizeof(tile.rows[0]), &tile.qs[b][0][0][0]);
}

// Per lane: sum over 4 bytes of w (u8) times x (s8), as int32, exactly.
// vpmaddubsw saturates pairs at 16 bits, which u8 values up to 63 (Q4_0, Q4_K, Q6_K, the 5-, 3-
// and 2-bit types) can never reach (2 * 63 * 127 < 32767). Q8_0's u = q + 128 could (2 * 255 *
// 127), and so could IQ4's level + 128, so for those signed_weights types the product is formed
// as |q| * (x with q's sign), which is at most 2 * 128 * 127; the result is then sum(q * x)
// rather than sum(u * x) and the seed skips the -128 * sum(x) correction.
template <GgmlType T>
struct Dot4 {
  __m256i w;   // operand for vpmaddubsw
  __m256i sgn; // Q8_0: signed weights, whose signs go onto x
  explicit Dot4(__m256i u) {
    if constexpr (signed_weights(T)) {
      sgn = _mm256_xor_si256(u, _mm256_set1_epi8(static_cast<char>(0x80)));
      w = _mm256_abs_epi8(sgn);
    } else {
      w = u;
      sgn = u;
    }
  }
  __m256i operator()(__m256i x) const {
    const __m256i ones = _mm256_set1_epi16(1);
    if constexpr (signed_weights(T)) x = _mm256_sign_epi8(x, sgn);
    return _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), ones);
  }
};

// R activation rows x the tile's 8 outputs over nblk blocks (see the AVX-512 tile_kernel).
template <GgmlType T, int R>
void tile_kernel(const Tile& tile, int nblk, int64_t b0, const QuantActs& acts, int64_t i0, float* out, int64_t ldo,
                 int valid, bool first) {
  __m256 acc[R];
  for (int r = 0; r < R; ++r) {
    if (first || valid < kLanes) {
      alignas(32) float tmp[kLanes] = {};
      if (!first) std::memcpy(tmp, out + (i0 + r) * ldo, sizeof(float) * valid);
      acc[r] = _mm256_load_ps(tmp);
    } else {
      acc[r] = _mm256_loadu_ps(out + (i0 + r) * ldo);
    }
  }
  // Signed-weight products come out as sum(q * x) already (see Dot4): no offset to correct.
  constexpr int off = signed_weights(T) ? 0 : weight_offset(T);
  for (int b = 0; b < nblk; ++b) {
    const int64_t bb = b0 + b;
    __m256i ia[R];
    auto dot_groups = [&](int g0, int g1) {
      for (int g = g0; g < g1; ++g) {
        const Dot4<T> dot(_mm256_load_si256(reinterpret_cast<const __m256i*>(&tile.qs[b][g][0][0])));
        for (int r = 0; r < R; ++r) {
          int32_t x4;
          std::memcpy(&x4, acts.row_q(i0 + r) + 32 * bb + 4 * g, 4);
          ia[r] = _mm256_add_epi32(ia[r], dot(_mm256_set1_epi32(x4)));
        }
      }
    };
    // min term: acc -= xsum * (m * dx), after the scale terms (accumulate_block's order).
    auto sub_min = [&](const float* m, int h0, int h1) {
      const __m256 mn = _mm256_load_ps(m);
      for (int r = 0; r < R; ++r) {
        const int16_t* xs = acts.row_s(i0 + r) + 2 * bb;
        const __m256 d = _mm256_set1_ps(acts.row_d(i0 + r)[bb]);
        int xsum = 0;
        for (int h = h0; h < h1; ++h) xsum += xs[h];
        acc[r] = _mm256_fnmadd_ps(_mm256_set1_ps(static_cast<float>(xsum)), _mm256_mul_ps(mn, d), acc[r]);
      }
    };
    if constexpr (half_scales(T)) {
      for (int h = 0; h < 2; ++h) {
        for (int r = 0; r < R; ++r) ia[r] = _mm256_set1_epi32(-off * acts.row_s(i0 + r)[2 * bb + h]);
        dot_groups(4 * h, 4 * h + 4);
        const __m256 s = _mm256_load_ps(h == 0 ? tile.s0[b] : tile.s1[b]);
        for (int r = 0; r < R; ++r) {
          const __m256 d = _mm256_set1_ps(acts.row_d(i0 + r)[bb]);
          acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ia[r]), _mm256_mul_ps(s, d), acc[r]);
        }
      }
      if constexpr (half_mins(T)) {
        sub_min(tile.m[b], 0, 1);
        sub_min(tile.m1[b], 1, 2);
      }
    } else {
      for (int r = 0; r < R; ++r) {
        const int16_t* xs = acts.row_s(i0 + r) + 2 * bb;
        ia[r] = _mm256_set1_epi32(-off * (xs[0] + xs[1]));
      }
      dot_groups(0, 8);
      const __m256 s = _mm256_load_ps(tile.s0[b]);
      for (int r = 0; r < R; ++r) {
        const __m256 d = _mm256_set1_ps(acts.row_d(i0 + r)[bb]);
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ia[r]), _mm256_mul_ps(s, d), acc[r]);
      }
      if constexpr (block_min(T)) sub_min(tile.m[b], 0, 2);
    }
  }
  for (int r = 0; r < R; ++r) {
    if (valid == kLanes) {
      _mm256_storeu_ps(out + (i0 + r) * ldo, acc[r]);
    } else {
      alignas(32) float tmp[kLanes];
      _mm256_store_ps(tmp, acc[r]);
      std::memcpy(out + (i0 + r) * ldo, tmp, sizeof(float) * valid);
    }
  }
}

template <GgmlType T>
void quant_range(const MatmulArgs& a, int64_t o_begin, int64_t o_end) {
  // Decode-sized batches skip the tile (see matmul_rows_avx2.cpp); the results are identical.
  if (a.n <= kFewRowsMax) return matmul_few_rows_avx2(a, o_begin, o_end);
  std::unique_ptr<Tile, TileDeleter> tile(static_cast<Tile*>(::operator new(sizeof(Tile), std::align_val_t(64))));
  const int64_t nb = a.k / 32;
  for (int64_t o0 = o_begin; o0 < o_end; o0 += kLanes) {
    const int valid = static_cast<int>(std::min<int64_t>(kLanes, o_end - o0));
    float* out = a.out + o0;
    for (int64_t b0 = 0; b0 < nb; b0 += kChunk) {
      const int nblk = static_cast<int>(std::min<int64_t>(kChunk, nb - b0));
      fill_tile<T>(*tile, a, o0, valid, b0, nblk);
      const bool first = b0 == 0;
      int64_t i = 0;
      for (; i + kRows <= a.n; i += kRows) tile_kernel<T, kRows>(*tile, nblk, b0, a.acts, i, out, a.out_features, valid, first);
      switch (a.n - i) {
        case 3: tile_kernel<T, 3>(*tile, nblk, b0, a.acts, i, out, a.out_features, valid, first); break;
        case 2: tile_kernel<T, 2>(*tile, nblk, b0, a.acts, i, out, a.out_features, valid, first); break;
        case 1: tile_kernel<T, 1>(*tile, nblk, b0, a.acts, i, out, a.out_features, valid, first); break;
        default: break;
      }
    }
  }
}

// ---- Float weights: one ymm accumulator per (row, output) pair -----------------------------

template <GgmlType T>
inline __m256 load_w8(const uint8_t* p) {
  if constexpr (T == GgmlType::F32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
  } else {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    if constexpr (T == GgmlType::F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
}

// Fixed-order horizontal sum of 8 floats.
inline float hsum8(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

template <GgmlType T, int R, int C>
void float_kernel(const MatmulArgs& a, int64_t i0, int64_t o0) {
  constexpr size_t esz = T == GgmlType::F32 ? 4 : 2;
  __m256 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  const uint8_t* w[C];
  for (int c = 0; c < C; ++c) w[c] = a.w + (o0 + c) * a.row_bytes;
  const float* x[R];
  for (int r = 0; r < R; ++r) x[r] = a.x + (i0 + r) * a.k;
  int64_t k = 0;
  for (; k + 8 <= a.k; k += 8) {
    __m256 wv[C];
    for (int c = 0; c < C; ++c) wv[c] = load_w8<T>(w[c] + k * esz);
    for (int r = 0; r < R; ++r) {
      const __m256 xv = _mm256_loadu_ps(x[r] + k);
      for (int c = 0; c < C; ++c) acc[r][c] = _mm256_fmadd_ps(wv[c], xv, acc[r][c]);
    }
  }
  if (k < a.k) {  // partial last chunk: zero-padded copies, one more fma per pair
    const size_t rem = static_cast<size_t>(a.k - k);
    __m256 wv[C];
    for (int c = 0; c < C; ++c) {
      alignas(32) uint8_t buf[32] = {};
      std::memcpy(buf, w[c] + k * esz, rem * esz);
      wv[c] = load_w8<T>(buf);
    }
    for (int r = 0; r < R; ++r) {
      alignas(32) float xb[8] = {};
      std::memcpy(xb, x[r] + k, rem * 4);
      const __m256 xv = _mm256_load_ps(xb);
      for (int c = 0; c < C; ++c) acc[r][c] = _mm256_fmadd_ps(wv[c], xv, acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) a.out[(i0 + r) * a.out_features + o0 + c] = hsum8(acc[r][c]);
}

template <GgmlType T, int C>
void float_rows(const MatmulArgs& a, int64_t i0, int64_t i1, int64_t o0) {
  int64_t i = i0;
  for (; i + 2 <= i1; i += 2) float_kernel<T, 2, C>(a, i, o0);
  if (i < i1) float_kernel<T, 1, C>(a, i, o0);
}

template <GgmlType T>
void float_range(const MatmulArgs& a, int64_t o_begin, int64_t o_end) {
  const int64_t chunk = std::max<int64_t>(4, (512 * 1024 / (a.k * 4)) / 4 * 4);  // rows whose x fits in L2
  for (int64_t i0 = 0; i0 < a.n; i0 += chunk) {
    const int64_t i1 = std::min(a.n, i0 + chunk);
    int64_t o = o_begin;
    for (; o + 4 <= o_end; o += 4) float_rows<T, 4>(a, i0, i1, o);
    for (; o < o_end; ++o) float_rows<T, 1>(a, i0, i1, o);
  }
}

}  // namespace

// quantize_activation_row with AVX2, bit-identical: the max is exact in any order, and
// vcvtps2dq rounds to nearest-even as nearbyint does under the default rounding mode.
void quantize_activation_row_avx2(const float* x, int64_t k, int8_t* q, float* d, int16_t* s) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256i lim = _mm256_set1_epi32(127), neg = _mm256_set1_epi32(-127);
  auto hsum = [](__m256i v) {
    __m128i t = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm_cvtsi128_si32(_mm_add_epi32(t, _mm_shuffle_epi32(t, _MM_SHUFFLE(2, 3, 0, 1))));
  };
  for (int64_t b = 0; b < k / 32; ++b) {
    __m256 v[4];
    __m256 m = _mm256_setzero_ps();
    for (int i = 0; i < 4; ++i) {
      v[i] = _mm256_loadu_ps(x + 32 * b + 8 * i);
      m = _mm256_max_ps(m, _mm256_and_ps(v[i], abs_mask));
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float db = _mm_cvtss_f32(m4) / 127.f;
    const __m256 id = _mm256_set1_ps(db != 0.f ? 1.f / db : 0.f);
    d[b] = db;
    __m256i qi[4];
    for (int i = 0; i < 4; ++i) qi[i] = _mm256_max_epi32(_mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(v[i], id)), lim), neg);
    // Packing works per 128-bit lane: dword i of the result holds 4 values of qi[i % 4], lane
    // i / 4; the permute restores element order.
    const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(qi[0], qi[1]), _mm256_packs_epi32(qi[2], qi[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 32 * b),
                        _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    s[2 * b] = static_cast<int16_t>(hsum(_mm256_add_epi32(qi[0], qi[1])));
    s[2 * b + 1] = static_cast<int16_t>(hsum(_mm256_add_epi32(qi[2], qi[3])));
  }
}

void matmul_range_avx2(const MatmulArgs& a, int64_t o_begin, int64_t o_end) {
  switch (a.type) {
#define PAGODA_CASE(T) \
  case GgmlType::T: return quant_range<GgmlType::T>(a, o_begin, o_end);
    PAGODA_INT8_WEIGHT_TYPES(PAGODA_CASE)
#undef PAGODA_CASE
    case GgmlType::F32: return float_range<GgmlType::F32>(a, o_begin, o_end);
    case GgmlType::F16: return float_range<GgmlType::F16>(a, o_begin, o_end);
    case GgmlType::BF16: return float_range<GgmlType::BF16>(a, o_begin, o_end);
    default: return;
  }
}

}  // namespace pagoda::cpu::detail
