// matmul dispatch: argument checks, activation quantization, splitting outputs over threads,
// and the portable scalar kernels (the fallback level, and the definition of the arithmetic the
// SIMD kernels reproduce; see matmul_internal.h).
#include "kernels/cpu/matmul.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/quants.h"
#include "kernels/cpu/weight_pack.h"

namespace pagoda::cpu {

namespace detail {

void quantize_activation_row(const float* x, int64_t k, int8_t* q, float* d, int16_t* s) {
  for (int64_t b = 0; b < k / 32; ++b) {
    const float* xb = x + 32 * b;
    float amax = 0.f;
    for (int t = 0; t < 32; ++t) amax = std::max(amax, std::fabs(xb[t]));
    const float db = amax / 127.f;
    const float id = db != 0.f ? 1.f / db : 0.f;
    d[b] = db;
    int sum[2] = {0, 0};
    for (int t = 0; t < 32; ++t) {
      const int v = std::clamp(static_cast<int>(std::nearbyint(xb[t] * id)), -127, 127);
      q[32 * b + t] = static_cast<int8_t>(v);
      sum[t / 16] += v;
    }
    s[2 * b] = static_cast<int16_t>(sum[0]);
    s[2 * b + 1] = static_cast<int16_t>(sum[1]);
  }
}

void prepare_decode_terms(GgmlType wtype, const QuantActs& acts, int64_t n) {
  const int64_t nb = acts.k / 32;
  for (int64_t i = 0; i < n; ++i) {
    const int16_t* s = acts.row_s(i);
    if (acts.fsum) {
      float* f = const_cast<float*>(acts.row_fsum(i));
      if (acts.fsum_per_block == 2)
        for (int64_t h = 0; h < 2 * nb; ++h) f[h] = static_cast<float>(s[h]);
      else
        for (int64_t b = 0; b < nb; ++b) f[b] = static_cast<float>(s[2 * b] + s[2 * b + 1]);
    }
    if (acts.corr) {
      int32_t* c = const_cast<int32_t*>(acts.row_corr(i));
      if (acts.corr_per_block == 2)
        for (int64_t h = 0; h < 2 * nb; ++h) c[h] = weight_offset(wtype) * s[h];
      else
        for (int64_t b = 0; b < nb; ++b) c[b] = weight_offset(wtype) * (s[2 * b] + s[2 * b + 1]);
    }
  }
}

// Scalar kernels: one (row, output) pair at a time, straight from the GGML blocks.
void matmul_range_scalar(const MatmulArgs& a, int64_t o_begin, int64_t o_end) {
  const int64_t k = a.k;
  if (is_quantized(a.type)) {
    const int64_t nb = k / 32;
    uint8_t u[32];
    for (int64_t o = o_begin; o < o_end; ++o) {
      const uint8_t* row = a.w + o * a.row_bytes;
      for (int64_t i = 0; i < a.n; ++i) {
        const int8_t* xq = a.acts.row_q(i);
        const float* dx = a.acts.row_d(i);
        const int16_t* xs = a.acts.row_s(i);
        float acc = 0.f;
        for (int64_t b = 0; b < nb; ++b) {
          float s0, s1, m0, m1;
          decode_block32(a.type, row, b, u, s0, s1, m0, m1);
          acc = accumulate_block(a.type, u, s0, s1, m0, m1, xq + 32 * b, dx[b], xs[2 * b], xs[2 * b + 1], acc);
        }
        a.out[i * a.out_features + o] = acc;
      }
    }
    return;
  }
  for (int64_t o = o_begin; o < o_end; ++o) {
    const uint8_t* row = a.w + o * a.row_bytes;
    for (int64_t i = 0; i < a.n; ++i) {
      const float* x = a.x + i * k;
      float acc = 0.f;
      switch (a.type) {
        case GgmlType::F32: {
          const float* w = reinterpret_cast<const float*>(row);
          for (int64_t j = 0; j < k; ++j) acc = std::fma(w[j], x[j], acc);
          break;
        }
        case GgmlType::F16: {
          const uint16_t* w = reinterpret_cast<const uint16_t*>(row);
          for (int64_t j = 0; j < k; ++j) acc = std::fma(fp16_to_fp32(w[j]), x[j], acc);
          break;
        }
        case GgmlType::BF16: {
          const uint16_t* w = reinterpret_cast<const uint16_t*>(row);
          for (int64_t j = 0; j < k; ++j) acc = std::fma(bf16_to_fp32(w[j]), x[j], acc);
          break;
        }
        default: throw std::logic_error("matmul: unexpected type in the scalar float kernel");
      }
      a.out[i * a.out_features + o] = acc;
    }
  }
}

}  // namespace detail

namespace {

struct AlignedFree {
  void operator()(void* p) const { ::operator delete[](p, std::align_val_t(64)); }
};
using AlignedBuffer = std::unique_ptr<uint8_t[], AlignedFree>;
AlignedBuffer aligned_bytes(size_t n) {
  return AlignedBuffer(static_cast<uint8_t*>(::operator new[](std::max<size_t>(n, 64), std::align_val_t(64))));
}

// A buffer run_matmul reuses from call to call, grown when a call needs more.
class ReusedBuffer {
 public:
  uint8_t* get(size_t n) {
    if (n > cap_ || !buf_) {
      buf_ = aligned_bytes(n);
      cap_ = n;
    }
    return buf_.get();
  }

