// CudaBackend: Backend ops as launches of kernels/cuda (see ops.h) plus cuBLAS GEMMs, all on
// one stream: set-up, memory and the per-step ops. Host access, graphs and sampling are in
// backend_cuda_host.cpp. See backend_cuda.h for the design.
#include "engine/backend/cuda/backend_cuda_impl.h"

#include <vector>


namespace pagoda {

// ---- free functions -------------------------------------------------------------------------

bool cuda_available(std::string* why) { return cuda::device_usable(why); }

std::unique_ptr<Backend> make_cuda_backend(const CudaBackendOptions& opts) {
  return std::make_unique<CudaBackend>(opts);
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
  impl_->weights = opts.weights;
  impl_->quant_gemm = opts.quant_gemm;
  impl_->prefill_attention = opts.prefill_attention;
  impl_->batch_invariant = opts.batch_invariant;
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
  spdlog::info("CUDA backend: CUDA graphs for decode and verify steps {}", opts.cuda_graphs ? "on" : "off (--cuda-graphs off)");
}

CudaBackend::~CudaBackend() {
  // Errors here cannot be reported (destructors must not throw); release what we can.
  Impl& m = *impl_;
  m.graphs.reset();  // ends any open capture before the stream goes
  if (m.stream) cudaStreamSynchronize(m.stream);
  if (m.cublas) cublasDestroy(m.cublas);  // before its workspace (in `owned`) is freed
  m.cublas = nullptr;
  for (void* p : m.owned) cudaFree(p);
  for (DeviceScratch* d : {&m.index_buf, &m.bf16_x, &m.q8_x, &m.attn_ws, &m.sample_io, &m.wq_scratch})
    if (d->ptr) cudaFree(d->ptr);
  if (m.k_pool) cudaFree(m.k_pool);
  if (m.v_pool) cudaFree(m.v_pool);
  m.index_staging.release();
  m.sample_staging.release();
  if (m.stream) cudaStreamDestroy(m.stream);
}

std::string CudaBackend::name() const { return "cuda"; }

MemoryInfo CudaBackend::memory_info() const {
  MemoryInfo m;
  m.device = true;
  CUDA_CHECK(cudaSetDevice(impl_->device));
  cuda::memory_info(&m.free_bytes, &m.total_bytes);
  return m;
}

// ---- memory ---------------------------------------------------------------------------------

Tensor CudaBackend::upload_weight(const void* host_data, GgmlType type, int64_t rows,
                                  int64_t cols) {
  if (type == GgmlType::F32 && rows > 1) {
    if (!impl_->logged_dequant.count(type)) {
      impl_->logged_dequant.insert(type);
      spdlog::info("CUDA backend: F32 weight matrices stay F32 (F32 GEMMs)");
    }
    return upload_weight_f32(static_cast<const float*>(host_data), rows, cols);
  }
  if (impl_->weights != CudaWeights::Bf16 && rows > 1 && cuda::is_device_quant_type(type))
    return upload_quantized(host_data, type, rows, cols);
  return upload_converted(host_data, type, rows, cols);
}

Tensor CudaBackend::upload_converted(const void* host_data, GgmlType type, int64_t rows, int64_t cols) {
  Impl& m = *impl_;
  require(rows > 0 && cols > 0, "upload_weight: rows and cols must be positive");
  CUDA_CHECK(cudaSetDevice(m.device));
  const GgmlTypeInfo* info = ggml_type_info(static_cast<uint32_t>(type));
  require(info && info->supported, "upload_weight: unsupported weight type");
  require(cols % info->block_size == 0, "upload_weight: row length not a multiple of the block");
  const int64_t n = rows * cols;
  const size_t raw_bytes = ggml_row_size(type, cols) * static_cast<size_t>(rows);
  const bool quantized = info->block_size > 1;  // kernels/cuda dequantizes every block type

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
    m.weight_bytes += static_cast<size_t>(n) * (out.type == GgmlType::F32 ? 4 : 2);
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
  const std::string problem = kv_types_problem(cfg);
  require(problem.empty(), problem);
  return cfg.block_bytes();
}

void CudaBackend::init_kv_cache(const KvCacheConfig& cfg) {
  Impl& m = *impl_;
  require(cfg.n_layers > 0 && cfg.num_blocks > 0 && cfg.block_size > 0 && cfg.n_kv_heads > 0 &&
              cfg.head_dim > 0,
          "init_kv_cache: every size must be positive");
  require(cfg.head_dim <= cuda::kMaxHeadDim, "init_kv_cache: head_dim above 256 is not supported");
  kv_block_bytes(cfg);  // checks the types
  CUDA_CHECK(cudaSetDevice(m.device));
  if (m.graphs) m.graphs->clear();  // they address the old pools
  if (m.k_pool) {
    CUDA_CHECK(cudaStreamSynchronize(m.stream));
    CUDA_CHECK(cudaFree(m.k_pool));
    CUDA_CHECK(cudaFree(m.v_pool));
    m.k_pool = m.v_pool = nullptr;
  }
  m.kv = cfg;
  // Strides in halves (2-byte units), as cuda::KvPools counts; every layout is a whole number
  // of them. K and V each get their own pool, sized by their own type.
  const size_t k_layer = static_cast<size_t>(cfg.k_block_bytes()) * cfg.num_blocks;
  const size_t v_layer = static_cast<size_t>(cfg.v_block_bytes()) * cfg.num_blocks;
  m.k_layer_stride = static_cast<int64_t>(k_layer / 2);
  m.v_layer_stride = static_cast<int64_t>(v_layer / 2);
  const size_t k_bytes = k_layer * cfg.n_layers, v_bytes = v_layer * cfg.n_layers;
  CUDA_CHECK(cudaMalloc(&m.k_pool, k_bytes));
  CUDA_CHECK(cudaMalloc(&m.v_pool, v_bytes));
  CUDA_CHECK(cudaMemsetAsync(m.k_pool, 0, k_bytes, m.stream));
  CUDA_CHECK(cudaMemsetAsync(m.v_pool, 0, v_bytes, m.stream));
  spdlog::info("CUDA backend: the weights take {:.1f} MiB on the device ({} mode{}{})",
               static_cast<double>(m.weight_bytes) / (1024.0 * 1024.0),
               cuda_weights_name(m.weights),
               m.weights == CudaWeights::Bf16             ? ""
               : m.weights == CudaWeights::Quantized && m.batch_invariant ? ", batch-invariant int8 tensor-core GEMM"
               : m.quant_gemm == QuantGemm::Mma           ? ", tensor-core GEMM"
                                                          : ", cuBLAS GEMM",
               m.wq_scratch.bytes ? fmt::format(", plus a {:.1f} MiB bf16 scratch for one matrix",
                                                static_cast<double>(m.wq_scratch.bytes) / (1024.0 * 1024.0))
                                  : std::string());
  spdlog::info("CUDA backend: KV cache of {} blocks x {} tokens, {}, {:.1f} MiB", cfg.num_blocks,
               cfg.block_size, kv_types_name(cfg.types),
               static_cast<double>(k_bytes + v_bytes) / (1024.0 * 1024.0));
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
  // into tiles of up to kPrefillTileQ consecutive tokens for the prefill kernel. With
  // batch_invariant the kind of row follows SeqInStep::prefill instead of the chunk's length:
  // a prompt's one-token chunk is a one-row tile (the decode kernel sums in another order, and
  // in f32 where the tensor-core kernel rounds to f16; a token's bits in a tile do not depend
  // on the tile's other rows), and every token of a chunk of drawn tokens (a grammar's forced
  // tail, a preempted sequence's recomputed output) is a decode row of its own position, as it
  // was when drawn. So a token gets the same bits however the scheduler cut or recomputed it.
  // Token-tree rows (speculative decoding) each go to the decode kernel with their ancestors'
  // slots: tree_index[t] = offset in tree_slots of (n_past, slots of the path to t). Row j of a
  // tree (its path is at most j + 1 rows) gets j + 2 entries whatever the tree's branching, so
  // the list's size, and the offsets after it, follow from the trees' sizes alone (a recorded
  // step's key holds it: CudaGraphKey::n_tree_slots).
  std::vector<int32_t> decode_rows, tiles, tree_index, tree_slots;
  int max_decode_ctx = 0;
  if (plan.has_tree()) tree_index.assign(n, -1);
  for (size_t si = 0; si < plan.seqs.size(); ++si) {
    const auto& s = plan.seqs[si];
    if (plan.has_tree() && plan.tree_masks[static_cast<size_t>(s.first_token)] != 0) {
      for (int32_t t = s.first_token; t < s.first_token + s.n_tokens; ++t) {
        decode_rows.push_back(t);
        max_decode_ctx = std::max(max_decode_ctx, plan.positions[static_cast<size_t>(t)] + 1);
        const size_t at = tree_slots.size(), entries = static_cast<size_t>(t - s.first_token) + 2;
        tree_index[static_cast<size_t>(t)] = static_cast<int32_t>(at);
        tree_slots.push_back(s.n_past);
        for (int32_t row : tree_path(plan, t)) tree_slots.push_back(plan.slots[static_cast<size_t>(row)]);
        tree_slots.resize(at + entries, -1);  // the unused tail of the row's entries
      }
    } else if (m.batch_invariant ? !s.prefill : s.n_tokens == 1) {
      for (int32_t t = s.first_token; t < s.first_token + s.n_tokens; ++t) {
        decode_rows.push_back(t);
        max_decode_ctx = std::max(max_decode_ctx, plan.positions[static_cast<size_t>(t)] + 1);
      }
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
  m.off_tree_index = place(tree_index.size());
  m.off_tree_slots = place(tree_slots.size());
  m.off_block_tables = place(plan.block_tables.size());  // grows as sequences do
  m.off_copies = place(2 * plan.block_copies.size());    // these three: apply_cache_edits only,
  m.off_shifts = place(shifts.size());                   // never recorded
  m.off_slot_copies = place(2 * plan.slot_copies.size());
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
  for (size_t i = 0; i < plan.slot_copies.size(); ++i) {
    h[m.off_slot_copies + 2 * i] = plan.slot_copies[i].src;
    h[m.off_slot_copies + 2 * i + 1] = plan.slot_copies[i].dst;
  }
  put(m.off_tree_index, tree_index.data(), tree_index.size());
  put(m.off_tree_slots, tree_slots.data(), tree_slots.size());
  void* d = m.index_buf.get(total * sizeof(int32_t), m.stream);
  CUDA_CHECK(cudaMemcpyAsync(d, h, off * sizeof(int32_t), cudaMemcpyHostToDevice, m.stream));
  m.index_staging.uploaded(m.stream);

  m.n_tokens = static_cast<int64_t>(n);
  m.n_logit = static_cast<int64_t>(plan.logit_rows.size());
  m.n_decode = static_cast<int64_t>(decode_rows.size());
  m.n_tiles = static_cast<int64_t>(tiles.size() / 2);
  m.n_copies = static_cast<int64_t>(plan.block_copies.size());
  m.n_shifts = static_cast<int64_t>(shifts.size() / 2);
  m.n_slot_copies = static_cast<int64_t>(plan.slot_copies.size());
  m.has_tree = plan.has_tree();
  m.n_tree_slots = static_cast<int64_t>(tree_slots.size());
  m.n_draws = 0;  // until begin_sampling (a step without draws keys as one, whatever came before)
  m.n_drawn_rows = 0;
  m.draws_greedy.clear();
  m.copies_independent = independent;
  m.max_decode_ctx = max_decode_ctx;
}

void CudaBackend::apply_cache_edits(const RopeConfig& rope) {
  Impl& m = *impl_;
  if (m.n_slot_copies > 0)  // first (StepPlan); no copy reads another's destination
    cuda::slot_copy(m.pools(), m.dev(m.off_slot_copies), static_cast<int>(m.n_slot_copies), m.s());
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
  require(w.type == GgmlType::BF16 || w.type == GgmlType::F32 || cuda::is_device_quant_type(w.type),
          "matmul: weights must come from upload_weight or upload_weight_f32");
  require(x.cols == w.cols && out.cols == w.rows && n <= x.rows && n <= out.rows,
          "matmul: shape mismatch");
  if (n <= 0) return;
  if (w.type == GgmlType::F32) {  // upload_weight_f32 (MoE routers): F32 throughout
    matmul_f32(w, x, out, n);
    return;
  }
  if (w.type != GgmlType::BF16) {  // kept in its GGUF blocks (quantized mode)
    matmul_quant(w, x, out, n);
    return;
  }
  void* xb = m.bf16_x.get(static_cast<size_t>(n * x.cols) * 2, m.stream);
  cuda::convert_to_bf16(x.data, GgmlType::F32, n * x.cols, xb, m.s());
  matmul_bf16(w, xb, out, n);
}

void CudaBackend::matmul_bf16(const Tensor& w, const void* xb, Tensor& out, int64_t n) {
  // A few rows (decode of a few sequences): one streaming pass over W, faster than cuBLAS there.
  if (cuda::gemv_bf16(w.data, xb, f32(out), n, w.rows, w.cols, out.cols, impl_->s())) return;
  // batch_invariant: the GEMV over chunks of kGemvMaxRows rows (its rows' bits do not depend on
  // n; cuBLAS's may), each chunk reading the whole matrix. The GEMV refuses all chunks or none
  // (its rules are about W, the row length and alignment, which every chunk shares).
  if (impl_->batch_invariant && n > cuda::kGemvMaxRows) {
    constexpr int64_t kMax = cuda::kGemvMaxRows;
    bool ok = true;
    for (int64_t first = 0; first < n && ok; first += kMax)
      ok = cuda::gemv_bf16(w.data, static_cast<const uint16_t*>(xb) + first * w.cols, f32(out) + first * out.cols,
                           std::min(kMax, n - first), w.rows, w.cols, out.cols, impl_->s());
    if (ok) return;
  }
  gemm_bf16(w.data, w.rows, w.cols, xb, out, n);
}

void CudaBackend::gemm_bf16(const void* w, int64_t rows, int64_t cols, const void* xb, Tensor& out, int64_t n) {
  // Row-major out[n, rows] = x[n, cols] W^T is, column-major, out^T = W^T(op T of the
  // column-major [cols, rows] view of W) * x^T.
  const float alpha = 1.0f, beta = 0.0f;
  CUBLAS_CHECK(cublasGemmEx(impl_->cublas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(rows),
                            static_cast<int>(n), static_cast<int>(cols), &alpha, w, CUDA_R_16BF,
                            static_cast<int>(cols), xb, CUDA_R_16BF, static_cast<int>(cols), &beta,
                            out.data, CUDA_R_32F, static_cast<int>(out.cols), CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT));
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
  const cuda::AttnIndex idx = m.attn_index();
  if (m.n_decode > 0) {
    const size_t ws_floats =
        cuda::attention_decode_workspace(m.n_decode, n_heads, head_dim, m.max_decode_ctx);
    float* ws = ws_floats ? static_cast<float*>(m.attn_ws.get(ws_floats * sizeof(float), m.stream))
                          : nullptr;
    cuda::attention_decode(f32(q), f32(out), n_heads, scale, kv, idx, m.dev(m.off_decode),
                           m.n_decode, m.max_decode_ctx, ws, m.s());
  }
  m.attend_tiles(kv, f32(q), f32(out), n_heads, scale, 0, 0.0f);
}

void CudaBackend::Impl::attend_tiles(const cuda::PagedKv& kv, const float* q, float* out, int n_heads, float scale,
                                     int window, float softcap) const {
  if (n_tiles <= 0) return;
  const cuda::AttnIndex idx = attn_index();
  if (prefill_attention == PrefillAttention::Mma &&
      cuda::attention_prefill_mma(q, out, n_heads, scale, window, softcap, kv, idx, dev(off_tiles), n_tiles, s()))
    return;
  if (window == 0 && softcap == 0.0f)
    cuda::attention_prefill(q, out, n_heads, scale, kv, idx, dev(off_tiles), n_tiles, s());
  else
    cuda::attention_ext(q, out, n_heads, scale, window, softcap, kv, idx, dev(off_tiles), n_tiles, s());
}

void CudaBackend::gather_logit_rows(const Tensor& x, Tensor& out) {
  Impl& m = *impl_;
  require(out.cols == x.cols && out.rows >= m.n_logit, "gather_logit_rows: shape mismatch");
  cuda::gather_rows(f32(x), m.dev(m.off_logit_rows), m.n_logit, x.cols, f32(out), m.s());
}

}  // namespace pagoda
