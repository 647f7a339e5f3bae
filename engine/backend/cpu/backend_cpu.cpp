#include "engine/backend/cpu/backend_cpu.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quants.h"
#include "kernels/cpu/thread_pool.h"

namespace pagoda {
namespace {

// Below this many element-operations an op runs on the calling thread: waking the pool costs
// more than the work (decode steps are full of such small ops).
constexpr int64_t kMinParallelWork = 32 * 1024;
// The same threshold for attention, in multiply-adds (a few microseconds on one AVX-512 core).
constexpr int64_t kMinParallelAttentionFmas = 1 << 17;

float* f32(const Tensor& t) { return static_cast<float*>(t.data); }

void require(bool ok, const char* what) {
  if (!ok) throw std::invalid_argument(std::string("CpuBackend: ") + what);
}

// The ops trust their tensors' shapes; these checks keep a caller's mistake from becoming a
// buffer overrun.
void require_rows(const Tensor& t, int64_t n, const char* what) {
  require(n >= 0 && n <= t.rows && t.data, what);
}

// The kernel parameters of `rope`, after checking its frequency factors (if any) cover every
// rotated pair as F32.
cpu::RopeParams rope_params(const RopeConfig& rope) {
  const Tensor& ff = rope.freq_factors;
  require(ff.data == nullptr || (ff.type == GgmlType::F32 && ff.rows == 1 && ff.cols == rope.head_dim / 2),
          "rope: freq_factors must be one F32 row of head_dim/2 values");
  return cpu::RopeParams{rope.head_dim, rope.freq_base, rope.freq_scale, rope.neox,
                         static_cast<const float*>(ff.data)};
}

// The cache's element types must be ones the kernels store (kernels/kv_layout.h) for this head.
void require_kv_types(const KvCacheConfig& cfg) {
  const std::string problem = kv_types_problem(cfg);
  require(problem.empty(), problem.c_str());
}

// Maps a weight's pages now, at load time, so that the first forward pass does not pay a page
// fault per 4 KiB of a memory-mapped model (hundreds of thousands for a 1 GB model). Best
// effort: older kernels or memory that is not a mapping simply skip it.
void prefault(const void* p, size_t bytes) {
#ifdef MADV_POPULATE_READ
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p) / page * page;
  const uintptr_t end = reinterpret_cast<uintptr_t>(p) + bytes;
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_READ);
#else
  (void)p;
  (void)bytes;
#endif
}

// Unmaps the pages of [p, p + bytes) from this process when the range lies in one read-only
// private file mapping (the GGUF file): they stay in the page cache and come back on the next
// touch, so a matrix whose decode-layout copy serves all its matmuls stops taking its size twice
// in the resident set. Anything else (heap memory, as tests pass; a writable mapping) is left
// alone, since MADV_DONTNEED would zero it.
void release_file_pages(const void* p, size_t bytes) {
#ifdef __linux__
  const auto begin = reinterpret_cast<uintptr_t>(p), end = begin + bytes;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    unsigned long lo = 0, hi = 0, offset = 0, inode = 0;
    unsigned major = 0, minor = 0;
    char perms[5] = {};
    if (std::sscanf(line.c_str(), "%lx-%lx %4s %lx %x:%x %lu", &lo, &hi, perms, &offset, &major, &minor, &inode) != 7)
      continue;
    if (begin < lo || begin >= hi) continue;
    if (end > hi || perms[1] != '-' || perms[3] != 'p' || inode == 0) return;
    const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    const uintptr_t first = (begin + page - 1) / page * page, last = end / page * page;
    if (last > first) madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
    return;
  }
#else
  (void)p;
  (void)bytes;
#endif
}

// MemAvailable of /proc/meminfo in bytes; 0 when it cannot be read.
size_t available_memory() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  size_t kib = 0;
  while (in >> key >> kib) {
    if (key == "MemAvailable:") return kib * 1024;
    in.ignore(256, '\n');
  }
  return 0;
}

}  // namespace

// allocate() keeps calloc's own pointer just below the aligned one it hands out.
void CpuBackend::AlignedFree::operator()(void* p) const {
  if (p != nullptr) std::free(static_cast<void**>(p)[-1]);
}