 private:
  AlignedBuffer buf_;
  size_t cap_ = 0;
};

// run_matmul's per-call scratch (quantized activations, activation panels, bf16 rows), one set
// per calling thread (a matmul calls no matmul, so a thread never needs two at once). Allocated
// afresh per call, anything above glibc's mmap threshold (128 KiB: a 16-row decode panel at
// k = 5632 is 180 KiB) came back as new pages each time, and the call paid their page faults
// (Q4_K 2048x5632, 16 rows: 1.77 ms against 0.81 ms with the threshold raised).
struct MatmulScratch {
  ReusedBuffer acts, panel, panel_work, xb;
};
MatmulScratch& thread_scratch() {
  thread_local MatmulScratch s;
  return s;
}

// Outputs per task: the SIMD kernels work on tiles of this many outputs, so splits between
// threads fall on tile boundaries (splits inside a tile would work too: results do not depend
// on the split, only on the pair's arithmetic).
int64_t outputs_per_task(CpuIsa isa, bool quantized) {
  if (!quantized) return 4;
  switch (isa) {
    case CpuIsa::Avx512: return 32;
    case CpuIsa::Avx2: return 8;
    default: return 4;
  }
}

}  // namespace

namespace {
std::atomic<bool>& bf16_dot_setting() {
  static std::atomic<bool> on{[] {
    const char* env = std::getenv("PAGODA_BF16_DOT");
    return env != nullptr && std::string(env) == "1";
  }()};
  return on;
}
}  // namespace

void set_bf16_dot_products(bool on) { bf16_dot_setting().store(on); }
bool bf16_dot_products() { return bf16_dot_setting().load() && cpu_features().avx512_bf16; }

bool matmul_supports(GgmlType t) {
  return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16 || detail::is_quantized(t);
}

void matmul(ThreadPool& pool, GgmlType wtype, const void* w, int64_t out_features, int64_t in_features,
            const float* x, int64_t n, float* out) {
  matmul(pool, default_cpu_isa(), wtype, w, out_features, in_features, x, n, out);
}

namespace {
// One matrix of a run_matmul call and where its outputs go.
struct Target {
  const void* w;
  int64_t out_features;
  float* out;
};

// Every matmul entry point, once the level is known to run here: `isa` is the vector level
// (vector_isa), `tiles` the Amx level's tile kernel (null below Amx), which takes the quantized
// calls of more than kFewRowsMax rows; `packed` says the weights are in the decode layout that
// level `isa` reads (weight_pack.h: Tiles8 for AVX2, Rows16 for AVX-512). The `count` targets
// share x, the type and in_features: x is prepared once and their outputs are one pool job.
void run_matmul(ThreadPool& pool, CpuIsa isa, detail::RangeKernel tiles, GgmlType wtype, const Target* targets,
                int count, int64_t in_features, const float* x, int64_t n, bool packed) {
  if (!matmul_supports(wtype))
    throw std::invalid_argument(std::string("matmul: unsupported weight type ") +
                                (ggml_type_info(static_cast<uint32_t>(wtype)) ? ggml_type_info(wtype).name : "?"));
  const GgmlTypeInfo& info = ggml_type_info(wtype);
  int64_t all_outputs = 0;
  for (int j = 0; j < count; ++j) {
    if (targets[j].out_features < 0) throw std::invalid_argument("matmul: out_features must not be negative");
    all_outputs += targets[j].out_features;
  }
  if (n < 0 || in_features <= 0 || in_features % info.block_size != 0)
    throw std::invalid_argument("matmul: in_features " + std::to_string(in_features) +
                                " must be a positive multiple of " + info.name + "'s block size " +
                                std::to_string(info.block_size));
  if (n == 0 || all_outputs == 0) return;

  detail::MatmulArgs a{wtype, static_cast<const uint8_t*>(targets[0].w), ggml_row_size(wtype, in_features),
                       targets[0].out_features, in_features, x, {}, n, targets[0].out};
  a.packed = packed;
  const bool quantized = detail::is_quantized(wtype);
  const bool on_tiles = tiles != nullptr && quantized && n > detail::kFewRowsMax;
  MatmulScratch& scratch = thread_scratch();
  if (quantized) {
    // Quantize every activation row once; rows are independent, so any split gives the same bytes.
    // The AMX tiles load 16 rows at a time: their quants get zero rows up to a multiple of 16.
    const int64_t q_rows = on_tiles ? detail::amx_padded_rows(n) : n;
    const size_t q_bytes = static_cast<size_t>(q_rows * in_features);
    const size_t d_bytes = static_cast<size_t>(n * (in_features / 32)) * sizeof(float);
    const size_t s_bytes = static_cast<size_t>(n * (in_features / 16)) * sizeof(int16_t);
    auto pad64 = [](size_t bytes) { return (bytes + 63) / 64 * 64; };  // each array cache-line aligned
    const size_t q_pad = pad64(q_bytes), d_pad = pad64(d_bytes), s_pad = pad64(s_bytes);
    // The decode kernels' per-call terms (QuantActs): block sums as floats or scaled ints, each in
    // its own array.
    const bool decode = n <= detail::kFewRowsMax && isa != CpuIsa::Scalar;
    const int fsum_per_block = decode ? detail::min_sums_per_block(wtype) : 0;
    const int corr_per_block = decode && isa == CpuIsa::Avx2 ? detail::corrections_per_block(wtype) : 0;
    const size_t fsum_pad = fsum_per_block * d_pad, corr_pad = corr_per_block * d_pad;  // 4 bytes per term, as d
    uint8_t* next = scratch.acts.get(q_pad + d_pad + s_pad + fsum_pad + corr_pad);
    auto carve = [&next](size_t bytes) {
      uint8_t* p = next;
      next += bytes;
      return p;
    };
    a.acts.q = reinterpret_cast<int8_t*>(carve(q_pad));
    a.acts.d = reinterpret_cast<float*>(carve(d_pad));
    a.acts.s = reinterpret_cast<int16_t*>(carve(s_pad));
    a.acts.k = in_features;
    if (fsum_per_block > 0) {
      a.acts.fsum = reinterpret_cast<float*>(carve(fsum_pad));
      a.acts.fsum_per_block = fsum_per_block;
    }
    if (corr_per_block > 0) {
      a.acts.corr = reinterpret_cast<int32_t*>(carve(corr_pad));
      a.acts.corr_per_block = corr_per_block;
    }
    auto* q = const_cast<int8_t*>(a.acts.q);
    auto* d = const_cast<float*>(a.acts.d);
    auto* s = const_cast<int16_t*>(a.acts.s);
    auto* quantize_row = isa == CpuIsa::Avx512 ? detail::quantize_activation_row_avx512
                         : isa == CpuIsa::Avx2  ? detail::quantize_activation_row_avx2
                                                : detail::quantize_activation_row;
    auto quantize_rows = [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i)
        quantize_row(x + i * in_features, in_features, q + i * in_features, d + i * (in_features / 32),
                     s + i * (in_features / 16));
    };
    // The AVX-512 prefill kernel reads only the activation panels: each group of rows is
    // quantized straight into its panel (quantize_activation_panels_avx512), one pass over the
    // rows instead of two with a pool barrier between them.
    const bool panels = isa == CpuIsa::Avx512 && n > detail::kFewRowsMax && !on_tiles;
    if (!panels) {
      // A few rows take a microsecond or two: not worth waking the other threads for.
      if (n * in_features <= 16384) quantize_rows(0, n, 0);
      else pool.parallel_for(n, quantize_rows);
    }
    std::memset(q + n * in_features, 0, static_cast<size_t>((q_rows - n) * in_features));
    if (decode) detail::prepare_decode_terms(wtype, a.acts, n);
    if (isa == CpuIsa::Avx512 && packed && decode) {
      uint8_t* panel = scratch.panel.get(static_cast<size_t>(detail::rows16_decode_panel_bytes(n, in_features)));
      detail::pack_rows16_decode_panel(wtype, a.acts, n, panel);
      a.decode_panel = panel;
    }
    if (panels) {
      uint8_t* panel = scratch.panel.get(static_cast<size_t>(detail::activation_panel_bytes(n, in_features)));
      a.panel = panel;
      const int64_t groups = (n + detail::kPanelRows - 1) / detail::kPanelRows;
      const size_t work_bytes = (detail::panel_group_bytes(in_features) + 63) / 64 * 64;
      uint8_t* work = scratch.panel_work.get(work_bytes * static_cast<size_t>(pool.size()));
      pool.parallel_for(groups, [&](int64_t b, int64_t e, int thread) {
        detail::quantize_activation_panels_avx512(wtype, x, in_features, n, b, e, panel,
                                                  work + work_bytes * static_cast<size_t>(thread));
      });
    }
  }

