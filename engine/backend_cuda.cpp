// CudaBackend: Backend ops as launches of kernels/cuda (see ops.h) plus cuBLAS GEMMs, all on
// one stream. See backend_cuda.h for the design and for what has never been run.
#include "engine/backend_cuda.h"

#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "kernels/cuda/common.cuh"

#define CUBLAS_CHECK(expr)                                                                  \
  do {                                                                                      \
    cublasStatus_t pagoda_st_ = (expr);                                                     \
    if (pagoda_st_ != CUBLAS_STATUS_SUCCESS)                                                \
      throw ::pagoda::cuda::CudaError(std::string("cuBLAS error '") +                       \
                                      cublasGetStatusString(pagoda_st_) + "' in " #expr     \
                                      " at " __FILE__ ":" + std::to_string(__LINE__));      \
  } while (0)

namespace pagoda {
namespace {

void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("CudaBackend: " + what);
}

float* f32(const Tensor& t) { return static_cast<float*>(t.data); }

// A device buffer that only grows, at least doubling each time so that a slowly growing need
// (the index buffer's block tables gain one entry every block_size decode steps) reallocates
// rarely: each reallocation waits for the stream, frees (a device-wide sync) and moves the
// buffer, which makes every CUDA graph that uses it be captured again.
struct DeviceScratch {
  void* ptr = nullptr;
  size_t bytes = 0;
  void* get(size_t need, cudaStream_t stream) {
    if (need <= bytes) return ptr;
    const size_t grown = std::max(need, bytes * 2);  // before `bytes` is reset below
    if (ptr) {
      CUDA_CHECK(cudaStreamSynchronize(stream));  // queued work may still use the old buffer
      CUDA_CHECK(cudaFree(ptr));
      ptr = nullptr;
      bytes = 0;
    }
    CUDA_CHECK(cudaMalloc(&ptr, grown));
    bytes = grown;
    return ptr;
  }
};

// A pinned host buffer that uploads are staged in: a copy from pinned memory is truly
// asynchronous, while one from pageable memory may make the host wait for the stream. Only
// grows. get() first waits until the previous upload out of it (marked by uploaded()) is done.
struct PinnedStaging {
  void* ptr = nullptr;
  size_t bytes = 0;
  cudaEvent_t done = nullptr;  // created on the first upload
  bool pending = false;
  void* get(size_t need) {
    if (pending) CUDA_CHECK(cudaEventSynchronize(done));
    pending = false;
    if (need > bytes) {
      const size_t grown = std::max(need, bytes * 2);
      if (ptr) CUDA_CHECK(cudaFreeHost(ptr));
      ptr = nullptr;
      bytes = 0;
      CUDA_CHECK(cudaMallocHost(&ptr, grown));
      bytes = grown;
    }
    return ptr;
  }
  // Call right after queuing the copy out of the buffer on `stream`.
  void uploaded(cudaStream_t stream) {
    if (!done) CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(done, stream));
    pending = true;
  }
  void release() {  // no throw: for destructors
    if (ptr) cudaFreeHost(ptr);
    if (done) cudaEventDestroy(done);
    ptr = nullptr;
    done = nullptr;
  }
};

}  // namespace

struct CudaBackend::Impl {
  int device = 0;
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  std::vector<void*> owned;  // weights and activations, freed with the backend
  std::set<GgmlType> logged_dequant;

  // KV cache: [n_layers][num_blocks][block_size][n_kv_heads][head_dim] halves, K and V.
  KvCacheConfig kv;
  void* k_pool = nullptr;
  void* v_pool = nullptr;
  int64_t layer_stride = 0;  // halves per layer

  // The current step's index arrays: one pinned staging buffer, one device copy.
  PinnedStaging index_staging;
  DeviceScratch index_buf;
  int64_t n_tokens = 0, n_logit = 0, n_decode = 0, n_tiles = 0, n_copies = 0, n_shifts = 0;
  int max_decode_ctx = 0;
  bool copies_independent = true;  // no copy reads or writes another copy's destination
  size_t off_tokens = 0, off_positions = 0, off_slots = 0, off_token_bt = 0, off_block_tables = 0,
         off_logit_rows = 0, off_decode = 0, off_tiles = 0, off_copies = 0, off_shifts = 0;

  std::unique_ptr<CudaGraphCache> graphs;  // null: CUDA graphs off

