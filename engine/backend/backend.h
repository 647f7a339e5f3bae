// Backend: tensor storage and the ops the transformer forward needs. model.cpp is written once
// against this interface; cpu/backend_cpu.* and cuda/backend_cuda.* implement it. The CPU
// backend is the oracle every other backend is tested against.
//
// Conventions:
// - A Tensor is a 2-D row-major view (rows x cols, cols contiguous) in backend memory.
//   Activations are F32 unless said otherwise. Weights keep their GGUF type (a [out, in]
//   matrix: rows = output features, each row of `cols` input features).
// - Ops are issued in order and may run asynchronously; `read()` is the only point where the
//   host waits for results.
// - Per-step index data (tokens, positions, slots, block tables, logit rows) is handed over once
//   by `begin_step()`; ops that need it use the current step's copy.
// - Batch invariance: every op computes each row with the same arithmetic in the same order
//   whatever the number of rows, so a sequence's results never depend on its batch mates.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/backend/step_plan.h"
#include "kernels/draw_params.h"
#include "kernels/ggml_type.h"
#include "kernels/kv_layout.h"

namespace pagoda {

struct Tensor {
  void* data = nullptr;
  GgmlType type = GgmlType::F32;
  int64_t rows = 0;
  int64_t cols = 0;
};

struct RopeConfig {
  int head_dim = 0;        // rotated dims per head (n_rot)
  float freq_base = 10000.0f;
  float freq_scale = 1.0f; // positions are multiplied by this (linear scaling)
  bool neox = false;       // false: llama pairs (2i, 2i+1); true: NeoX/qwen2 halves (i, i+d/2)
  // Per-pair frequency divisors (GGUF rope_freqs.weight, Llama 3.1 "llama3" scaling): pair i
  // rotates by pos * freq_scale * freq_base^(-2i/head_dim) / freq_factors[i]. A [1 x head_dim/2]
  // F32 tensor in backend memory (upload_weight of the 1-row weight); data == nullptr: none.
  Tensor freq_factors;
};

struct KvCacheConfig {
  int n_layers = 0;
  int num_blocks = 0;
  int block_size = 16;
  int n_kv_heads = 0;
  int head_dim = 0;
  // K's and V's element types, each F16, F32 or Q8_0 (layout: kernels/kv_layout.h); one GgmlType
  // sets both.
  KvTypes types;