DecodePack parse_decode_pack(const std::string& value, const std::string& flag) {
  if (value == "off") return DecodePack::Off;
  if (value == "on") return DecodePack::On;
  if (value == "auto") return DecodePack::Auto;
  throw std::invalid_argument(flag + " must be auto, on or off, got '" + value + "'");
}

CpuBackend::CpuBackend(int n_threads, DecodePack decode_pack) : decode_pack_(decode_pack) {
  if (decode_pack_ == DecodePack::Auto) pack_budget_ = available_memory() / 2;
  if (n_threads <= 0) n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  pool_ = std::make_unique<cpu::ThreadPool>(n_threads);
  scratch_.resize(static_cast<size_t>(n_threads));
}

CpuBackend::~CpuBackend() = default;

std::string CpuBackend::name() const { return "cpu"; }

int CpuBackend::n_threads() const { return static_cast<int>(scratch_.size()); }

template <class Fn>
void CpuBackend::for_rows(int64_t n, int64_t cost_per_row, Fn&& fn) {
  if (n <= 0) return;
  if (n == 1 || n * cost_per_row < kMinParallelWork || n_threads() == 1) {
    fn(int64_t{0}, n, 0);
    return;
  }
  pool_->parallel_for(n, [&](int64_t begin, int64_t end, int thread) { fn(begin, end, thread); });
}

// calloc, not aligned_alloc + memset: a large block comes straight from fresh zero pages, which
// the kernel then maps on first touch. A memset touched them all at start-up instead: the KV
// pools (gigabytes by default) took 9.5 of a 12.8 s start on a 2-vCPU VM whose page clearing
// ran at ~0.2 GB/s; now each block's pages are mapped when a sequence first writes it, and the
// resident size follows the cache's use. calloc's pointer (16-byte aligned) sits just below the
// 64-byte aligned one returned, for AlignedFree.
void* CpuBackend::allocate(size_t bytes) {
  const size_t rounded = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
  void* raw = std::calloc(rounded + 64, 1);
  if (!raw) throw std::bad_alloc();
  const uintptr_t aligned = (reinterpret_cast<uintptr_t>(raw) + 64) / 64 * 64;
  static_cast<void**>(reinterpret_cast<void*>(aligned))[-1] = raw;
  return reinterpret_cast<void*>(aligned);
}

Tensor CpuBackend::upload_weight(const void* host_data, GgmlType type, int64_t rows, int64_t cols) {
  // Zero-copy: the mapped file outlives the backend; ops never write to weights.
  const size_t bytes = ggml_row_size(type, cols) * static_cast<size_t>(rows);
  prefault(host_data, bytes);
  const bool allowed = decode_pack_ == DecodePack::On || (decode_pack_ == DecodePack::Auto && bytes <= pack_budget_);
  const std::optional<cpu::DecodeLayout> layout = cpu::decode_layout_for(cpu::default_cpu_isa(), type, rows, cols);
  if (allowed && layout) {
    packed_.insert_or_assign(host_data, cpu::pack_for_decode(type, host_data, rows, cols, pool_.get(), *layout));
    if (decode_pack_ == DecodePack::Auto) pack_budget_ -= bytes;
    // Every matmul of this matrix now reads the copy (decode and prefill alike, its experts
    // too where they are whole groups of 8); only embedding lookups of a tied matrix may still
    // touch the GGML pages, and fault back the few they read.
    release_file_pages(host_data, bytes);
  }
  return Tensor{const_cast<void*>(host_data), type, rows, cols};
}

const cpu::PackedWeight* CpuBackend::packed_copy(const Tensor& w) const {
  const auto it = packed_.find(w.data);
  const bool same = it != packed_.end() && it->second.type == w.type && it->second.rows == w.rows && it->second.cols == w.cols;
  return same ? &it->second : nullptr;
}

Tensor CpuBackend::alloc(int64_t rows, int64_t cols) {
  require(rows > 0 && cols > 0, "alloc: rows and cols must be positive");
  void* p = allocate(static_cast<size_t>(rows * cols) * sizeof(float));
  buffers_.emplace_back(static_cast<uint8_t*>(p));
  return Tensor{p, GgmlType::F32, rows, cols};
}

size_t CpuBackend::kv_block_bytes(const KvCacheConfig& cfg) const {
  require_kv_types(cfg);
  return cfg.block_bytes();
}

