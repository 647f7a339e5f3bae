// CudaBackend, continued: host access (KV blocks, reads), decode-step graphs and sampling on
// the device. See backend_cuda.h.
#include "engine/backend/cuda/backend_cuda_impl.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/ops.h"

namespace pagoda {

// ---- host access ----------------------------------------------------------------------------

namespace {

// One block of one layer's K or V pool (elements of `type`), as the CPU kernels see it: the
// same layout (kernels/kv_layout.h), so the CPU's conversions read and write the device's bytes.
cpu::KvPool host_block(const KvCacheConfig& kv, GgmlType type, std::vector<uint8_t>& bytes) {
  cpu::KvPool p;
  p.type = type;
  p.block_size = kv.block_size;
  p.n_kv_heads = kv.n_kv_heads;
  p.head_dim = kv.head_dim;
  p.num_blocks = 1;
  bytes.resize(static_cast<size_t>(p.block_bytes()));
  p.data = bytes.data();
  return p;
}

}  // namespace

void CudaBackend::read_kv_block(int layer, int block, float* k_out, float* v_out) {
  Impl& m = *impl_;
  const cuda::PagedKv kv = m.layer_kv(layer);
  require(block >= 0 && block < m.kv.num_blocks, "read_kv_block: block out of range");
  std::vector<uint8_t> hk, hv;
  const cpu::KvPool pk = host_block(m.kv, m.kv.types.k, hk), pv = host_block(m.kv, m.kv.types.v, hv);
  const size_t blk = static_cast<size_t>(block);
  CUDA_CHECK(cudaMemcpyAsync(hk.data(), static_cast<uint8_t*>(kv.k) + blk * hk.size(), hk.size(),
                             cudaMemcpyDeviceToHost, m.stream));
  CUDA_CHECK(cudaMemcpyAsync(hv.data(), static_cast<uint8_t*>(kv.v) + blk * hv.size(), hv.size(),
                             cudaMemcpyDeviceToHost, m.stream));
  CUDA_CHECK(cudaStreamSynchronize(m.stream));
  cpu::kv_load_rows(pk, 0, pk.block_size, k_out);
  cpu::kv_load_rows(pv, 0, pv.block_size, v_out);
}

void CudaBackend::write_kv_block(int layer, int block, const float* k, const float* v) {
  Impl& m = *impl_;
  const cuda::PagedKv kv = m.layer_kv(layer);
  require(block >= 0 && block < m.kv.num_blocks, "write_kv_block: block out of range");
  std::vector<uint8_t> hk, hv;
  const cpu::KvPool pk = host_block(m.kv, m.kv.types.k, hk), pv = host_block(m.kv, m.kv.types.v, hv);
  for (int s = 0; s < pk.block_size; ++s) {
    cpu::kv_store_row(pk, s, k + s * pk.row_elems());
    cpu::kv_store_row(pv, s, v + s * pv.row_elems());
  }
  const size_t blk = static_cast<size_t>(block);
  CUDA_CHECK(cudaMemcpyAsync(static_cast<uint8_t*>(kv.k) + blk * hk.size(), hk.data(), hk.size(),
                             cudaMemcpyHostToDevice, m.stream));
  CUDA_CHECK(cudaMemcpyAsync(static_cast<uint8_t*>(kv.v) + blk * hv.size(), hv.data(), hv.size(),
                             cudaMemcpyHostToDevice, m.stream));
  CUDA_CHECK(cudaStreamSynchronize(m.stream));  // the host vectors die here
}

// Raw blocks (the prefix cache's disk file and host tier): a layer's pool is [num_blocks][block
// bytes], so a block is one contiguous run per layer and per K / V (their sizes differ when the
// types do); 2 x n_layers copies, one wait.
size_t CudaBackend::kv_block_raw_bytes() const {
  return impl_->k_pool ? kv_block_bytes(impl_->kv) : 0;
}

void CudaBackend::read_kv_block_raw(int block, void* out) {
  Impl& m = *impl_;
  require(m.k_pool != nullptr && block >= 0 && block < m.kv.num_blocks, "read_kv_block_raw: block out of range");
  CUDA_CHECK(cudaSetDevice(m.device));  // the engine thread may not be the one that built us
  const auto kb = static_cast<size_t>(m.kv.k_block_bytes()), vb = static_cast<size_t>(m.kv.v_block_bytes());
  auto* dst = static_cast<uint8_t*>(out);
  for (int l = 0; l < m.kv.n_layers; ++l) {
    const cuda::PagedKv kv = m.layer_kv(l);
    const auto* k = static_cast<const uint8_t*>(static_cast<const void*>(kv.k)) + kb * static_cast<size_t>(block);
    const auto* v = static_cast<const uint8_t*>(static_cast<const void*>(kv.v)) + vb * static_cast<size_t>(block);
    CUDA_CHECK(cudaMemcpyAsync(dst, k, kb, cudaMemcpyDeviceToHost, m.stream));
    CUDA_CHECK(cudaMemcpyAsync(dst + kb, v, vb, cudaMemcpyDeviceToHost, m.stream));
    dst += kb + vb;
  }
  CUDA_CHECK(cudaStreamSynchronize(m.stream));
}

void CudaBackend::write_kv_block_raw(int block, const void* in) {
  Impl& m = *impl_;
  require(m.k_pool != nullptr && block >= 0 && block < m.kv.num_blocks, "write_kv_block_raw: block out of range");
  CUDA_CHECK(cudaSetDevice(m.device));
  const auto kb = static_cast<size_t>(m.kv.k_block_bytes()), vb = static_cast<size_t>(m.kv.v_block_bytes());
  const auto* src = static_cast<const uint8_t*>(in);
  for (int l = 0; l < m.kv.n_layers; ++l) {
    const cuda::PagedKv kv = m.layer_kv(l);
    auto* k = static_cast<uint8_t*>(static_cast<void*>(kv.k)) + kb * static_cast<size_t>(block);
    auto* v = static_cast<uint8_t*>(static_cast<void*>(kv.v)) + vb * static_cast<size_t>(block);
    CUDA_CHECK(cudaMemcpyAsync(k, src, kb, cudaMemcpyHostToDevice, m.stream));
    CUDA_CHECK(cudaMemcpyAsync(v, src + kb, vb, cudaMemcpyHostToDevice, m.stream));
    src += kb + vb;
  }
  CUDA_CHECK(cudaStreamSynchronize(m.stream));  // the caller's buffer may die after this
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
  // Steps whose every row goes to the decode kernel (plain decode rows and token trees,
  // speculative verify steps): prefill tiles vary in number and length from step to step. A
  // tree's index arrays sit in the index buffer at offsets the key fixes (begin_step), and its
  // rows' contexts are read on the device; only the split count reaches a launch.
  if (!m.graphs || m.n_tiles > 0 || m.n_decode != m.n_tokens || m.n_tokens == 0) return false;
  CudaGraphKey key;
  key.n_tokens = m.n_tokens;
  key.n_logit = m.n_logit;
  key.n_decode = m.n_decode;
  key.n_draws = m.n_draws;
  key.n_drawn_rows = m.n_drawn_rows;
  key.tree = m.has_tree;
  key.n_tree_slots = m.n_tree_slots;
  key.greedy = std::all_of(m.draws_greedy.begin(), m.draws_greedy.end(), [](char g) { return g != 0; });
  key.n_splits = static_cast<int>((std::max(m.max_decode_ctx, 1) + cuda::kDecodeSplitKeys - 1) /
                                  cuda::kDecodeSplitKeys);
  const CudaGraphBuffers buffers = {m.index_buf.ptr, m.bf16_x.ptr, m.q8_x.ptr,   m.attn_ws.ptr,  m.sample_io.ptr,
                                    m.moe_index.ptr, m.moe_xg.ptr,  m.moe_gate.ptr, m.moe_up.ptr, m.moe_y.ptr,
                                    m.argmax_keys.ptr};
  return m.graphs->begin(key, buffers);
}

int64_t CudaBackend::recorded_rows(int64_t n) const {
  if (!impl_->graphs || n < 1 || n > kGraphBucketMax) return n;
  int64_t b = 1;
  while (b < n) b *= 2;
  return b;
}

void CudaBackend::end_recordable() {
  if (impl_->graphs) impl_->graphs->end();
}

CudaGraphStats CudaBackend::graph_stats() const {
  return impl_->graphs ? impl_->graphs->stats() : CudaGraphStats{};
}

// ---- sampling -------------------------------------------------------------------------------

namespace {

// True when two draws of one row edit it alike (the edit kernel applies the first one's edits).
bool same_edits(const SampleRequest& a, const SampleRequest& b) {
  if (a.repetition_penalty != b.repetition_penalty || a.presence_penalty != b.presence_penalty ||
      a.frequency_penalty != b.frequency_penalty || a.token_edits.size() != b.token_edits.size() ||
      (a.mask == nullptr) != (b.mask == nullptr) || a.mask_words != b.mask_words)
    return false;
  for (size_t i = 0; i < a.token_edits.size(); ++i) {
    const TokenEdit &x = a.token_edits[i], &y = b.token_edits[i];
    if (x.token != y.token || x.flags != y.flags || x.bias != y.bias || x.count != y.count) return false;
  }
  return !a.mask || std::equal(a.mask, a.mask + a.mask_words, b.mask);
}

}  // namespace

void CudaBackend::begin_sampling(const std::vector<SampleRequest>& draws) {
  Impl& m = *impl_;
  for (size_t i = 1; i < draws.size(); ++i) {
    require(draws[i - 1].row <= draws[i].row, "begin_sampling: draws must be sorted by row");
    require(draws[i - 1].row != draws[i].row || same_edits(draws[i - 1], draws[i]),
            "begin_sampling: draws of one row must carry the same mask, edits and penalties");
  }
  const size_t n = draws.size();
  m.n_draws = static_cast<int64_t>(n);
  m.n_drawn_rows = 0;
  for (size_t i = 0; i < n; ++i) m.n_drawn_rows += i == 0 || draws[i].row != draws[i - 1].row;
  m.draws_logprobs.assign(n, 0);
  m.draws_mask_words.assign(n, 0);
  m.draws_greedy.assign(n, 0);
  if (n == 0) return;
  auto round_up = [](size_t b) { return (b + 255) / 256 * 256; };
  m.draws_rows_at = round_up(n * sizeof(DrawParams));
  m.draws_ids_at = m.draws_rows_at + round_up(n * sizeof(int32_t));
  m.draws_lp_at = m.draws_ids_at + round_up(n * sizeof(int32_t));
  const size_t extra_at = m.draws_lp_at + round_up(n * sizeof(DrawLogprobs));
  // The masks and edits after the fixed parts, each draw's 16-byte aligned.
  std::vector<size_t> mask_at(n), edits_at(n);
  size_t total = extra_at;
  for (size_t i = 0; i < n; ++i) {
    const SampleRequest& d = draws[i];
    require(d.row >= 0, "begin_sampling: negative row");
    require(d.logprobs <= kMaxDrawTopLogprobs, "begin_sampling: more top logprobs than a draw carries");
    require(!d.mask || d.mask_words > 0, "begin_sampling: a mask without words");
    mask_at[i] = total;
    if (d.mask) total += (d.mask_words * sizeof(uint32_t) + 15) / 16 * 16;
    edits_at[i] = total;
    total += d.token_edits.size() * sizeof(TokenEdit);
  }
  auto* host = static_cast<uint8_t*>(m.sample_staging.get(total));
  auto* dev = static_cast<uint8_t*>(m.sample_io.get(total, m.stream));
  auto* params = reinterpret_cast<DrawParams*>(host);
  auto* rows = reinterpret_cast<int32_t*>(host + m.draws_rows_at);
  for (size_t i = 0; i < n; ++i) {
    const SampleRequest& d = draws[i];
    DrawParams& p = params[i];
    p = d;  // the DrawParams part, as the kernel reads it; its pointers are set below
    p.n_edits = static_cast<int32_t>(d.token_edits.size());
    p.allowed = d.mask ? reinterpret_cast<const uint32_t*>(dev + mask_at[i]) : nullptr;
    p.edits = p.n_edits > 0 ? reinterpret_cast<const TokenEdit*>(dev + edits_at[i]) : nullptr;
    p.logprobs_out = d.logprobs >= 0 ? reinterpret_cast<DrawLogprobs*>(dev + m.draws_lp_at) + i : nullptr;
    rows[i] = d.row;
    if (d.mask) std::memcpy(host + mask_at[i], d.mask, d.mask_words * sizeof(uint32_t));
    if (!d.token_edits.empty())
      std::memcpy(host + edits_at[i], d.token_edits.data(), d.token_edits.size() * sizeof(TokenEdit));
    m.draws_logprobs[i] = d.logprobs >= 0;
    m.draws_mask_words[i] = d.mask ? d.mask_words : 0;
    m.draws_greedy[i] = d.temperature <= 0.0f && !d.mask && d.token_edits.empty() && d.logprobs < 0;
  }
  // The logprobs part is written by the kernels, not uploaded: the copy skips it when the masks
  // and edits do not follow it.
  const size_t upload = total > extra_at ? total : m.draws_ids_at;
  CUDA_CHECK(cudaMemcpyAsync(dev, host, upload, cudaMemcpyHostToDevice, m.stream));
  m.sample_staging.uploaded(m.stream);
}

void CudaBackend::sample(const Tensor& logits, int64_t row_base, int64_t first_draw, int64_t n_draws) {
  Impl& m = *impl_;
  require(logits.type == GgmlType::F32 && first_draw >= 0 && n_draws >= 0 &&
              first_draw + n_draws <= m.n_draws,
          "sample: draws outside the range given to begin_sampling");
  if (n_draws == 0) return;
  const size_t vocab_words = (static_cast<size_t>(logits.cols) + 31) / 32;
  for (int64_t i = first_draw; i < first_draw + n_draws; ++i) {
    const size_t words = m.draws_mask_words[static_cast<size_t>(i)];
    require(words == 0 || words >= vocab_words, "sample: a token mask shorter than the vocabulary");
  }
  cuda::sample_rows(f32(logits), static_cast<int>(logits.cols), m.d_rows() + first_draw, row_base,
                    n_draws, m.d_params() + first_draw, m.d_ids() + first_draw, m.s());
}

bool CudaBackend::sample_greedy_matmul(const Tensor& w, const Tensor& x, int64_t rows, int64_t row_base,
                                       int64_t first_draw, int64_t n_draws) {
  Impl& m = *impl_;
  require(first_draw >= 0 && n_draws >= 0 && first_draw + n_draws <= m.n_draws,
          "sample_greedy_matmul: draws outside the range given to begin_sampling");
  require(x.cols == w.cols && rows <= x.rows, "sample_greedy_matmul: shape mismatch");
  if (n_draws == 0 || rows <= 0) return false;
  for (int64_t i = first_draw; i < first_draw + n_draws; ++i)
    if (!m.draws_greedy[static_cast<size_t>(i)]) return false;
  // The paths matmul takes for these rows, with the argmax as the GEMV's epilogue.
  const bool bf16 = w.type == GgmlType::BF16 && rows <= cuda::kGemvMaxRows;
  const bool int8 = cuda::is_device_quant_type(w.type) && m.weights == CudaWeights::Quantized &&
                    rows <= cuda::kQuantGemvMaxRows;
  if (!bf16 && !int8) return false;
  const int64_t parts = cuda::argmax_parts(w.rows);
  auto* keys = static_cast<uint64_t*>(m.argmax_keys.get(static_cast<size_t>(rows * parts) * sizeof(uint64_t), m.stream));
  bool ok = false;
  if (bf16) {
    void* xb = m.bf16_x.get(static_cast<size_t>(rows * x.cols) * 2, m.stream);
    cuda::convert_to_bf16(x.data, GgmlType::F32, rows * x.cols, xb, m.s());
    ok = cuda::gemv_bf16_argmax(w.data, xb, keys, rows, w.rows, w.cols, m.s());
  } else {
    ok = cuda::gemv_quant_dp4a_argmax(w.data, w.type, quantize_acts(x, rows), keys, rows, w.rows, w.cols, m.s());
  }
  if (!ok) return false;
  cuda::argmax_pick(keys, parts, m.d_rows() + first_draw, row_base, n_draws, m.d_ids() + first_draw, m.s());
  return true;
}

void CudaBackend::finish_sampling(int32_t* ids, DrawLogprobs* logprobs) {
  Impl& m = *impl_;
  const size_t n = static_cast<size_t>(m.n_draws);
  std::vector<DrawLogprobs> got;
  if (n > 0) {
    CUDA_CHECK(cudaMemcpyAsync(ids, m.d_ids(), n * sizeof(int32_t), cudaMemcpyDeviceToHost, m.stream));
    if (logprobs && std::count(m.draws_logprobs.begin(), m.draws_logprobs.end(), 1) > 0) {
      got.resize(n);
      CUDA_CHECK(cudaMemcpyAsync(got.data(), static_cast<const uint8_t*>(m.sample_io.ptr) + m.draws_lp_at,
                                 n * sizeof(DrawLogprobs), cudaMemcpyDeviceToHost, m.stream));
    }
  }
  CUDA_CHECK(cudaStreamSynchronize(m.stream));
  // Only the draws that asked: the others' slots were never written.
  for (size_t i = 0; i < got.size(); ++i)
    if (m.draws_logprobs[i]) logprobs[i] = got[i];
  m.n_draws = 0;
  m.n_drawn_rows = 0;
}

}  // namespace pagoda
