// CpuBackend: the Backend over kernels/cpu. Weights are zero-copy views of the mapped GGUF file,
// activations are F32, the paged KV cache holds per layer a K and a V pool of
// [num_blocks][block_size][n_kv_heads][head_dim] in F16 (default), F32 or Q8_0, each half its
// own type. Ops run on a persistent thread pool; every row is computed with the same arithmetic in the same order
// whatever the batch or the thread count, so results are batch invariant. It is also the
// oracle the other backends are tested against.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/backend/backend.h"
#include "kernels/cpu/moe.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/weight_pack.h"

namespace pagoda {

namespace cpu { class ThreadPool; }

// Whether upload_weight also keeps a decode-layout copy of quantized matrices
// (kernels/cpu/weight_pack.h; on AVX2-level hosts every quantized type, where it speeds up decode
// 1.2-8x; on AVX-512 hosts Q8_0, where batched decode no longer reduces per block):
// Off, On, or Auto, which packs while the copies stay within half of the memory available when
// the backend starts. Every matmul of a packed matrix reads the copy, and the mapped file's
// pages of it are unmapped once it is packed (they stay in the page cache), so a copy takes the
// place of the file's pages in the resident set rather than adding to it.
enum class DecodePack { Off, On, Auto };
// "off" | "on" | "auto"; throws std::invalid_argument naming `flag` for anything else.
DecodePack parse_decode_pack(const std::string& value, const std::string& flag);

class CpuBackend final : public Backend {
 public:
  // `n_threads` <= 0 means one thread per hardware thread.
  explicit CpuBackend(int n_threads = 0, DecodePack decode_pack = DecodePack::Auto);
  ~CpuBackend() override;

  std::string name() const override;
  int n_threads() const;

  Tensor upload_weight(const void* host_data, GgmlType type, int64_t rows, int64_t cols) override;
  Tensor alloc(int64_t rows, int64_t cols) override;
  size_t kv_block_bytes(const KvCacheConfig& cfg) const override;
  // Throws std::invalid_argument for a bad configuration (non-positive sizes, a type other than
  // F16/F32/Q8_0, Q8_0 with a head_dim not a multiple of 8).
  void init_kv_cache(const KvCacheConfig& cfg) override;

  // Copies the plan's index data and checks it against the cache (slots, block ids, block
  // tables long enough for every position); throws std::invalid_argument naming the fault.
  void begin_step(const StepPlan& plan) override;
  void apply_cache_edits(const RopeConfig& rope) override;
  void apply_cache_edits_per_layer(const std::vector<RopeConfig>& rope_of_layer) override;  // backend_cpu_window_softcap.cpp