  if (wtype == GgmlType::BF16 && isa == CpuIsa::Avx512 && bf16_dot_products()) {
    // vdpbf16ps path: x rounded to bf16 once per call (rows padded to 32 elements).
    a.xb_k = (in_features + 31) / 32 * 32;
    auto* xb = reinterpret_cast<uint16_t*>(scratch.xb.get(static_cast<size_t>(n * a.xb_k) * sizeof(uint16_t)));
    a.xb = xb;
    auto convert = [&](int64_t b, int64_t e, int) {
      detail::convert_rows_bf16_avx512(x + b * in_features, in_features, a.xb_k, e - b, xb + b * a.xb_k);
    };
    if (n * in_features <= 16384) convert(0, n, 0);
    else pool.parallel_for(n, convert);
  }

  const int64_t unit = outputs_per_task(isa, quantized);
  // The targets' tasks in a row: target j's are [first[j], first[j + 1]).
  std::vector<int64_t> first(static_cast<size_t>(count) + 1, 0);
  for (int j = 0; j < count; ++j) first[j + 1] = first[j] + (targets[j].out_features + unit - 1) / unit;
  const int64_t tasks = first[static_cast<size_t>(count)];
  // Outputs go to the threads in chunks, each thread running its own share in order and then
  // taking chunks left in the others' (ThreadPool::parallel_for_dynamic; results do not depend
  // on the split): with a static half each, the call waited for the slower thread, and on a
  // shared host for a worker that had not even started. Decode-sized calls stream about 256 KiB
  // of weights per chunk (64 KiB measured the same; 1 MiB left the threads finishing apart);
  // prefill chunks are a quarter of a thread's share (each chunk call sets up its tile and
  // per-row terms again, which is cheap next to that much work). A pool of one thread takes
  // everything in one call.
  const int64_t per_thread = (tasks + pool.size() - 1) / pool.size();
  const int64_t decode_chunk = (int64_t{256} << 10) / static_cast<int64_t>(unit * a.row_bytes);
  const int64_t chunk = pool.size() == 1            ? tasks
                        : n <= detail::kFewRowsMax ? std::clamp<int64_t>(decode_chunk, 1, per_thread)
                                                   : std::max<int64_t>(1, (per_thread + 3) / 4);
  pool.parallel_for_dynamic(tasks, chunk, [&](int64_t b, int64_t e, int) {
    // A chunk may span targets: each piece runs against its own matrix.
    for (int j = static_cast<int>(std::upper_bound(first.begin(), first.end(), b) - first.begin()) - 1; b < e; ++j) {
      const int64_t piece_end = std::min(e, first[static_cast<size_t>(j) + 1]);
      if (piece_end <= b) continue;  // a target without outputs
      detail::MatmulArgs t = a;
      t.w = static_cast<const uint8_t*>(targets[j].w);
      t.out_features = targets[j].out_features;
      t.out = targets[j].out;
      const int64_t o0 = (b - first[static_cast<size_t>(j)]) * unit;
      const int64_t o1 = std::min(t.out_features, (piece_end - first[static_cast<size_t>(j)]) * unit);
      b = piece_end;
      if (on_tiles) {
        tiles(t, o0, o1);
        continue;
      }
      switch (isa) {
        case CpuIsa::Avx512: detail::matmul_range_avx512(t, o0, o1); break;
        case CpuIsa::Avx2: detail::matmul_range_avx2(t, o0, o1); break;
        default: detail::matmul_range_scalar(t, o0, o1); break;
      }
    }
  });
}

// Throws unless this CPU runs level `isa`.
void require_level(CpuIsa isa, const char* what) {
  if (!cpu_supports(isa))
    throw std::invalid_argument(std::string(what) + ": this CPU cannot run " + cpu_isa_name(isa) + " kernels");
}

detail::RangeKernel tile_kernel(CpuIsa isa) { return isa == CpuIsa::Amx ? detail::matmul_range_amx : nullptr; }

}  // namespace