void CpuBackend::init_kv_cache(const KvCacheConfig& cfg) {
  require(cfg.n_layers > 0 && cfg.num_blocks > 0 && cfg.block_size > 0 && cfg.n_kv_heads > 0 &&
              cfg.head_dim > 0,
          "init_kv_cache: every size must be positive");
  require_kv_types(cfg);
  kv_cfg_ = cfg;
  k_pools_.clear();
  v_pools_.clear();
  const size_t k_layer = static_cast<size_t>(cfg.k_block_bytes()) * cfg.num_blocks;
  const size_t v_layer = static_cast<size_t>(cfg.v_block_bytes()) * cfg.num_blocks;
  for (int l = 0; l < cfg.n_layers; ++l) {
    k_pools_.emplace_back(static_cast<uint8_t*>(allocate(k_layer)));
    v_pools_.emplace_back(static_cast<uint8_t*>(allocate(v_layer)));
  }
}

cpu::KvPool CpuBackend::pool(const std::vector<Buffer>& pools, GgmlType type, int layer) const {
  require(layer >= 0 && layer < static_cast<int>(pools.size()), "layer out of range (is the KV cache initialised?)");
  cpu::KvPool p;
  p.data = pools[static_cast<size_t>(layer)].get();
  p.type = type;
  p.block_size = kv_cfg_.block_size;
  p.n_kv_heads = kv_cfg_.n_kv_heads;
  p.head_dim = kv_cfg_.head_dim;
  p.num_blocks = kv_cfg_.num_blocks;
  return p;
}

void CpuBackend::begin_step(const StepPlan& plan) {
  validate_step_plan(plan, kv_cfg_.num_blocks, kv_cfg_.block_size, "CpuBackend");
  const size_t n = plan.tokens.size();
  int max_ctx = 0;
  for (int32_t p : plan.positions) max_ctx = std::max(max_ctx, p + 1);
  plan_ = plan;
  max_ctx_ = max_ctx;
  // Attention groups: runs of up to kAttnGroup tokens of one sequence at consecutive positions
  // (tree rows: each the child of the one before).
  const auto tree_row = [&](size_t t) { return plan.has_tree() && plan.tree_masks[t] != 0; };
  attn_groups_.clear();
  for (int32_t t = 0; t < static_cast<int32_t>(n); ++t) {
    const auto ut = static_cast<size_t>(t);
    if (!attn_groups_.empty()) {
      AttnGroup& last = attn_groups_.back();
      const size_t prev = ut - 1;
      const int32_t row = t - plan.seqs[static_cast<size_t>(plan.token_seq[ut])].first_token;
      const bool chained = !tree_row(ut) || plan.tree_masks[ut] == (plan.tree_masks[prev] | (uint64_t{1} << row));
      if (last.n < kAttnGroup && plan.token_seq[prev] == plan.token_seq[ut] &&
          plan.positions[prev] + 1 == plan.positions[ut] && chained) {
        ++last.n;
        continue;
      }
    }
    attn_groups_.push_back(AttnGroup{t, 1});
  }
  tree_tails_.clear();
  if (!plan.has_tree()) return;
  for (AttnGroup& grp : attn_groups_) {
    const int32_t last = grp.first + grp.n - 1;
    if (!tree_row(static_cast<size_t>(last))) continue;
    grp.tail_off = static_cast<int32_t>(tree_tails_.size());
    for (int32_t row : tree_path(plan, last)) tree_tails_.push_back(plan.slots[static_cast<size_t>(row)]);
  }
}

void CpuBackend::apply_cache_edits(const RopeConfig& rope) {
  const int n_layers = static_cast<int>(k_pools_.size());
  for (const auto& c : plan_.slot_copies) {
    for (int l = 0; l < n_layers; ++l) {
      cpu::kv_copy_slot(k_pool(l), c.src, c.dst);
      cpu::kv_copy_slot(v_pool(l), c.src, c.dst);
    }
  }
  for (const auto& c : plan_.block_copies) {
    for (int l = 0; l < n_layers; ++l) {
      cpu::kv_copy_block(k_pool(l), c.src, c.dst);
      cpu::kv_copy_block(v_pool(l), c.src, c.dst);
    }
  }
  if (plan_.k_shifts.empty()) return;
  const cpu::RopeParams rp = rope_params(rope);
  std::vector<float> cs(static_cast<size_t>(rope.head_dim));
  std::vector<double> inv_freq(static_cast<size_t>(rope.head_dim / 2));
  cpu::rope_inv_freq(rp, inv_freq.data());
  for (const auto& s : plan_.k_shifts) {
    cpu::rope_angles(rp, inv_freq.data(), s.delta, cs.data(), cs.data() + rope.head_dim / 2);
    for_rows(n_layers, kv_cfg_.block_size * kv_cfg_.n_kv_heads * kv_cfg_.head_dim,
             [&](int64_t begin, int64_t end, int) {
               for (int64_t l = begin; l < end; ++l)
                 cpu::kv_rope_block(k_pool(static_cast<int>(l)), s.block, rp, cs.data(),
                                    cs.data() + rope.head_dim / 2);
             });
  }
}