  DeviceScratch bf16_x;     // activations converted for the GEMM
  DeviceScratch attn_ws;    // split-KV decode workspace
  DeviceScratch sample_io;  // sampling: [params][rows][ids], each part 256-byte aligned
  PinnedStaging sample_staging;  // the step's draw params and rows, on their way up
  int64_t n_draws = 0;
  size_t draws_rows_at = 0, draws_ids_at = 0;  // byte offsets in sample_io

  const cuda::SampleParams* d_params() const { return static_cast<const cuda::SampleParams*>(sample_io.ptr); }
  const int32_t* d_rows() const {
    return reinterpret_cast<const int32_t*>(static_cast<const uint8_t*>(sample_io.ptr) + draws_rows_at);
  }
  int32_t* d_ids() const { return reinterpret_cast<int32_t*>(static_cast<uint8_t*>(sample_io.ptr) + draws_ids_at); }

  const int32_t* dev(size_t off) const { return static_cast<const int32_t*>(index_buf.ptr) + off; }
  void* s() const { return stream; }

  cuda::PagedKv layer_kv(int layer) const {
    require(k_pool != nullptr, "the KV cache is not initialised");
    require(layer >= 0 && layer < kv.n_layers, "layer out of range");
    cuda::PagedKv p;
    p.k = static_cast<__half*>(k_pool) + layer * layer_stride;
    p.v = static_cast<__half*>(v_pool) + layer * layer_stride;
    p.block_size = kv.block_size;
    p.n_kv_heads = kv.n_kv_heads;
    p.head_dim = kv.head_dim;
    return p;
  }

  cuda::KvPools pools() const {
    cuda::KvPools p;
    p.k_base = k_pool;
    p.v_base = v_pool;
    p.layer_stride = layer_stride;
    p.n_layers = kv.n_layers;
    p.block_size = kv.block_size;
    p.n_kv_heads = kv.n_kv_heads;
    p.head_dim = kv.head_dim;
    return p;
  }

  void* device_alloc(size_t bytes) {
    void* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, bytes));
    owned.push_back(p);
    return p;
  }
};

// ---- free functions -------------------------------------------------------------------------

bool cuda_available(std::string* why) { return cuda::device_usable(why); }

std::unique_ptr<Backend> make_cuda_backend(const CudaBackendOptions& opts) {
  return std::make_unique<CudaBackend>(opts);
}

CudaMemoryInfo cuda_memory_info() {
  CudaMemoryInfo info;
  cuda::memory_info(&info.free_bytes, &info.total_bytes);
  return info;
}

size_t cuda_kv_budget_bytes(double gpu_memory_fraction) {
  if (!(gpu_memory_fraction > 0.0 && gpu_memory_fraction <= 1.0))
    throw std::invalid_argument("--gpu-memory-fraction must be in (0, 1]");
  const CudaMemoryInfo m = cuda_memory_info();
  const double allowed = gpu_memory_fraction * static_cast<double>(m.total_bytes);
  const double used = static_cast<double>(m.total_bytes - m.free_bytes);
  return allowed > used ? static_cast<size_t>(allowed - used) : 0;
}

// ---- lifetime -------------------------------------------------------------------------------

CudaBackend::CudaBackend(const CudaBackendOptions& opts) : impl_(std::make_unique<Impl>()) {
  std::string why;
  if (!cuda::device_usable(&why)) throw cuda::CudaError(why);
  const int n_devices = cuda::device_count();
  if (opts.device < 0 || opts.device >= n_devices)
    throw cuda::CudaError("CUDA device " + std::to_string(opts.device) + " does not exist (" +
                          std::to_string(n_devices) + " found)");
  impl_->device = opts.device;
  CUDA_CHECK(cudaSetDevice(opts.device));
  CUDA_CHECK(cudaStreamCreateWithFlags(&impl_->stream, cudaStreamNonBlocking));
  CUBLAS_CHECK(cublasCreate(&impl_->cublas));
  CUBLAS_CHECK(cublasSetStream(impl_->cublas, impl_->stream));
  // cuBLAS must not allocate while a graph is captured: it gets a fixed workspace (the size
  // NVIDIA recommends for Hopper), with graphs on or off, so that both pick the same GEMMs.
  constexpr size_t kCublasWorkspace = size_t(32) << 20;
  CUBLAS_CHECK(cublasSetWorkspace(impl_->cublas, impl_->device_alloc(kCublasWorkspace), kCublasWorkspace));
  if (opts.cuda_graphs) impl_->graphs = std::make_unique<CudaGraphCache>(impl_->stream);
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, opts.device));
  spdlog::info("CUDA backend on device {} ({}, {:.1f} GiB, sm_{}{})", opts.device, prop.name,
               static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0), prop.major,
               prop.minor);
  if (opts.cuda_graphs) spdlog::info("CUDA backend: CUDA graphs for decode steps on (not yet verified on a GPU)");
}