void matmul(ThreadPool& pool, CpuIsa isa, GgmlType wtype, const void* w, int64_t out_features,
            int64_t in_features, const float* x, int64_t n, float* out) {
  require_level(isa, "matmul");
  const Target t{w, out_features, out};
  run_matmul(pool, vector_isa(isa), tile_kernel(isa), wtype, &t, 1, in_features, x, n, false);
}

void matmul(ThreadPool& pool, const PackedWeight& w, const float* x, int64_t n, float* out) {
  matmul(pool, default_cpu_isa(), w, x, n, out);
}

void matmul(ThreadPool& pool, CpuIsa isa, const PackedWeight& w, const float* x, int64_t n, float* out) {
  const PackedWeight* one = &w;
  matmul_same_x(pool, isa, &one, &out, 1, x, n);
}

void matmul_same_x(ThreadPool& pool, CpuIsa isa, GgmlType wtype, const SameXMatrix* m, int count, int64_t in_features,
                   const float* x, int64_t n) {
  require_level(isa, "matmul");
  std::vector<Target> t;
  for (int j = 0; j < count; ++j) t.push_back({m[j].w, m[j].out_features, m[j].out});
  run_matmul(pool, vector_isa(isa), tile_kernel(isa), wtype, t.data(), count, in_features, x, n, false);
}