void CpuBackend::embed(const Tensor& table, Tensor& out) {
  const int64_t n = plan_.n_tokens();
  for (int64_t t = 0; t < n; ++t)
    require(plan_.tokens[static_cast<size_t>(t)] >= 0 && plan_.tokens[static_cast<size_t>(t)] < table.rows,
            "embed: token id out of range");
  require_rows(out, n, "embed: output has fewer rows than the step has tokens");
  require(out.cols == table.cols, "embed: output width differs from the table's");
  const size_t row_bytes = ggml_row_size(table.type, table.cols);
  for_rows(n, table.cols, [&](int64_t begin, int64_t end, int) {
    for (int64_t t = begin; t < end; ++t) {
      const auto* src = static_cast<const uint8_t*>(table.data) + row_bytes * plan_.tokens[static_cast<size_t>(t)];
      cpu::dequantize_row(table.type, src, f32(out) + t * out.cols, table.cols);
    }
  });
}

void CpuBackend::rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out, int64_t n) {
  require(weight.type == GgmlType::F32 && weight.cols == x.cols && out.cols == x.cols,
          "rms_norm: the weight must be f32 and widths must match");
  require_rows(x, n, "rms_norm: n exceeds the input's rows");
  require_rows(out, n, "rms_norm: n exceeds the output's rows");
  for_rows(n, x.cols, [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin; i < end; ++i)
      cpu::rms_norm_row(f32(x) + i * x.cols, f32(weight), eps, f32(out) + i * out.cols, x.cols);
  });
}

void CpuBackend::matmul(const Tensor& w, const Tensor& x, Tensor& out, int64_t n) {
  require(x.cols == w.cols && out.cols == w.rows, "matmul: shapes do not match");
  require_rows(x, n, "matmul: n exceeds the input's rows");
  require_rows(out, n, "matmul: n exceeds the output's rows");
  if (const cpu::PackedWeight* p = packed_copy(w))
    cpu::matmul(*pool_, *p, f32(x), n, f32(out));
  else
    cpu::matmul(*pool_, w.type, w.data, w.rows, w.cols, f32(x), n, f32(out));
}

void CpuBackend::matmul_same_x(const Tensor* const* w, int count, const Tensor& x, Tensor* const* out, int64_t n) {
  // Together when every matrix has the first one's type and the same kind of copy: all in the
  // GGML layout, or all packed in one layout.
  std::vector<const cpu::PackedWeight*> packed(static_cast<size_t>(std::max(count, 0)));
  bool together = count > 1;
  for (int j = 0; j < count; ++j) {
    require(x.cols == w[j]->cols && out[j]->cols == w[j]->rows, "matmul: shapes do not match");
    require_rows(*out[j], n, "matmul: n exceeds the output's rows");
    packed[j] = packed_copy(*w[j]);
    together = together && w[j]->type == w[0]->type && (packed[j] == nullptr) == (packed[0] == nullptr) &&
               (packed[j] == nullptr || packed[j]->layout == packed[0]->layout);
  }
  if (!together) return Backend::matmul_same_x(w, count, x, out, n);
  require_rows(x, n, "matmul: n exceeds the input's rows");
  if (packed[0] != nullptr) {
    std::vector<float*> outs;
    for (int j = 0; j < count; ++j) outs.push_back(f32(*out[j]));
    cpu::matmul_same_x(*pool_, cpu::default_cpu_isa(), packed.data(), outs.data(), count, f32(x), n);
  } else {
    std::vector<cpu::SameXMatrix> m;
    for (int j = 0; j < count; ++j) m.push_back({w[j]->data, w[j]->rows, f32(*out[j])});
    cpu::matmul_same_x(*pool_, cpu::default_cpu_isa(), w[0]->type, m.data(), count, x.cols, f32(x), n);
  }
}