CudaBackend::~CudaBackend() {
  // Errors here cannot be reported (destructors must not throw); release what we can.
  Impl& m = *impl_;
  m.graphs.reset();  // ends any open capture before the stream goes
  if (m.stream) cudaStreamSynchronize(m.stream);
  if (m.cublas) cublasDestroy(m.cublas);  // before its workspace (in `owned`) is freed
  m.cublas = nullptr;
  for (void* p : m.owned) cudaFree(p);
  for (DeviceScratch* d : {&m.index_buf, &m.bf16_x, &m.attn_ws, &m.sample_io})
    if (d->ptr) cudaFree(d->ptr);
  if (m.k_pool) cudaFree(m.k_pool);
  if (m.v_pool) cudaFree(m.v_pool);
  m.index_staging.release();
  m.sample_staging.release();
  if (m.stream) cudaStreamDestroy(m.stream);
}

std::string CudaBackend::name() const { return "cuda"; }

// ---- memory ---------------------------------------------------------------------------------

Tensor CudaBackend::upload_weight(const void* host_data, GgmlType type, int64_t rows,
                                  int64_t cols) {
  Impl& m = *impl_;
  require(rows > 0 && cols > 0, "upload_weight: rows and cols must be positive");
  CUDA_CHECK(cudaSetDevice(m.device));
  const GgmlTypeInfo* info = ggml_type_info(static_cast<uint32_t>(type));
  require(info && info->supported, "upload_weight: unsupported weight type");
  require(cols % info->block_size == 0, "upload_weight: row length not a multiple of the block");
  const int64_t n = rows * cols;
  const size_t raw_bytes = ggml_row_size(type, cols) * static_cast<size_t>(rows);
  const bool quantized = info->block_size > 1;

  // Raw bytes to the device, then one conversion kernel into the final buffer.
  void* raw = nullptr;
  CUDA_CHECK(cudaMalloc(&raw, raw_bytes));
  Tensor out;
  out.rows = rows;
  out.cols = cols;
  try {
    CUDA_CHECK(cudaMemcpyAsync(raw, host_data, raw_bytes, cudaMemcpyHostToDevice, m.stream));
    if (quantized && !m.logged_dequant.count(type)) {
      m.logged_dequant.insert(type);
      spdlog::info("CUDA backend: {} weights are dequantized to bf16 at load", info->name);
    }
    if (rows == 1) {  // norms and biases: F32 for the element-wise kernels
      out.type = GgmlType::F32;
      out.data = m.device_alloc(static_cast<size_t>(n) * sizeof(float));
      if (quantized) {
        void* tmp = m.bf16_x.get(static_cast<size_t>(n) * 2, m.stream);
        cuda::dequantize_to_bf16(raw, type, n, tmp, m.s());
        cuda::convert_to_f32(tmp, GgmlType::BF16, n, f32(out), m.s());
      } else {
        cuda::convert_to_f32(raw, type, n, f32(out), m.s());
      }
    } else {  // matrices (and the embedding table): bf16 for cuBLAS
      out.type = GgmlType::BF16;
      out.data = m.device_alloc(static_cast<size_t>(n) * 2);
      if (quantized)
        cuda::dequantize_to_bf16(raw, type, n, out.data, m.s());
      else
        cuda::convert_to_bf16(raw, type, n, out.data, m.s());
    }
    CUDA_CHECK(cudaStreamSynchronize(m.stream));
  } catch (...) {
    cudaFree(raw);
    throw;
  }
  CUDA_CHECK(cudaFree(raw));
  return out;
}

Tensor CudaBackend::alloc(int64_t rows, int64_t cols) {
  require(rows > 0 && cols > 0, "alloc: rows and cols must be positive");
  CUDA_CHECK(cudaSetDevice(impl_->device));
  const size_t bytes = static_cast<size_t>(rows * cols) * sizeof(float);
  void* p = impl_->device_alloc(bytes);
  CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, impl_->stream));
  return Tensor{p, GgmlType::F32, rows, cols};
}

size_t CudaBackend::kv_block_bytes(const KvCacheConfig& cfg) const {
  return 2 * static_cast<size_t>(cfg.n_layers) * cfg.block_size * cfg.n_kv_heads * cfg.head_dim *
         sizeof(__half);
}