void matmul_same_x(ThreadPool& pool, CpuIsa isa, const PackedWeight* const* w, float* const* out, int count,
                   const float* x, int64_t n) {
  require_level(isa, "matmul");
  if (count <= 0) return;
  const bool use_packed = vector_isa(isa) == decode_layout_isa(w[0]->layout);
  std::vector<Target> t;
  for (int j = 0; j < count; ++j) {
    if (w[j]->type != w[0]->type || w[j]->cols != w[0]->cols || w[j]->layout != w[0]->layout)
      throw std::invalid_argument("matmul_same_x: the matrices differ in type, width or layout");
    t.push_back({use_packed ? w[j]->bytes.get() : w[j]->source, w[j]->rows, out[j]});
  }
  run_matmul(pool, vector_isa(isa), tile_kernel(isa), w[0]->type, t.data(), count, w[0]->cols, x, n, use_packed);
}

void matmul_decode_layout(ThreadPool& pool, DecodeLayout layout, GgmlType wtype, const void* w, int64_t out_features,
                          int64_t in_features, const float* x, int64_t n, float* out) {
  // The default level where it reads the layout (Amx reads Rows16 as Avx512 does), else the
  // layout's own level.
  const CpuIsa isa = vector_isa(default_cpu_isa()) == decode_layout_isa(layout) ? default_cpu_isa() : decode_layout_isa(layout);
  if (!cpu_supports(isa))
    throw std::invalid_argument(std::string("matmul_decode_layout: the layout needs the ") + cpu_isa_name(isa) + " kernels");
  const Target t{w, out_features, out};
  run_matmul(pool, vector_isa(isa), tile_kernel(isa), wtype, &t, 1, in_features, x, n, true);
}

namespace detail {
void matmul_amx_level(ThreadPool& pool, RangeKernel tiles, GgmlType wtype, const void* w, bool packed,
                      int64_t out_features, int64_t in_features, const float* x, int64_t n, float* out) {
  require_level(CpuIsa::Avx512, "matmul_amx_level");
  const Target t{w, out_features, out};
  run_matmul(pool, CpuIsa::Avx512, tiles, wtype, &t, 1, in_features, x, n, packed);
}
}  // namespace detail

}  // namespace pagoda::cpu
