// Internal to the CUDA backend: its helpers and CudaBackend::Impl, shared by backend_cuda.cpp
// (set-up, memory, per-step ops) and backend_cuda_host.cpp (host access, graphs, sampling).
// Include nowhere else.
#pragma once

#include "engine/backend/cuda/backend_cuda.h"

#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "kernels/cpu/moe.h"
#include "kernels/cuda/common.cuh"
#include "kernels/kv_layout.h"

#define CUBLAS_CHECK(expr)                                                                  \
  do {                                                                                      \
    cublasStatus_t pagoda_st_ = (expr);                                                     \
    if (pagoda_st_ != CUBLAS_STATUS_SUCCESS)                                                \
      throw ::pagoda::cuda::CudaError(std::string("cuBLAS error '") +                       \
                                      cublasGetStatusString(pagoda_st_) + "' in " #expr     \
                                      " at " __FILE__ ":" + std::to_string(__LINE__));      \
  } while (0)

namespace pagoda {
namespace cuda_backend_detail {

inline void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("CudaBackend: " + what);
}

inline float* f32(const Tensor& t) { return static_cast<float*>(t.data); }

// The device frequency factors of `rope` (null when it has none), after checking that they
// cover every rotated pair as F32 (what upload_weight makes of a 1-row weight).
inline const float* rope_freq_factors(const RopeConfig& rope) {
  const Tensor& ff = rope.freq_factors;
  require(ff.data == nullptr || (ff.type == GgmlType::F32 && ff.rows == 1 && ff.cols == rope.head_dim / 2),
          "rope: freq_factors must be one F32 row of head_dim/2 values");
  return static_cast<const float*>(ff.data);
}

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

}  // namespace cuda_backend_detail

using namespace cuda_backend_detail;

struct CudaBackend::Impl {
  int device = 0;
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  std::vector<void*> owned;  // weights and activations, freed with the backend
  std::set<GgmlType> logged_dequant;
  CudaWeights weights = CudaWeights::Quantized;  // CudaBackendOptions::weights
  QuantGemm quant_gemm = QuantGemm::Mma;         // CudaBackendOptions::quant_gemm
  PrefillAttention prefill_attention = PrefillAttention::Mma;  // CudaBackendOptions::prefill_attention
  bool batch_invariant = false;                  // CudaBackendOptions::batch_invariant
  size_t weight_bytes = 0;  // device bytes of everything upload_weight / upload_weight_f32 made
  // Quantized modes with QuantGemm::DequantCublas: the bf16 copy of one quantized matrix that a
  // GEMM of more than kQuantGemvMaxRows rows reads (reused by every such GEMM), sized at upload
  // for the largest. Never allocated with QuantGemm::Mma.
  DeviceScratch wq_scratch;

  // KV cache: K and V pools of [n_layers][num_blocks][block_size][n_kv_heads] head rows, each
  // in its own element type (kv.types), so their layer strides may differ.
  KvCacheConfig kv;
  void* k_pool = nullptr;
  void* v_pool = nullptr;
  int64_t k_layer_stride = 0, v_layer_stride = 0;  // halves (2-byte units) per layer

  // The current step's index arrays: one pinned staging buffer, one device copy.
  PinnedStaging index_staging;
  DeviceScratch index_buf;
  int64_t n_tokens = 0, n_logit = 0, n_decode = 0, n_tiles = 0, n_copies = 0, n_shifts = 0;
  int max_decode_ctx = 0;
  bool copies_independent = true;  // no copy reads or writes another copy's destination
  size_t off_tokens = 0, off_positions = 0, off_slots = 0, off_token_bt = 0, off_block_tables = 0,
         off_logit_rows = 0, off_decode = 0, off_tiles = 0, off_copies = 0, off_shifts = 0;
  // Speculative decoding: slot copies and token-tree rows (AttnIndex::tree_index / tree_slots).
  size_t off_slot_copies = 0, off_tree_index = 0, off_tree_slots = 0;
  int64_t n_slot_copies = 0, n_tree_slots = 0;
  bool has_tree = false;

  std::unique_ptr<CudaGraphCache> graphs;  // null: CUDA graphs off