void CudaBackend::init_kv_cache(const KvCacheConfig& cfg) {
  Impl& m = *impl_;
  require(cfg.n_layers > 0 && cfg.num_blocks > 0 && cfg.block_size > 0 && cfg.n_kv_heads > 0 &&
              cfg.head_dim > 0,
          "init_kv_cache: every size must be positive");
  require(cfg.head_dim <= cuda::kMaxHeadDim, "init_kv_cache: head_dim above 256 is not supported");
  CUDA_CHECK(cudaSetDevice(m.device));
  if (m.graphs) m.graphs->clear();  // they address the old pools
  if (m.k_pool) {
    CUDA_CHECK(cudaStreamSynchronize(m.stream));
    CUDA_CHECK(cudaFree(m.k_pool));
    CUDA_CHECK(cudaFree(m.v_pool));
    m.k_pool = m.v_pool = nullptr;
  }
  m.kv = cfg;
  m.kv.type = GgmlType::F16;
  m.layer_stride = static_cast<int64_t>(cfg.num_blocks) * cfg.block_size * cfg.n_kv_heads *
                   cfg.head_dim;
  const size_t bytes = static_cast<size_t>(m.layer_stride) * cfg.n_layers * sizeof(__half);
  CUDA_CHECK(cudaMalloc(&m.k_pool, bytes));
  CUDA_CHECK(cudaMalloc(&m.v_pool, bytes));
  CUDA_CHECK(cudaMemsetAsync(m.k_pool, 0, bytes, m.stream));
  CUDA_CHECK(cudaMemsetAsync(m.v_pool, 0, bytes, m.stream));
  spdlog::info("CUDA backend: KV cache of {} blocks x {} tokens, f16, {:.1f} MiB", cfg.num_blocks,
               cfg.block_size, 2.0 * static_cast<double>(bytes) / (1024.0 * 1024.0));
}

// ---- per step -------------------------------------------------------------------------------

void CudaBackend::begin_step(const StepPlan& plan) {
  Impl& m = *impl_;
  // The current device is per host thread; the engine thread may not be the one that built us.
  CUDA_CHECK(cudaSetDevice(m.device));
  require(m.k_pool != nullptr, "begin_step: the KV cache is not initialised");
  if (m.graphs) m.graphs->abort();  // a capture an exception left open
  validate_step_plan(plan, m.kv.num_blocks, m.kv.block_size, "CudaBackend");
  const size_t n = plan.tokens.size();

  // Attention work lists: single-token sequences go to the decode kernel, longer ones are cut
  // into tiles of up to kPrefillTileQ consecutive tokens for the prefill kernel.
  std::vector<int32_t> decode_rows, tiles;
  int max_decode_ctx = 0;
  for (size_t si = 0; si < plan.seqs.size(); ++si) {
    const auto& s = plan.seqs[si];
    if (s.n_tokens == 1) {
      decode_rows.push_back(s.first_token);
      max_decode_ctx =
          std::max(max_decode_ctx, plan.positions[static_cast<size_t>(s.first_token)] + 1);
    } else {
      for (int32_t t = 0; t < s.n_tokens; t += cuda::kPrefillTileQ) {
        tiles.push_back(s.first_token + t);
        tiles.push_back(std::min<int32_t>(cuda::kPrefillTileQ, s.n_tokens - t));
      }
    }
  }

  // K-shifts of the same block are merged (rotations compose by adding angles) so the kernel
  // never has two threads on one pair. Copies whose destinations are distinct and never read
  // by another copy run in one launch; otherwise apply_cache_edits issues them one by one.
  std::vector<int32_t> shifts;
  for (const auto& ks : plan.k_shifts) {
    size_t i = 0;
    while (i < shifts.size() && shifts[i] != ks.block) i += 2;
    if (i == shifts.size()) {
      shifts.push_back(ks.block);
      shifts.push_back(ks.delta);
    } else {
      shifts[i + 1] += ks.delta;
    }
  }
  bool independent = true;
  for (size_t i = 0; i < plan.block_copies.size(); ++i)
    for (size_t j = 0; j < plan.block_copies.size(); ++j)
      if (plan.block_copies[j].src == plan.block_copies[i].dst ||
          (i != j && plan.block_copies[j].dst == plan.block_copies[i].dst))
        independent = false;

  // Layout of the index buffer (int32 elements): the arrays whose sizes the step's shape fixes
  // first, so that steps of one shape hand their kernels the same addresses (CUDA graphs).
  size_t off = 0;
  auto place = [&](size_t count) {
    const size_t at = off;
    off += count;
    return at;
  };
  m.off_tokens = place(n);
  m.off_positions = place(n);
  m.off_slots = place(n);
  m.off_token_bt = place(n);
  m.off_logit_rows = place(plan.logit_rows.size());
  m.off_decode = place(decode_rows.size());
  m.off_tiles = place(tiles.size());
  m.off_block_tables = place(plan.block_tables.size());
  m.off_copies = place(2 * plan.block_copies.size());
  m.off_shifts = place(shifts.size());
  const size_t total = std::max<size_t>(off, 1);

  // (get() waits until the previous step's upload has left the staging buffer.)
  int32_t* h = static_cast<int32_t*>(m.index_staging.get(total * sizeof(int32_t)));
  auto put = [&](size_t at, const int32_t* src, size_t count) {
    if (count) std::memcpy(h + at, src, count * sizeof(int32_t));
  };
  put(m.off_tokens, plan.tokens.data(), n);
  put(m.off_positions, plan.positions.data(), n);
  put(m.off_slots, plan.slots.data(), n);
  for (size_t t = 0; t < n; ++t)
    h[m.off_token_bt + t] =
        plan.seqs[static_cast<size_t>(plan.token_seq[t])].block_table_offset;
  put(m.off_block_tables, plan.block_tables.data(), plan.block_tables.size());
  put(m.off_logit_rows, plan.logit_rows.data(), plan.logit_rows.size());
  put(m.off_decode, decode_rows.data(), decode_rows.size());
  put(m.off_tiles, tiles.data(), tiles.size());
  for (size_t i = 0; i < plan.block_copies.size(); ++i) {
    h[m.off_copies + 2 * i] = plan.block_copies[i].src;
    h[m.off_copies + 2 * i + 1] = plan.block_copies[i].dst;
  }
  put(m.off_shifts, shifts.data(), shifts.size());
  void* d = m.index_buf.get(total * sizeof(int32_t), m.stream);
  CUDA_CHECK(cudaMemcpyAsync(d, h, off * sizeof(int32_t), cudaMemcpyHostToDevice, m.stream));
  m.index_staging.uploaded(m.stream);

  m.n_tokens = static_cast<int64_t>(n);
  m.n_logit = static_cast<int64_t>(plan.logit_rows.size());
  m.n_decode = static_cast<int64_t>(decode_rows.size());
  m.n_tiles = static_cast<int64_t>(tiles.size() / 2);
  m.n_copies = static_cast<int64_t>(plan.block_copies.size());
  m.n_shifts = static_cast<int64_t>(shifts.size() / 2);
  m.copies_independent = independent;
  m.max_decode_ctx = max_decode_ctx;
}