void CpuBackend::add_bias(Tensor& x, const Tensor& bias, int64_t n) {
  require(bias.type == GgmlType::F32 && bias.cols == x.cols, "add_bias: the bias must be f32, as wide as x");
  require_rows(x, n, "add_bias: n exceeds the rows");
  for_rows(n, x.cols, [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin; i < end; ++i) cpu::add_row(f32(x) + i * x.cols, f32(bias), x.cols);
  });
}

void CpuBackend::add(Tensor& x, const Tensor& y, int64_t n) {
  require(x.cols == y.cols, "add: widths differ");
  require_rows(x, n, "add: n exceeds the rows of x");
  require_rows(y, n, "add: n exceeds the rows of y");
  for_rows(n, x.cols, [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin; i < end; ++i) cpu::add_row(f32(x) + i * x.cols, f32(y) + i * y.cols, x.cols);
  });
}

void CpuBackend::silu_mul(const Tensor& gate, const Tensor& up, Tensor& out, int64_t n) {
  require(gate.cols == up.cols && out.cols == gate.cols, "silu_mul: widths differ");
  require_rows(gate, n, "silu_mul: n exceeds the rows of gate");
  require_rows(up, n, "silu_mul: n exceeds the rows of up");
  require_rows(out, n, "silu_mul: n exceeds the rows of out");
  for_rows(n, gate.cols * 8, [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin; i < end; ++i)
      cpu::silu_mul_row(f32(gate) + i * gate.cols, f32(up) + i * up.cols, f32(out) + i * out.cols, gate.cols);
  });
}

void CpuBackend::rope(Tensor& x, int n_heads, const RopeConfig& rope) {
  require(n_heads > 0 && x.cols % n_heads == 0, "rope: heads do not divide the row");
  require_rows(x, plan_.n_tokens(), "rope: fewer rows than the step has tokens");
  const int head_dim = static_cast<int>(x.cols / n_heads);
  require(rope.head_dim > 0 && rope.head_dim <= head_dim && rope.head_dim % 2 == 0,
          "rope: rotated dims must be even and at most head_dim");
  const cpu::RopeParams rp = rope_params(rope);
  const int half = rope.head_dim / 2;
  std::vector<double> inv_freq(static_cast<size_t>(half));
  cpu::rope_inv_freq(rp, inv_freq.data());
  for_rows(plan_.n_tokens(), x.cols * 4, [&](int64_t begin, int64_t end, int) {
    std::vector<float> cs(static_cast<size_t>(2 * half));
    for (int64_t t = begin; t < end; ++t) {
      cpu::rope_angles(rp, inv_freq.data(), plan_.positions[static_cast<size_t>(t)], cs.data(), cs.data() + half);
      cpu::rope_apply(f32(x) + t * x.cols, n_heads, head_dim, rp, cs.data(), cs.data() + half);
    }
  });
}

void CpuBackend::store_kv(int layer, const Tensor& k, const Tensor& v) {
  const cpu::KvPool kp = k_pool(layer), vp = v_pool(layer);
  require(k.cols == kp.row_elems() && v.cols == vp.row_elems(), "store_kv: row width differs from the cache's");
  require_rows(k, plan_.n_tokens(), "store_kv: fewer K rows than the step has tokens");
  require_rows(v, plan_.n_tokens(), "store_kv: fewer V rows than the step has tokens");
  for_rows(plan_.n_tokens(), k.cols * 2, [&](int64_t begin, int64_t end, int) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t slot = plan_.slots[static_cast<size_t>(t)];
      cpu::kv_store_row(kp, slot, f32(k) + t * k.cols);
      cpu::kv_store_row(vp, slot, f32(v) + t * v.cols);
    }
  });
}