  DeviceScratch bf16_x;     // activations converted for the GEMM
  DeviceScratch q8_x;       // activations quantized to int8 for gemv_quant_dp4a
  DeviceScratch attn_ws;    // split-KV decode workspace
  // Sampling: [params][rows][ids][logprobs][masks and edits], each part 256-byte aligned. The
  // first four parts' offsets depend only on the number of draws (a recorded step's kernels
  // read them); the masks and edits are reached through pointers in the params.
  DeviceScratch sample_io;
  PinnedStaging sample_staging;  // the step's draw params, rows, masks and edits, on their way up
  int64_t n_draws = 0;
  int64_t n_drawn_rows = 0;  // distinct rows the draws read (the LM head's first rows)
  size_t draws_rows_at = 0, draws_ids_at = 0, draws_lp_at = 0;  // byte offsets in sample_io
  std::vector<char> draws_logprobs;       // per draw: it asks for logprobs
  std::vector<size_t> draws_mask_words;   // per draw: its mask's words (0: none), for sample()
  std::vector<char> draws_greedy;         // per draw: plain greedy (sample_greedy_matmul may take it)
  DeviceScratch argmax_keys;              // the fused LM-head argmax's per-warp keys

  // Mixture of experts (backend_cuda_moe.cpp): the host grouping, the uploaded index arrays and
  // the gathered activations.
  cpu::MoeGroups moe_groups;
  std::vector<int32_t> moe_host;
  std::vector<int32_t> moe_table;  // moe_ffn's grouped-GEMV table, (expert, first row) pairs
  DeviceScratch moe_index, moe_xg, moe_gate, moe_up, moe_y;
  DeviceScratch lora_rows;  // lora_add's row indices (backend_cuda_lora.cpp)
  std::vector<int32_t> encoder_starts;  // encoder_attention's input bounds, on their way up
  DeviceScratch encoder_index;

  const DrawParams* d_params() const { return static_cast<const DrawParams*>(sample_io.ptr); }
  const int32_t* d_rows() const {
    return reinterpret_cast<const int32_t*>(static_cast<const uint8_t*>(sample_io.ptr) + draws_rows_at);
  }
  int32_t* d_ids() const { return reinterpret_cast<int32_t*>(static_cast<uint8_t*>(sample_io.ptr) + draws_ids_at); }

  const int32_t* dev(size_t off) const { return static_cast<const int32_t*>(index_buf.ptr) + off; }
  void* s() const { return stream; }

  // This step's attention index (positions, block tables, and token-tree rows' slot lists).
  cuda::AttnIndex attn_index() const {
    cuda::AttnIndex idx;
    idx.positions = dev(off_positions);
    idx.token_bt = dev(off_token_bt);
    idx.block_tables = dev(off_block_tables);
    if (has_tree) {
      idx.tree_index = dev(off_tree_index);
      idx.tree_slots = dev(off_tree_slots);
    }
    return idx;
  }

  // The attention of this step's prefill tiles (window 0 and softcap 0: plain causal), the one
  // place that picks the kernel: the tensor-core one unless prefill_attention is Exact or it is
  // not built for the head dim, else the exact f32 ones (backend_cuda.cpp).
  void attend_tiles(const cuda::PagedKv& kv, const float* q, float* out, int n_heads, float scale, int window,
                    float softcap) const;

  cuda::PagedKv layer_kv(int layer) const {
    require(k_pool != nullptr, "the KV cache is not initialised");
    require(layer >= 0 && layer < kv.n_layers, "layer out of range");
    cuda::PagedKv p;
    p.k = static_cast<__half*>(k_pool) + layer * k_layer_stride;
    p.v = static_cast<__half*>(v_pool) + layer * v_layer_stride;
    p.k_type = kv.types.k;
    p.v_type = kv.types.v;
    p.block_size = kv.block_size;
    p.n_kv_heads = kv.n_kv_heads;
    p.head_dim = kv.head_dim;
    return p;
  }

  cuda::KvPools pools() const {
    cuda::KvPools p;
    p.k_base = k_pool;
    p.v_base = v_pool;
    p.k_type = kv.types.k;
    p.v_type = kv.types.v;
    p.k_layer_stride = k_layer_stride;
    p.v_layer_stride = v_layer_stride;
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

}  // namespace pagoda