// The device frequency factors of `rope` (null when it has none), after checking that they
// cover every rotated pair as F32 (what upload_weight makes of a 1-row weight).
static const float* rope_freq_factors(const RopeConfig& rope) {
  const Tensor& ff = rope.freq_factors;
  require(ff.data == nullptr || (ff.type == GgmlType::F32 && ff.rows == 1 && ff.cols == rope.head_dim / 2),
          "rope: freq_factors must be one F32 row of head_dim/2 values");
  return static_cast<const float*>(ff.data);
}

void CudaBackend::apply_cache_edits(const RopeConfig& rope) {
  Impl& m = *impl_;
  if (m.n_copies > 0 && m.copies_independent) {
    cuda::block_copy(m.pools(), m.dev(m.off_copies), static_cast<int>(m.n_copies), m.s());
  } else {
    for (int64_t i = 0; i < m.n_copies; ++i)  // in plan order: a later copy may read an earlier one's result
      cuda::block_copy(m.pools(), m.dev(m.off_copies + 2 * static_cast<size_t>(i)), 1, m.s());
  }
  if (m.n_shifts > 0)
    cuda::k_shift(m.pools(), m.dev(m.off_shifts), static_cast<int>(m.n_shifts), rope.head_dim,
                  rope.freq_base, rope.freq_scale, rope.neox, m.s(), rope_freq_factors(rope));
}

// ---- ops ------------------------------------------------------------------------------------

void CudaBackend::embed(const Tensor& table, Tensor& out) {
  Impl& m = *impl_;
  require(out.cols == table.cols && out.rows >= m.n_tokens, "embed: output shape mismatch");
  cuda::embed(table.data, table.type, table.rows, table.cols, m.dev(m.off_tokens), m.n_tokens,
              f32(out), m.s());
}

void CudaBackend::rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out,
                           int64_t n) {
  require(weight.type == GgmlType::F32 && weight.rows * weight.cols == x.cols &&
              out.cols == x.cols && n <= x.rows && n <= out.rows,
          "rms_norm: shape mismatch");
  cuda::rms_norm(f32(x), f32(weight), eps, f32(out), n, x.cols, impl_->s());
}