void CpuBackend::check_attention(const cpu::KvPool& kp, const Tensor& q, const Tensor& out, int n_heads,
                                 int n_kv_heads, int head_dim) const {
  require(n_kv_heads == kp.n_kv_heads && head_dim == kp.head_dim && n_heads % n_kv_heads == 0,
          "attention: head layout differs from the cache's");
  require(q.cols == static_cast<int64_t>(n_heads) * head_dim && out.cols == q.cols, "attention: q/out widths");
  require_rows(q, plan_.n_tokens(), "attention: fewer q rows than the step has tokens");
  require_rows(out, plan_.n_tokens(), "attention: fewer output rows than the step has tokens");
}

void CpuBackend::attention(int layer, const Tensor& q, Tensor& out, int n_heads, int n_kv_heads,
                           int head_dim, float scale) {
  const cpu::KvPool kp = k_pool(layer), vp = v_pool(layer);
  check_attention(kp, q, out, n_heads, n_kv_heads, head_dim);
  const int g = n_heads / n_kv_heads;
  // One task per (group of consecutive tokens of a sequence, run of adjacent KV heads): the
  // group's query heads that share a KV head read each K/V row once, and a run of heads reads
  // each slot's adjacent head rows together (whole runs of memory). Runs are as long as leaves
  // at least 4 tasks per thread; which heads share a task never changes a head's arithmetic.
  const int T = n_threads();
  const int64_t n_groups = static_cast<int64_t>(attn_groups_.size());
  int run_heads = n_kv_heads;
  while (run_heads > 1 && n_groups * ((n_kv_heads + run_heads - 1) / run_heads) < 4 * T)
    run_heads = (run_heads + 1) / 2;
  const int runs = (n_kv_heads + run_heads - 1) / run_heads;
  const size_t need =
      static_cast<size_t>(cpu::attention_scratch_floats(kAttnGroup, g, head_dim, max_ctx_, run_heads));
  for (auto& s : scratch_)
    if (s.size() < need) s.resize(need);
  const int64_t n_tasks = n_groups * runs;
  const auto run = [&](int64_t begin, int64_t end, int thread) {
    float* scratch = scratch_[static_cast<size_t>(thread)].data();
    for (int64_t task = begin; task < end; ++task) {
      const AttnGroup& grp = attn_groups_[static_cast<size_t>(task / runs)];
      const int kvh = static_cast<int>(task % runs) * run_heads;
      const auto& seq = plan_.seqs[static_cast<size_t>(plan_.token_seq[static_cast<size_t>(grp.first)])];
      const cpu::AttnRows rows = group_rows(grp, kvh, q, out, g, head_dim);
      cpu::attention_heads(rows, g, std::min(run_heads, n_kv_heads - kvh), head_dim, scale, kp, vp, kvh,
                           plan_.block_tables.data() + seq.block_table_offset, scratch);
    }
  };
  // Multiply-adds (QK and PV) at most. Only tiny steps run inline: attention follows the QKV
  // matmul, whose workers still spin (a round trip of about a microsecond), and a decode token
  // over 128-256 positions (~1M multiply-adds) run inline left the other threads idle, which in
  // a memory-bound decode step also idles their share of the memory bandwidth (TinyLlama Q4_K,
  // 2 threads: the worker's idle share of the samples fell from 5.6% to 3.3% when it took half).
  // A late worker costs nothing extra: the caller takes its tasks. Tasks differ in length
  // (contexts differ): threads take them as they free up.
  const int64_t fmas = static_cast<int64_t>(plan_.n_tokens()) * n_heads * max_ctx_ * head_dim * 2;
  if (n_tasks == 1 || fmas < kMinParallelAttentionFmas || T == 1) {
    run(0, n_tasks, 0);
  } else {
    pool_->parallel_for_dynamic(n_tasks, 1, run);
  }
}

cpu::AttnRows CpuBackend::group_rows(const AttnGroup& grp, int kvh, const Tensor& q, const Tensor& out, int g,
                                     int head_dim) const {
  const size_t t = static_cast<size_t>(grp.first);
  const SeqInStep& seq = plan_.seqs[static_cast<size_t>(plan_.token_seq[t])];
  const int64_t head_off = static_cast<int64_t>(kvh) * g * head_dim;
  cpu::AttnRows rows;
  rows.q = f32(q) + static_cast<int64_t>(t) * q.cols + head_off;
  rows.q_stride = q.cols;
  rows.out = f32(out) + static_cast<int64_t>(t) * out.cols + head_off;
  rows.out_stride = out.cols;
  rows.n_q = grp.n;
  rows.n_ctx = plan_.positions[t] + 1;
  if (grp.tail_off >= 0) {  // a token-tree chain (speculative decoding): its path's slots
    rows.tail_base = seq.n_past;
    rows.tail_slots = tree_tails_.data() + grp.tail_off;
  }
  return rows;
}