  void embed(const Tensor& table, Tensor& out) override;
  void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out, int64_t n) override;
  void matmul(const Tensor& w, const Tensor& x, Tensor& out, int64_t n) override;
  // One activation quantization and one pool job for all count matrices when they share a type
  // and a layout (cpu::matmul_same_x); else the matmuls one by one.
  void matmul_same_x(const Tensor* const* w, int count, const Tensor& x, Tensor* const* out, int64_t n) override;
  // Encoder ops (backend_cpu_encoder.cpp): kernels/cpu/encoder_ops.h.
  void write(Tensor& x, const float* host, int64_t n) override;
  void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& out,
                  int64_t n) override;
  void encoder_attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                         const std::vector<int64_t>& starts, int n_heads, int head_dim) override;
  void add_bias(Tensor& x, const Tensor& bias, int64_t n) override;
  void add(Tensor& x, const Tensor& y, int64_t n) override;
  void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out, int64_t n) override;
  void rope(Tensor& x, int n_heads, const RopeConfig& rope) override;
  void store_kv(int layer, const Tensor& k, const Tensor& v) override;
  void attention(int layer, const Tensor& q, Tensor& out, int n_heads, int n_kv_heads,
                 int head_dim, float scale) override;
  void gather_logit_rows(const Tensor& x, Tensor& out) override;
  // The gemma/phi3 ops (backend_cpu_window_softcap.cpp).
  void attention_ext(int layer, const Tensor& q, Tensor& out, int n_heads, int n_kv_heads, int head_dim,
                     float scale, const AttentionExtras& extras) override;
  void scale(Tensor& x, float s, int64_t n) override;
  void gelu_mul(const Tensor& gate, const Tensor& up, Tensor& out, int64_t n) override;
  void softcap(Tensor& x, float cap, int64_t n) override;
  void moe_ffn(const ExpertWeights& w, const Tensor& x, const int32_t* experts, const float* weights,
               int k, const Tensor* shared, const float* shared_weights, Tensor& out, int64_t n) override;

  // LoRA (backend_cpu_lora.cpp): kernels/cpu/lora.h per row.
  bool supports_lora() const override { return true; }
  void lora_add(const LoraRows& group, const Tensor& x, Tensor& out) override;

  void read_kv_block(int layer, int block, float* k_out, float* v_out) override;
  void write_kv_block(int layer, int block, const float* k, const float* v) override;
  size_t kv_block_raw_bytes() const override;
  void read_kv_block_raw(int block, void* out) override;
  void write_kv_block_raw(int block, const void* in) override;
  void read(const Tensor& x, int64_t rows, float* host) override;
  // The kernel threads (idle between forward passes) take the tasks one at a time.
  void run_host_tasks(int64_t n, const std::function<void(int64_t)>& fn) override;

 private:
  struct AlignedFree {
    void operator()(void* p) const;
  };
  using Buffer = std::unique_ptr<uint8_t, AlignedFree>;

  // 64-byte aligned, zeroed memory owned by the backend.
  void* allocate(size_t bytes);
  // Layer `layer`'s pool of `pools` (k_pools_ or v_pools_), whose elements are of `type`.
  cpu::KvPool pool(const std::vector<Buffer>& pools, GgmlType type, int layer) const;
  cpu::KvPool k_pool(int layer) const { return pool(k_pools_, kv_cfg_.types.k, layer); }
  cpu::KvPool v_pool(int layer) const { return pool(v_pools_, kv_cfg_.types.v, layer); }
  // Runs fn(begin, end) over [0, n) rows on the pool when the work (n * cost) is worth it.
  template <class Fn>
  void for_rows(int64_t n, int64_t cost_per_row, Fn&& fn);

  std::unique_ptr<cpu::ThreadPool> pool_;
  std::vector<Buffer> buffers_;  // activations
  // Decode-layout copies of uploaded weights (weight_pack.h), by the uploaded data pointer:
  // every matmul of the weight reads its copy (moe_ffn's per expert); the Tensor keeps pointing
  // at the GGML bytes for every other use.
  std::unordered_map<const void*, cpu::PackedWeight> packed_;
  // w's decode-layout copy, or null when it has none.
  const cpu::PackedWeight* packed_copy(const Tensor& w) const;
  DecodePack decode_pack_;
  size_t pack_budget_ = 0;  // bytes of decode copies still allowed (Auto); unused otherwise
  KvCacheConfig kv_cfg_;
  std::vector<Buffer> k_pools_, v_pools_;  // one per layer
  // Consecutive tokens of one sequence whose attention runs as one task (they share K/V reads).
  struct AttnGroup {
    int32_t first = 0;  // token index in the plan
    int32_t n = 0;
    int32_t tail_off = -1;  // tree rows (a chain of them): their path's slots in tree_tails_
  };
  static constexpr int kAttnGroup = 8;
  // The rows of `grp` for KV head `kvh` (query heads kvh*g .. kvh*g+g-1): q/out pointers, strides,
  // the first row's context and, for tree rows, their path's slots. attention() and
  // attention_ext() both start from it.
  cpu::AttnRows group_rows(const AttnGroup& grp, int kvh, const Tensor& q, const Tensor& out, int g,
                           int head_dim) const;

  StepPlan plan_;
  int max_ctx_ = 0;                             // longest sequence context of the step
  std::vector<AttnGroup> attn_groups_;
  std::vector<int32_t> tree_tails_;             // slots of tree groups' paths (AttnGroup::tail_off)
  std::vector<std::vector<float>> scratch_;     // per worker thread: attention scores
  // Throws std::invalid_argument when q/out or the head layout do not fit the cache and step.
  void check_attention(const cpu::KvPool& kp, const Tensor& q, const Tensor& out, int n_heads, int n_kv_heads,
                       int head_dim) const;
  // Runs fn(row, thread) for every row in [0, n) on the pool when n * cost is worth waking it.
  void each_row(int64_t n, int64_t cost_per_row, const std::function<void(int64_t, int)>& fn);
  cpu::MoeScratch moe_scratch_;                 // moe_ffn's gathered rows and groups
};

}  // namespace pagoda