void CudaBackend::matmul(const Tensor& w, const Tensor& x, Tensor& out, int64_t n) {
  Impl& m = *impl_;
  require(w.type == GgmlType::BF16, "matmul: weights must come from upload_weight");
  require(x.cols == w.cols && out.cols == w.rows && n <= x.rows && n <= out.rows,
          "matmul: shape mismatch");
  if (n <= 0) return;
  void* xb = m.bf16_x.get(static_cast<size_t>(n * x.cols) * 2, m.stream);
  cuda::convert_to_bf16(x.data, GgmlType::F32, n * x.cols, xb, m.s());
  // Row-major out[n, rows] = x[n, cols] W^T is, column-major, out^T = W^T(op T of the
  // column-major [cols, rows] view of W) * x^T.
  const float alpha = 1.0f, beta = 0.0f;
  CUBLAS_CHECK(cublasGemmEx(m.cublas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(w.rows),
                            static_cast<int>(n), static_cast<int>(w.cols), &alpha, w.data,
                            CUDA_R_16BF, static_cast<int>(w.cols), xb, CUDA_R_16BF,
                            static_cast<int>(x.cols), &beta, out.data, CUDA_R_32F,
                            static_cast<int>(out.cols), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void CudaBackend::add_bias(Tensor& x, const Tensor& bias, int64_t n) {
  require(bias.type == GgmlType::F32 && bias.rows * bias.cols == x.cols && n <= x.rows,
          "add_bias: shape mismatch");
  cuda::add_bias(f32(x), f32(bias), n, x.cols, impl_->s());
}

void CudaBackend::add(Tensor& x, const Tensor& y, int64_t n) {
  require(x.cols == y.cols && n <= x.rows && n <= y.rows, "add: shape mismatch");
  cuda::add(f32(x), f32(y), n, x.cols, impl_->s());
}

void CudaBackend::silu_mul(const Tensor& gate, const Tensor& up, Tensor& out, int64_t n) {
  require(gate.cols == up.cols && out.cols == gate.cols && n <= gate.rows && n <= up.rows &&
              n <= out.rows,
          "silu_mul: shape mismatch");
  cuda::silu_mul(f32(gate), f32(up), f32(out), n, gate.cols, impl_->s());
}

void CudaBackend::rope(Tensor& x, int n_heads, const RopeConfig& rope) {
  Impl& m = *impl_;
  require(n_heads > 0 && x.cols % n_heads == 0 && x.rows >= m.n_tokens, "rope: shape mismatch");
  const int head_dim = static_cast<int>(x.cols / n_heads);
  require(rope.head_dim > 0 && rope.head_dim <= head_dim && rope.head_dim % 2 == 0,
          "rope: rotated dims must be even and at most head_dim");
  cuda::rope(f32(x), m.dev(m.off_positions), m.n_tokens, n_heads, head_dim, rope.head_dim,
             rope.freq_base, rope.freq_scale, rope.neox, m.s(), rope_freq_factors(rope));
}

void CudaBackend::store_kv(int layer, const Tensor& k, const Tensor& v) {
  Impl& m = *impl_;
  const cuda::PagedKv kv = m.layer_kv(layer);
  const int64_t kv_dim = static_cast<int64_t>(kv.n_kv_heads) * kv.head_dim;
  require(k.cols == kv_dim && v.cols == kv_dim && k.rows >= m.n_tokens && v.rows >= m.n_tokens,
          "store_kv: K/V rows do not match the cache's n_kv_heads * head_dim");
  cuda::store_kv(f32(k), f32(v), m.dev(m.off_slots), m.n_tokens, kv, m.s());
}

void CudaBackend::attention(int layer, const Tensor& q, Tensor& out, int n_heads, int n_kv_heads,
                            int head_dim, float scale) {
  Impl& m = *impl_;
  const cuda::PagedKv kv = m.layer_kv(layer);
  require(n_kv_heads == kv.n_kv_heads && head_dim == kv.head_dim,
          "attention: heads or head_dim differ from the KV cache's");
  require(n_heads > 0 && n_heads % n_kv_heads == 0, "attention: n_heads not a multiple of n_kv_heads");
  const int64_t q_cols = static_cast<int64_t>(n_heads) * head_dim;
  require(q.cols == q_cols && out.cols == q_cols && q.rows >= m.n_tokens && out.rows >= m.n_tokens,
          "attention: q/out shape mismatch");
  cuda::AttnIndex idx;
  idx.positions = m.dev(m.off_positions);
  idx.token_bt = m.dev(m.off_token_bt);
  idx.block_tables = m.dev(m.off_block_tables);
  if (m.n_decode > 0) {
    const size_t ws_floats =
        cuda::attention_decode_workspace(m.n_decode, n_heads, head_dim, m.max_decode_ctx);
    float* ws = ws_floats ? static_cast<float*>(m.attn_ws.get(ws_floats * sizeof(float), m.stream))
                          : nullptr;
    cuda::attention_decode(f32(q), f32(out), n_heads, scale, kv, idx, m.dev(m.off_decode),
                           m.n_decode, m.max_decode_ctx, ws, m.s());
  }
  if (m.n_tiles > 0)
    cuda::attention_prefill(f32(q), f32(out), n_heads, scale, kv, idx, m.dev(m.off_tiles),
                            m.n_tiles, m.s());
}

void CudaBackend::gather_logit_rows(const Tensor& x, Tensor& out) {
  Impl& m = *impl_;
  require(out.cols == x.cols && out.rows >= m.n_logit, "gather_logit_rows: shape mismatch");
  cuda::gather_rows(f32(x), m.dev(m.off_logit_rows), m.n_logit, x.cols, f32(out), m.s());
}

// ---- host access ----------------------------------------------------------------------------

void CudaBackend::read_kv_block(int layer, int block, float* k_out, float* v_out) {
  Impl& m = *impl_;
  const cuda::PagedKv kv = m.layer_kv(layer);
  require(block >= 0 && block < m.kv.num_blocks, "read_kv_block: block out of range");
  const size_t elems = static_cast<size_t>(kv.block_size) * kv.n_kv_heads * kv.head_dim;
  std::vector<__half> hk(elems), hv(elems);
  const size_t first = static_cast<size_t>(block) * elems;
  CUDA_CHECK(cudaMemcpyAsync(hk.data(), static_cast<__half*>(kv.k) + first, elems * 2,
                             cudaMemcpyDeviceToHost, m.stream));
  CUDA_CHECK(cudaMemcpyAsync(hv.data(), static_cast<__half*>(kv.v) + first, elems * 2,
                             cudaMemcpyDeviceToHost, m.stream));
  CUDA_CHECK(cudaStreamSynchronize(m.stream));
  for (size_t i = 0; i < elems; ++i) {
    k_out[i] = __half2float(hk[i]);
    v_out[i] = __half2float(hv[i]);
  }
}

void CudaBackend::write_kv_block(int layer, int block, const float* k, const float* v) {
  Impl& m = *impl_;
  const cuda::PagedKv kv = m.layer_kv(layer);
  require(block >= 0 && block < m.kv.num_blocks, "write_kv_block: block out of range");
  const size_t elems = static_cast<size_t>(kv.block_size) * kv.n_kv_heads * kv.head_dim;
  std::vector<__half> hk(elems), hv(elems);
  for (size_t i = 0; i < elems; ++i) {
    hk[i] = __float2half_rn(k[i]);
    hv[i] = __float2half_rn(v[i]);
  }
  const size_t first = static_cast<size_t>(block) * elems;
  CUDA_CHECK(cudaMemcpyAsync(static_cast<__half*>(kv.k) + first, hk.data(), elems * 2,
                             cudaMemcpyHostToDevice, m.stream));
  CUDA_CHECK(cudaMemcpyAsync(static_cast<__half*>(kv.v) + first, hv.data(), elems * 2,
                             cudaMemcpyHostToDevice, m.stream));
  CUDA_CHECK(cudaStreamSynchronize(m.stream));  // the host vectors die here
}

void CudaBackend::read(const Tensor& x, int64_t rows, float* host) {
  Impl& m = *impl_;
  require(x.type == GgmlType::F32 && rows >= 0 && rows <= x.rows, "read: bad row count");
  if (rows > 0)
    CUDA_CHECK(cudaMemcpyAsync(host, x.data, static_cast<size_t>(rows * x.cols) * sizeof(float),
                               cudaMemcpyDeviceToHost, m.stream));
  CUDA_CHECK(cudaStreamSynchronize(m.stream));
}

// ---- decode-step graphs ---------------------------------------------------------------------

bool CudaBackend::replay_recorded() {
  Impl& m = *impl_;
  // Decode-only steps: prefill tiles vary in number and length from step to step.
  if (!m.graphs || m.n_tiles > 0 || m.n_decode != m.n_tokens || m.n_tokens == 0) return false;
  CudaGraphKey key;
  key.n_tokens = m.n_tokens;
  key.n_logit = m.n_logit;
  key.n_decode = m.n_decode;
  key.n_draws = m.n_draws;
  key.n_splits = static_cast<int>((std::max(m.max_decode_ctx, 1) + cuda::kDecodeSplitKeys - 1) /
                                  cuda::kDecodeSplitKeys);
  const CudaGraphBuffers buffers = {m.index_buf.ptr, m.bf16_x.ptr, m.attn_ws.ptr, m.sample_io.ptr};
  return m.graphs->begin(key, buffers);
}

void CudaBackend::end_recordable() {
  if (impl_->graphs) impl_->graphs->end();
}

CudaGraphStats CudaBackend::graph_stats() const {
  return impl_->graphs ? impl_->graphs->stats() : CudaGraphStats{};
}

// ---- sampling -------------------------------------------------------------------------------

void CudaBackend::begin_sampling(const std::vector<SampleRequest>& draws) {
  Impl& m = *impl_;
  for (size_t i = 1; i < draws.size(); ++i)
    require(draws[i - 1].row <= draws[i].row, "begin_sampling: draws must be sorted by row");
  const size_t n = draws.size();
  m.n_draws = static_cast<int64_t>(n);
  if (n == 0) return;
  auto round_up = [](size_t b) { return (b + 255) / 256 * 256; };
  const size_t params_bytes = n * sizeof(cuda::SampleParams);
  m.draws_rows_at = round_up(params_bytes);
  m.draws_ids_at = m.draws_rows_at + round_up(n * sizeof(int32_t));
  auto* host = static_cast<uint8_t*>(m.sample_staging.get(m.draws_ids_at));
  auto* params = reinterpret_cast<cuda::SampleParams*>(host);
  auto* rows = reinterpret_cast<int32_t*>(host + m.draws_rows_at);
  for (size_t i = 0; i < n; ++i) {
    const SampleRequest& d = draws[i];
    require(d.row >= 0, "begin_sampling: negative row");
    cuda::SampleParams p;
    p.temperature = d.temperature;
    p.top_k = d.top_k;
    p.top_p = d.top_p;
    p.min_p = d.min_p;
    p.seed = d.seed;
    p.counter = d.counter;
    params[i] = p;
    rows[i] = d.row;
  }
  void* dev = m.sample_io.get(m.draws_ids_at + n * sizeof(int32_t), m.stream);
  CUDA_CHECK(cudaMemcpyAsync(dev, host, m.draws_ids_at, cudaMemcpyHostToDevice, m.stream));
  m.sample_staging.uploaded(m.stream);
}

void CudaBackend::sample(const Tensor& logits, int64_t row_base, int64_t first_draw, int64_t n_draws) {
  Impl& m = *impl_;
  require(logits.type == GgmlType::F32 && first_draw >= 0 && n_draws >= 0 &&
              first_draw + n_draws <= m.n_draws,
          "sample: draws outside the range given to begin_sampling");
  if (n_draws == 0) return;
  cuda::sample_rows(f32(logits), static_cast<int>(logits.cols), m.d_rows() + first_draw, row_base,
                    n_draws, m.d_params() + first_draw, m.d_ids() + first_draw, m.s());
}

void CudaBackend::finish_sampling(int32_t* ids) {
  Impl& m = *impl_;
  if (m.n_draws > 0)
    CUDA_CHECK(cudaMemcpyAsync(ids, m.d_ids(), static_cast<size_t>(m.n_draws) * sizeof(int32_t),
                               cudaMemcpyDeviceToHost, m.stream));
  CUDA_CHECK(cudaStreamSynchronize(m.stream));
  m.n_draws = 0;
}

void CudaBackend::sample_tokens(const Tensor& logits, int64_t rows,
                                const std::vector<cuda::SampleParams>& params,
                                std::vector<int32_t>& ids) {
  require(logits.type == GgmlType::F32 && rows >= 0 && rows <= logits.rows &&
              params.size() == static_cast<size_t>(rows),
          "sample_tokens: one SampleParams per row is needed");
  std::vector<SampleRequest> draws(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const cuda::SampleParams& p = params[i];
    draws[i] = SampleRequest{static_cast<int32_t>(i), p.temperature, p.top_k, p.top_p, p.min_p, p.seed, p.counter};
  }
  ids.assign(static_cast<size_t>(rows), 0);
  begin_sampling(draws);
  sample(logits, 0, 0, rows);
  finish_sampling(ids.data());
}

}  // namespace pagoda