void CpuBackend::gather_logit_rows(const Tensor& x, Tensor& out) {
  require(static_cast<int64_t>(plan_.logit_rows.size()) <= out.rows && out.cols == x.cols,
          "gather_logit_rows: output too small");
  require_rows(x, plan_.n_tokens(), "gather_logit_rows: fewer rows than the step has tokens");
  for (size_t j = 0; j < plan_.logit_rows.size(); ++j)
    std::memcpy(f32(out) + static_cast<int64_t>(j) * out.cols,
                f32(x) + static_cast<int64_t>(plan_.logit_rows[j]) * x.cols, sizeof(float) * static_cast<size_t>(x.cols));
}

void CpuBackend::read_kv_block(int layer, int block, float* k_out, float* v_out) {
  const cpu::KvPool kp = k_pool(layer), vp = v_pool(layer);
  require(block >= 0 && block < kv_cfg_.num_blocks, "read_kv_block: block out of range");
  cpu::kv_load_rows(kp, static_cast<int64_t>(block) * kp.block_size, kp.block_size, k_out);
  cpu::kv_load_rows(vp, static_cast<int64_t>(block) * vp.block_size, vp.block_size, v_out);
}

void CpuBackend::write_kv_block(int layer, int block, const float* k, const float* v) {
  const cpu::KvPool kp = k_pool(layer), vp = v_pool(layer);
  require(block >= 0 && block < kv_cfg_.num_blocks, "write_kv_block: block out of range");
  for (int s = 0; s < kp.block_size; ++s) {
    const int64_t slot = static_cast<int64_t>(block) * kp.block_size + s;
    cpu::kv_store_row(kp, slot, k + s * kp.row_elems());
    cpu::kv_store_row(vp, slot, v + s * vp.row_elems());
  }
}

// Raw blocks: a layer's pool is [num_blocks][block bytes], so a block is one contiguous run
// per layer and per K / V, whatever the element types (K's run and V's may differ in size).
size_t CpuBackend::kv_block_raw_bytes() const { return k_pools_.empty() ? 0 : kv_block_bytes(kv_cfg_); }

void CpuBackend::read_kv_block_raw(int block, void* out) {
  require(!k_pools_.empty() && block >= 0 && block < kv_cfg_.num_blocks, "read_kv_block_raw: block out of range");
  const auto kb = static_cast<size_t>(kv_cfg_.k_block_bytes()), vb = static_cast<size_t>(kv_cfg_.v_block_bytes());
  auto* dst = static_cast<uint8_t*>(out);
  for (size_t l = 0; l < k_pools_.size(); ++l) {
    std::memcpy(dst, k_pools_[l].get() + kb * static_cast<size_t>(block), kb);
    std::memcpy(dst + kb, v_pools_[l].get() + vb * static_cast<size_t>(block), vb);
    dst += kb + vb;
  }
}

void CpuBackend::write_kv_block_raw(int block, const void* in) {
  require(!k_pools_.empty() && block >= 0 && block < kv_cfg_.num_blocks, "write_kv_block_raw: block out of range");
  const auto kb = static_cast<size_t>(kv_cfg_.k_block_bytes()), vb = static_cast<size_t>(kv_cfg_.v_block_bytes());
  const auto* src = static_cast<const uint8_t*>(in);
  for (size_t l = 0; l < k_pools_.size(); ++l) {
    std::memcpy(k_pools_[l].get() + kb * static_cast<size_t>(block), src, kb);
    std::memcpy(v_pools_[l].get() + vb * static_cast<size_t>(block), src + kb, vb);
    src += kb + vb;
  }
}

void CpuBackend::read(const Tensor& x, int64_t rows, float* host) {
  require_rows(x, rows, "read: more rows than the tensor has");
  std::memcpy(host, x.data, sizeof(float) * static_cast<size_t>(rows * x.cols));
}

void CpuBackend::run_host_tasks(int64_t n, const std::function<void(int64_t)>& fn) {
  pool_->parallel_for_dynamic(n, 1, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) fn(i);
  });
}

}  // namespace pagoda