  // One block of one layer's K pool / V pool, in bytes (0: the type cannot hold the head).
  int64_t k_block_bytes() const { return half_block_bytes(types.k); }
  int64_t v_block_bytes() const { return half_block_bytes(types.v); }
  // One block over all layers, K and V: what Backend::kv_block_bytes answers.
  size_t block_bytes() const {
    return static_cast<size_t>(n_layers) * static_cast<size_t>(k_block_bytes() + v_block_bytes());
  }
  // One block of one layer's pool of element type `t`.
  int64_t half_block_bytes(GgmlType t) const {
    return static_cast<int64_t>(block_size) * n_kv_heads * kv_head_bytes(t, head_dim);
  }
};

// Why `cfg`'s element types cannot make a cache (a type other than f16/f32/q8_0, or q8_0 with a
// head_dim that is not a multiple of 8); empty when they can.
std::string kv_types_problem(const KvCacheConfig& cfg);

// What attention_ext adds to plain causal attention (gemma2/gemma3/phi3 layers).
struct AttentionExtras {
  // > 0: sliding window; a token at position p attends only to positions p - window + 1 .. p
  // (the window covers the token itself). 0: every position 0..p.
  int window = 0;
  // > 0: each scaled score s becomes softcap * tanh(s / softcap) before the softmax. 0: none.
  float softcap = 0.0f;
};

// One token to draw on the backend (Backend::sample), from one row of a step's logits. The rule
// is the GPU sampler's (kernels/cuda/sample.cu): first the host sampler's steps 0-3
// (engine/sampling/sampling.h) on the row: tokens `mask` disallows become -inf, then `edits`
// (logit_bias and penalties, from token_edits) apply through edited_logit. Then temperature <= 0
// is greedy (argmax, lowest id on ties); otherwise e_j = exp((logit_j - max) / temperature),
// tokens with e_j below the top-k / top-p / min-p threshold are dropped, and the token is the
// first (in id order) whose running sum of kept e exceeds philox_uniform(seed, counter) * (sum
// of kept e). logprobs >= 0: the draw's DrawLogprobs come back too, from the edited row, as the
// host sampler's step 4 defines them. A draw is a pure function of (logits row, these fields):
// it does not depend on other draws. The device fields are DrawParams, the struct the CUDA
// launchers take (kernels/draw_params.h); the backend fills in its pointers.
struct SampleRequest : DrawParams {
  int32_t row = 0;  // which logit row (Model: an index into StepPlan::logit_rows)
  // Host copies, read by begin_sampling: the allowed-token bitmask (null: none; mask_words
  // uint32 words, at least (vocab + 31) / 32) and the token edits (n_edits of DrawParams is
  // set from their count). Draws of one row must carry the same mask, edits and penalties.
  const uint32_t* mask = nullptr;
  size_t mask_words = 0;
  std::vector<TokenEdit> token_edits;
};

// One layer's routed experts for Backend::moe_ffn, stacked as GGUF stores them (expert
// outermost): expert e's gate and up are rows [e*ff, (e+1)*ff) of `gate` and `up`
// ([n_experts*ff x dim]), its down rows [e*dim, (e+1)*dim) of `down` ([n_experts*dim x ff]).
struct ExpertWeights {
  Tensor gate, up, down;
  int n_experts = 0;
};

// One LoRA adapter's low-rank update over some rows of a step (Backend::lora_add): for each
// i < n_rows, out[rows[i]] += B (scale * A x[rows[i]]), where A is [rank x x.cols] and B is
// [out.cols x rank], both F32 matrices made by upload_weight_f32. `rows` is a host array.
struct LoraRows {
  Tensor a, b;
  float scale = 1.0f;
  const int32_t* rows = nullptr;
  int64_t n_rows = 0;
};

// The memory a backend's KV cache is carved from (Backend::memory_info), in bytes.
struct MemoryInfo {
  size_t free_bytes = 0;   // available now
  size_t total_bytes = 0;
  // True: the backend's own device memory (a GPU's), which the model's weights and activations
  // already occupy and nothing else shares. False: host memory, shared with the whole system.
  bool device = false;
};

// The host's memory (Linux MemAvailable and MemTotal; sysconf without /proc; zeros when unknown).
MemoryInfo host_memory_info();

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;

  // Where this backend's tensors live and how much of it is free now (the engine sizes its KV
  // cache from it: engine/loop/kv_budget.h). The default is host memory (Linux MemAvailable
  // and MemTotal; zeros when unknown).
  virtual MemoryInfo memory_info() const;

  // ---- memory ----
  // A weight from the model file. The CPU backend may return a view of `host_data` (which
  // outlives the backend); others copy (and may convert) it.
  virtual Tensor upload_weight(const void* host_data, GgmlType type, int64_t rows, int64_t cols) = 0;
  // A matrix kept exactly as F32 (upload_weight may convert, e.g. to bf16 on CUDA): MoE
  // routers, where a rounded copy could send a near-tie to another expert than the CPU does.
  virtual Tensor upload_weight_f32(const float* host_data, int64_t rows, int64_t cols) {
    return upload_weight(host_data, GgmlType::F32, rows, cols);
  }
  // An F32 activation buffer, zero-initialised; freed with the backend.
  virtual Tensor alloc(int64_t rows, int64_t cols) = 0;
  // Bytes one KV block takes over all layers (K and V), to size the cache from a budget.
  virtual size_t kv_block_bytes(const KvCacheConfig& cfg) const = 0;
  virtual void init_kv_cache(const KvCacheConfig& cfg) = 0;

  // ---- per step ----
  virtual void begin_step(const StepPlan& plan) = 0;
  // Applies plan.block_copies then plan.k_shifts to the KV cache.
  virtual void apply_cache_edits(const RopeConfig& rope) = 0;
  // The same where layers rotate differently (gemma3's local layers): layer l's K shifts with
  // rope_of_layer[l]. The default handles only the case where they are all alike.
  virtual void apply_cache_edits_per_layer(const std::vector<RopeConfig>& rope_of_layer);

  // ---- ops (n = rows of the current step unless stated) ----
  virtual void embed(const Tensor& table, Tensor& out) = 0;  // out[t] = table[tokens[t]]
  virtual void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out, int64_t n) = 0;
  // out[i, :] = W x[i, :] for i < n   (out has W.rows columns, x has W.cols)
  virtual void matmul(const Tensor& w, const Tensor& x, Tensor& out, int64_t n) = 0;
  // out[j] = matmul(*w[j], x) for j < count: matrices that read the same x (a layer's q/k/v, its
  // gate/up), so a backend may share the work on x between them (the CUDA backend's int8 GEMV
  // quantizes x once). Results equal count separate matmuls bit for bit. Default: the matmuls.
  virtual void matmul_same_x(const Tensor* const* w, int count, const Tensor& x, Tensor* const* out, int64_t n);
  virtual void add_bias(Tensor& x, const Tensor& bias, int64_t n) = 0;  // x[i] += bias (1 x cols)
  virtual void add(Tensor& x, const Tensor& y, int64_t n) = 0;          // x += y
  virtual void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out, int64_t n) = 0;
  // Rotates each head of x (n x n_heads*head_dim) by the step's positions.
  virtual void rope(Tensor& x, int n_heads, const RopeConfig& rope) = 0;
  // Writes K and V rows of the step's tokens to their slots in layer `layer`.
  virtual void store_kv(int layer, const Tensor& k, const Tensor& v) = 0;
  // Causal attention of every step token over its sequence's cached tokens 0..position.
  virtual void attention(int layer, const Tensor& q, Tensor& out, int n_heads, int n_kv_heads,
                         int head_dim, float scale) = 0;
  // ---- fused ops (the defaults issue the ops above; a backend may run each as fewer kernels,
  // with results equal to the defaults' bit for bit) ----
  // x += *residual when residual is not null (a sub-block's output joining the residual
  // stream), then out = rms_norm(x) * weight: the add that closes a sub-block with the norm
  // that opens the next. out may be *residual.
  virtual void add_rms_norm(Tensor& x, const Tensor* residual, const Tensor& weight, float eps, Tensor& out,
                            int64_t n);
  // add_rms_norm into xn, then out[j] = w[j] xn for j < count (matmul_same_x): the backend may
  // hand the matmuls their input in the form they read (bf16, int8 blocks) straight from the
  // norm. xn holds the normed rows afterwards as add_rms_norm leaves them.
  virtual void add_rms_norm_matmuls(Tensor& x, const Tensor* residual, const Tensor& weight, float eps, Tensor& xn,
                                    const Tensor* const* w, int count, Tensor* const* out, int64_t n);
  // rope(q, n_heads), rope(k, n_kv_heads), store_kv(layer, k, v): a step's fresh Q and K
  // rotated in place and K and V written to the cache in one pass.
  virtual void rope_store_kv(int layer, Tensor& q, Tensor& k, const Tensor& v, int n_heads, int n_kv_heads,
                             const RopeConfig& rope);

  // ---- ops of the gemma/phi3 forward (defaults: "not supported") ----
  // attention() with a sliding window and/or soft-capped scores (AttentionExtras).
  virtual void attention_ext(int layer, const Tensor& q, Tensor& out, int n_heads, int n_kv_heads,
                             int head_dim, float scale, const AttentionExtras& extras) {
    unsupported("attention_ext");
  }
  virtual void scale(Tensor& x, float s, int64_t n) { unsupported("scale"); }  // x *= s
  // out = gelu_tanh(gate) * up, gelu_tanh(g) = g/2 (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))).
  virtual void gelu_mul(const Tensor& gate, const Tensor& up, Tensor& out, int64_t n) { unsupported("gelu_mul"); }
  // x = cap * tanh(x / cap) (final logit soft-capping).
  virtual void softcap(Tensor& x, float cap, int64_t n) { unsupported("softcap"); }

  // ---- ops of encoder models (engine/encoder; defaults: "not supported") ----
  // Rows 0..n-1 of x (F32) from host memory, n x x.cols floats.
  virtual void write(Tensor& x, const float* host, int64_t n) { unsupported("write"); }
  // out = (x - mean) / sqrt(var + eps) * weight + bias per row (weight, bias: F32 1 x cols).
  virtual void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& out,
                          int64_t n) {
    unsupported("layer_norm");
  }
  // Bidirectional attention within each input of a batch (cpu::encoder_attention): q, k, v and
  // out hold n_heads x head_dim columns; input b owns rows starts[b] .. starts[b + 1] - 1 (a
  // host array), each of its rows attending to all of them and no others; scale 1/sqrt(head_dim).
  virtual void encoder_attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                                 const std::vector<int64_t>& starts, int n_heads, int head_dim) {
    unsupported("encoder_attention");
  }

  // out[j] = x[logit_rows[j]] for every logit row of the step.
  virtual void gather_logit_rows(const Tensor& x, Tensor& out) = 0;

  // Mixture of experts (engine/model/moe_ffn.h routes on the host and calls this): for i < n,
  // out[i] = sum over j < k, in j order, of weights[i*k+j] * E_e(x[i]), e = experts[i*k+j],
  // E_e(v) = down_e (silu(gate_e v) * up_e v); then out[i] += shared_weights[i] * shared[i]
  // when `shared` is given. experts, weights and shared_weights are host arrays ([n x k], [n]).
  // Tokens are gathered per expert: one matmul per active expert and matrix. The default
  // throws (a backend without it cannot run MoE models).
  virtual void moe_ffn(const ExpertWeights& w, const Tensor& x, const int32_t* experts,
                       const float* weights, int k, const Tensor* shared,
                       const float* shared_weights, Tensor& out, int64_t n) {
    throw std::logic_error("backend '" + name() + "' does not support mixture-of-experts models");
  }

  // Mixture of experts routed on the backend (optional): true when moe_ffn_routed can run n
  // rows of these experts without the host (no read of the router's logits), which also lets a
  // step with MoE layers be recorded (replay_recorded). Default: false.
  virtual bool moe_routes_on_device(const ExpertWeights& w, int64_t n) const { return false; }
  // moe_ffn with the routing made from `logits` (F32 [n x n_experts], one more column with a
  // shared expert: its gate logit) on the backend: each token's top-k experts and weights by
  // cpu::moe_route_row's rule (weights normalized over the k when `normalize`), the shared
  // expert's weight sigmoid(gate logit). Only where moe_routes_on_device(w, n); the default
  // throws.
  virtual void moe_ffn_routed(const ExpertWeights& w, const Tensor& x, const Tensor& logits, int k, bool normalize,
                              const Tensor* shared, Tensor& out, int64_t n) {
    throw std::logic_error("backend '" + name() + "' does not route experts on the device");
  }

  // LoRA adapters (optional): a backend that can add adapters' low-rank updates to matmul
  // outputs says so here, and the model then calls lora_add after each adapted matmul, once per
  // adapter present in the step (its rows gathered: Punica / S-LoRA's grouping). Each row must
  // get the arithmetic of the CPU reference (kernels/cpu/lora.h) whatever its batch mates.
  virtual bool supports_lora() const { return false; }
  virtual void lora_add(const LoraRows& group, const Tensor& x, Tensor& out) {
    throw std::logic_error("backend '" + name() + "' does not serve LoRA adapters");
  }

  // For tests and debugging: one KV block of one layer as F32, laid out
  // [block_size][n_kv_heads][head_dim] for K and for V.
  virtual void read_kv_block(int layer, int block, float* k_out, float* v_out) = 0;
  virtual void write_kv_block(int layer, int block, const float* k, const float* v) = 0;

  // Copies `rows` rows of x (F32) to host memory; waits for all queued work.
  virtual void read(const Tensor& x, int64_t rows, float* host) = 0;

  // ---- raw KV blocks (optional; the prefix cache's disk file and host-memory tier) ----
  // One block's bytes exactly as the cache stores them (its element types, its layout), all
  // layers: layer 0 K, layer 0 V, layer 1 K, ..., each K part KvCacheConfig::k_block_bytes()
  // and each V part v_block_bytes() bytes (they differ when K and V have different types).
  // Writing back what was read restores the block bit for bit, whatever the types.
  // kv_block_raw_bytes() 0: not supported (the defaults). Both wait for all queued work.
  virtual size_t kv_block_raw_bytes() const { return 0; }
  virtual void read_kv_block_raw(int block, void* out) { no_raw_kv(); }
  virtual void write_kv_block_raw(int block, const void* in) { no_raw_kv(); }

  // ---- sampling on the backend (optional; the defaults say "not supported") ----
  // A backend that can sample keeps the logits where they are and returns only token ids: per
  // step begin_sampling(draws) once, sample() for each chunk of logit rows, finish_sampling()
  // once (the only wait). Model::forward's sampling overload drives this; the engine uses it
  // for the requests sampling.h's host pipeline is not needed for (see engine.h).
  virtual bool can_sample() const { return false; }
  // Logit rows per LM-head chunk (the logits buffer is this many rows x vocab): bigger on a
  // GPU, where a bigger GEMM and fewer launches pay for the memory.
  virtual int logits_chunk_rows() const { return 64; }
  // Starts a step's sampling: draws[i] will be drawn into ids[i] of finish_sampling. The rows
  // are positions in the order logit rows reach sample(); draws must be sorted by row.
  virtual void begin_sampling(const std::vector<SampleRequest>& draws) { no_sampling(); }
  // Draws [first_draw, first_draw + n_draws) of begin_sampling from `logits` (F32, on this
  // backend, at least as many rows as needed): draw i reads logits row draws[i].row - row_base.
  // May run asynchronously; `logits` may be overwritten by later ops in issue order.
  virtual void sample(const Tensor& logits, int64_t row_base, int64_t first_draw, int64_t n_draws) {
    no_sampling();
  }
  // Greedy draws fused into the LM head (optional): when each draw of [first_draw, first_draw +
  // n_draws) is plain greedy (temperature <= 0, no mask, edits or logprobs), a backend may make
  // their tokens from x (its first `rows` rows, the LM head's input for places row_base ..
  // row_base + rows - 1) and the LM head `w` without writing the logits: each draw's token is
  // exactly the one matmul(w, x) then sample() would draw (lowest id of the row's largest logit).
  // True: the draws are done (the caller does not call sample() for them). False (the default):
  // the caller runs matmul and sample as usual; whatever was issued is harmless.
  virtual bool sample_greedy_matmul(const Tensor& w, const Tensor& x, int64_t rows, int64_t row_base,
                                    int64_t first_draw, int64_t n_draws) {
    return false;
  }
  // Waits for the step's draws and writes their tokens to ids[0 .. draws.size()), and the
  // logprobs of each draw with logprobs >= 0 to logprobs[i] (others untouched; logprobs may be
  // null when no draw asks for them).
  virtual void finish_sampling(int32_t* ids, DrawLogprobs* logprobs) { no_sampling(); }

  // ---- host work between steps (optional) ----
  // Runs fn(i) for i in [0, n), each exactly once, possibly on several threads at once, and
  // returns when all have run; the first exception is rethrown. The engine samples a step's
  // host-sampled rows through it: on the CPU backend the kernel threads are idle then (the
  // forward pass has finished), so the rows share them instead of running one after another
  // on the engine thread. The default runs them in order on the caller.
  virtual void run_host_tasks(int64_t n, const std::function<void(int64_t)>& fn) {
    for (int64_t i = 0; i < n; ++i) fn(i);
  }

  // ---- recorded steps (optional; the CUDA backend's graphs) ----
  // Model brackets the ops of a step whose launches depend only on the step's shape (the logit
  // rows sampled on the backend within one LM-head chunk, the rest within one more whose
  // logits stay in the model's logits buffer until the model reads them after the bracket, so
  // nothing is read back mid-step) with these, after begin_step, apply_cache_edits and
  // begin_sampling and before finish_sampling. The key of a recording is the backend's: it must
  // cover what fixes the launches (rows, logit rows, drawn rows, draws, token trees' sizes).
  // replay_recorded() true: the backend launched a recording of an earlier
  // step of the same shape, whose ops read this step's indices and draws from the same device
  // buffers; the model issues none of the bracketed ops. False: the model issues them (the
  // backend may be recording them) and then calls end_recordable().
  virtual bool replay_recorded() { return false; }
  virtual void end_recordable() {}
  // Row buckets of recorded steps (optional): the row count (>= n) a recordable decode step of n
  // rows is padded to with inert rows (Model adds them: a reserved KV block, token 0, a greedy
  // draw it discards), so that one recording serves every n of a bucket. Default: n (no padding).
  virtual int64_t recorded_rows(int64_t n) const { return n; }

 private:
  [[noreturn]] void unsupported(const char* op) const {
    throw std::logic_error("backend '" + name() + "' does not implement " + op);
  }
  [[noreturn]] void no_sampling() const {
    throw std::logic_error("backend '" + name() + "' cannot sample (can_sample() is false)");
  }
  [[noreturn]] void no_raw_kv() const {
    throw std::logic_error("backend '" + name() + "' has no raw KV block access");
  }
};

}  // namespace pagoda
