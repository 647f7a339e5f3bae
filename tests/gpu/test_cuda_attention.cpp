// Paged attention (decode split-KV and tiled prefill kernels), K-shift and block copy on the
// CudaBackend against the CpuBackend: a grid of head sizes, GQA ratios, block sizes, scattered
// block tables, contexts across split and tile boundaries, and mixed decode/prefill batches;
// each with an F16 and a Q8_0 cache (the same quantized bytes on both backends), F32 too for
// decode. A decode row's output must not depend on its batch (bit-identical alone and batched).
// The earlier prefill cases pin the exact f32 kernels (--cuda-prefill-attention exact); the
// "tensor-core" cases run the default MMA kernel (every cache type, GQA 1-16, head dims 64-256,
// causal / window / soft-cap, holes, K-shifted blocks, batch invariance) within kMmaAtol, and
// its long shapes (4,096-token chunks, 32k contexts) only with PAGODA_GPU_HEAVY=1 (on a GPU).
// Skips (CTest: Skipped) without a CUDA device.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>

#include "engine/backend/cpu/backend_cpu.h"
#include "engine/backend/cuda/backend_cuda.h"
#include "tests/gpu/cuda_test_util.h"

using namespace pagoda;
using namespace pagoda::gputest;

namespace {

constexpr int kLayer = 1;

// The CUDA backend with the given prefill attention kernels: Exact (f32, held to the CPU at
// 1e-4) or Mma (tensor cores, bf16 rounding: kMmaAtol).
CudaBackendOptions prefill_with(PrefillAttention a) {
  CudaBackendOptions o;
  o.prefill_attention = a;
  return o;
}

// What the tensor-core prefill kernel may differ from the f32 CPU reference by: it rounds q, K,
// V and the softmax weights P to f16 (relative error <= 2^-11 each; the test values are within
// [-1, 1] and bf16-exact, so q and f16 / f32 K and V are exact, but q8_0 and K-shifted values
// are not), so an output, a weighted mean of V values of magnitude <= 1, may move by about
// 3 * 2^-11 ~ 1.5e-3 at worst. Measured under the emulation: at most 1.9e-4 (f16, f32 caches)
// and 4.1e-4 (q8_0); with bf16 instead of f16 it was 2.7e-3.
constexpr float kMmaAtol = 1e-3f;

struct Pair {
  CpuBackend cpu{2};
  std::unique_ptr<Backend> gpu;
  Backend* both[2];
  KvCacheConfig cfg;

  explicit Pair(KvCacheConfig c, const CudaBackendOptions& opts = prefill_with(PrefillAttention::Exact))
      : gpu(make_cuda_backend(opts)), both{&cpu, gpu.get()}, cfg(c) {
    for (Backend* b : both) b->init_kv_cache(cfg);
  }
  size_t block_elems() const { return static_cast<size_t>(cfg.block_size) * cfg.n_kv_heads * cfg.head_dim; }
  // Fills every block of every layer with the same random values on both backends.
  void fill_cache(uint32_t seed) {
    for (int l = 0; l < cfg.n_layers; ++l)
      for (int blk = 0; blk < cfg.num_blocks; ++blk) {
        const auto k = bf16_values(block_elems(), seed + 1000 * l + 2 * blk);
        const auto v = bf16_values(block_elems(), seed + 1000 * l + 2 * blk + 1);
        for (Backend* b : both) b->write_kv_block(l, blk, k.data(), v.data());
      }
  }
};

// A cache of blocks of 16 slots, 2 KV heads of 64 dims.
KvCacheConfig cache_config(int n_layers, int num_blocks) {
  KvCacheConfig c;
  c.n_layers = n_layers;
  c.num_blocks = num_blocks;
  c.block_size = 16;
  c.n_kv_heads = 2;
  c.head_dim = 64;
  return c;
}

// Gives each sequence enough blocks for n_past + n_new tokens, drawn from a shuffled pool of
// `spare` more blocks than needed so block tables are scattered (with unused blocks between
// them when spare > 0); returns the pool's size.
int assign_blocks(std::vector<TestSeq>& seqs, int block_size, uint32_t seed, int spare = 0) {
  int need = spare;
  for (const auto& s : seqs) need += (s.n_past + s.n_new + block_size - 1) / block_size;
  std::vector<int32_t> ids(static_cast<size_t>(need));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(seed));
  size_t next = 0;
  for (auto& s : seqs) {
    s.blocks.clear();
    for (int i = 0; i * block_size < s.n_past + s.n_new; ++i) s.blocks.push_back(ids[next++]);
  }
  return need;
}

// One step of store_kv + attention (attention_ext when `extras` is given) on `b`; returns the
// output rows. Row t of q, k and v depends only on t and the seed, so a sequence placed first
// gets the same inputs in any batch.
std::vector<float> attend_step(Backend& b, const StepPlan& plan, int n_heads, int n_kv, int hd, uint32_t seed,
                               const AttentionExtras* extras = nullptr) {
  const int n = plan.n_tokens(), q_cols = n_heads * hd, kv_cols = n_kv * hd;
  b.begin_step(plan);
  Tensor q = activation_from(b, bf16_values(static_cast<size_t>(n * q_cols), seed + 7), n, q_cols);
  Tensor k = activation_from(b, bf16_values(static_cast<size_t>(n * kv_cols), seed + 8), n, kv_cols);
  Tensor v = activation_from(b, bf16_values(static_cast<size_t>(n * kv_cols), seed + 9), n, kv_cols);
  Tensor out = b.alloc(n, q_cols);
  b.store_kv(kLayer, k, v);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  if (extras) b.attention_ext(kLayer, q, out, n_heads, n_kv, hd, scale, *extras);
  else b.attention(kLayer, q, out, n_heads, n_kv, hd, scale);
  return read_all(b, out, n);
}

// Runs store_kv + attention (attention_ext when `extras` is given) for one step on both
// backends (after `edit` changes the plan); returns {cpu, gpu} outputs.
std::vector<std::vector<float>> run_attention(int n_heads, int n_kv, int hd, int bs,
                                              std::vector<TestSeq> seqs, uint32_t seed,
                                              KvTypes kv_type = GgmlType::F16,
                                              const AttentionExtras* extras = nullptr,
                                              const std::function<void(StepPlan&)>& edit = {},
                                              const CudaBackendOptions& opts = prefill_with(PrefillAttention::Exact)) {
  KvCacheConfig c;
  c.types = kv_type;
  c.n_layers = 2;
  c.block_size = bs;
  c.n_kv_heads = n_kv;
  c.head_dim = hd;
  c.num_blocks = assign_blocks(seqs, bs, seed);
  Pair p(c, opts);
  p.fill_cache(seed);
  StepPlan plan = make_plan(seqs, bs);
  if (edit) edit(plan);
  std::vector<std::vector<float>> res(2);
  for (int i = 0; i < 2; ++i) res[i] = attend_step(*p.both[i], plan, n_heads, n_kv, hd, seed, extras);
  return res;
}

// Makes the first sequence's tokens a token tree after n_past committed tokens (node j at
// logical n_past + j, position n_past + depth) with the given parents (-1: a root).
std::function<void(StepPlan&)> tree_edit(const std::vector<int>& parent, int n_past) {
  return [parent, n_past](StepPlan& plan) {
    plan.tree_masks.assign(plan.tokens.size(), 0);
    for (size_t j = 0; j < parent.size(); ++j) {
      const int p = parent[j];
      plan.tree_masks[j] = (p >= 0 ? plan.tree_masks[static_cast<size_t>(p)] : 0) | (uint64_t{1} << j);
      plan.positions[j] = n_past + std::popcount(plan.tree_masks[j]) - 1;
    }
  };
}

// The attention rows of one prompt prefilled in chunks of the given sizes on b (each step the
// chunk alone, marked a prompt chunk: SeqInStep::prefill), its block table `blocks`: a token's q,
// K and V depend only on its position and the seed. Returns [positions][n_heads * hd].
std::vector<float> prefill_in_chunks(Backend& b, const std::vector<int>& chunks, int n_heads, int n_kv, int hd,
                                     int bs, const std::vector<int32_t>& blocks, uint32_t seed,
                                     const AttentionExtras* extras) {
  const int len = std::accumulate(chunks.begin(), chunks.end(), 0), q_cols = n_heads * hd, kv_cols = n_kv * hd;
  const auto qs = bf16_values(static_cast<size_t>(len * q_cols), seed + 7);
  const auto ks = bf16_values(static_cast<size_t>(len * kv_cols), seed + 8);
  const auto vs = bf16_values(static_cast<size_t>(len * kv_cols), seed + 9);
  std::vector<float> out;
  int at = 0;
  for (int c : chunks) {
    const TestSeq seq{std::vector<int32_t>(blocks.begin(), blocks.begin() + (at + c + bs - 1) / bs), at, c};
    StepPlan plan = make_plan({seq}, bs);
    plan.seqs[0].prefill = true;
    b.begin_step(plan);
    auto rows = [&](const std::vector<float>& all, int cols) {
      return std::vector<float>(all.begin() + static_cast<ptrdiff_t>(at) * cols,
                                all.begin() + static_cast<ptrdiff_t>(at + c) * cols);
    };
    Tensor q = activation_from(b, rows(qs, q_cols), c, q_cols);
    Tensor k = activation_from(b, rows(ks, kv_cols), c, kv_cols);
    Tensor v = activation_from(b, rows(vs, kv_cols), c, kv_cols);
    Tensor o = b.alloc(c, q_cols);
    b.store_kv(kLayer, k, v);
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    if (extras) b.attention_ext(kLayer, q, o, n_heads, n_kv, hd, scale, *extras);
    else b.attention(kLayer, q, o, n_heads, n_kv, hd, scale);
    const auto r = read_all(b, o, c);
    out.insert(out.end(), r.begin(), r.end());
    at += c;
  }
  return out;
}

}  // namespace

TEST_CASE("cuda: with batch_invariant a prompt's attention rows do not depend on its chunks, one-token ones too",
          "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  // A prompt of 70 tokens in one chunk, then cut as a scheduler may cut it: a last chunk of one
  // token, one-token chunks in the middle, chunks across tile (16) and block (16) edges. Its
  // one-token chunks take a prefill kernel as its longer ones (the decode kernel would sum in
  // another order): every row bit-identical, with either prefill kernel, plain and windowed.
  const int n_heads = 8, n_kv = 2, hd = 128, bs = 16, len = 70;
  const std::vector<std::vector<int>> cuts = {{69, 1}, {16, 1, 20, 1, 31, 1}, {1, 1, 3, 1, 40, 23, 1}, {33, 37}};
  for (PrefillAttention kernel : {PrefillAttention::Exact, PrefillAttention::Mma})
    for (int window : {0, 24}) {
      CudaBackendOptions opts = prefill_with(kernel);
      opts.batch_invariant = true;
      const auto gpu = make_cuda_backend(opts);
      KvCacheConfig c;
      c.n_layers = 2;
      c.block_size = bs;
      c.n_kv_heads = n_kv;
      c.head_dim = hd;
      c.num_blocks = 8;
      gpu->init_kv_cache(c);
      const std::vector<int32_t> blocks = {6, 2, 7, 0, 4};  // 80 slots, scattered
      const AttentionExtras e{window, 0.0f};
      const AttentionExtras* extras = window > 0 ? &e : nullptr;
      const uint32_t seed = 900 + window;
      const auto whole = prefill_in_chunks(*gpu, {len}, n_heads, n_kv, hd, bs, blocks, seed, extras);
      for (const auto& cut : cuts) {
        INFO((kernel == PrefillAttention::Mma ? "tensor-core" : "exact") << " kernel, window " << window
                                                                        << ", chunks starting " << cut[0] << ", "
                                                                        << cut[1] << " (" << cut.size() << ")");
        const auto got = prefill_in_chunks(*gpu, cut, n_heads, n_kv, hd, bs, blocks, seed, extras);
        REQUIRE(got.size() == whole.size());
        for (int t = 0; t < len; ++t) {
          INFO("position " << t);
          CHECK(std::memcmp(got.data() + static_cast<size_t>(t) * n_heads * hd,
                            whole.data() + static_cast<size_t>(t) * n_heads * hd, sizeof(float) * n_heads * hd) == 0);
        }
      }
    }
}

TEST_CASE("cuda: decode attention matches the CPU across split boundaries and GQA", "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  struct Heads {
    int n_heads, n_kv, hd;
  };
  const KvTypes kv_type =
      GENERATE(KvTypes(GgmlType::F16), KvTypes(GgmlType::Q8_0), KvTypes(GgmlType::F16, GgmlType::Q8_0),
               KvTypes(GgmlType::F32));
  // The grouped kernel serves up to 8 query heads per KV head (G = 1, 4, 4, 7, 3 here, head
  // dims whose 8-value chunks tile 128 threads evenly or not); 16 per KV head takes the
  // per-head kernel.
  for (Heads h : {Heads{4, 4, 64}, Heads{8, 2, 128}, Heads{12, 3, 40}, Heads{7, 1, 256},
                  Heads{6, 2, 96}, Heads{16, 1, 64}}) {
    for (int bs : {16, 8, 32}) {
      INFO(kv_types_name(kv_type) << " heads " << h.n_heads << "/" << h.n_kv << " head_dim " << h.hd
                                        << " block " << bs);
      // Contexts 1, 2, a block edge, just past one split (512), several splits.
      std::vector<TestSeq> seqs;
      for (int n_past : {0, 1, 15, 16, 511, 512, 600, 1100, 2047})
        seqs.push_back(TestSeq{{}, n_past, 1});
      const auto r = run_attention(h.n_heads, h.n_kv, h.hd, bs, seqs, 100 + h.hd + bs, kv_type);
      require_close(r[1], r[0], 1e-4f, 1e-3f, "decode attention");
    }
  }
}

TEST_CASE("cuda: prefill attention matches the CPU across tile and chunk boundaries", "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  struct Heads {
    int n_heads, n_kv, hd;
  };
  const KvTypes kv_type =
      GENERATE(KvTypes(GgmlType::F16), KvTypes(GgmlType::Q8_0), KvTypes(GgmlType::F16, GgmlType::Q8_0));
  for (Heads h : {Heads{4, 4, 64}, Heads{8, 2, 128}, Heads{6, 3, 40}, Heads{4, 1, 256}}) {
    for (int bs : {16, 32}) {
      INFO(kv_types_name(kv_type) << " heads " << h.n_heads << "/" << h.n_kv << " head_dim " << h.hd
                                        << " block " << bs);
      // Chunks of 2..40 tokens starting at 0, mid-block, on a block edge and after a long
      // cached prefix; decode rows mixed into the same batch.
      std::vector<TestSeq> seqs = {TestSeq{{}, 0, 17}, TestSeq{{}, 5, 1},   TestSeq{{}, 3, 16},
                                   TestSeq{{}, 16, 2},  TestSeq{{}, 37, 40}, TestSeq{{}, 700, 1},
                                   TestSeq{{}, 600, 33}, TestSeq{{}, 0, 15}};
      const auto r = run_attention(h.n_heads, h.n_kv, h.hd, bs, seqs, 200 + h.hd + bs, kv_type);
      require_close(r[1], r[0], 1e-4f, 1e-3f, "prefill attention");
    }
  }
}

TEST_CASE("cuda: windowed and soft-capped attention matches the CPU", "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  // Windows shorter and longer than the contexts, a cap that bites (scores of a few units) and
  // none; decode rows and prefill chunks that start before and after the window's edge.
  for (AttentionExtras e : {AttentionExtras{8, 0.0f}, AttentionExtras{0, 1.5f}, AttentionExtras{33, 2.0f},
                            AttentionExtras{4096, 0.0f}}) {
    INFO("window " << e.window << " softcap " << e.softcap);
    std::vector<TestSeq> seqs = {TestSeq{{}, 0, 17}, TestSeq{{}, 5, 1}, TestSeq{{}, 40, 1},
                                 TestSeq{{}, 37, 20}, TestSeq{{}, 300, 1}, TestSeq{{}, 7, 3}};
    const auto r = run_attention(8, 2, 64, 16, seqs, 300 + e.window, GgmlType::F16, &e);
    require_close(r[1], r[0], 1e-4f, 1e-3f, "attention_ext");
  }
}

TEST_CASE("cuda: a decode row's attention does not depend on its batch", "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  // Sequence X (context 300, one split) alone, then next to Y (context 3000, six splits, so
  // the launch has six splits for every row): X's output must be bit-identical.
  const int n_heads = 8, n_kv = 2, hd = 64, bs = 16;
  KvCacheConfig c;
  c.n_layers = 2;
  c.num_blocks = 19 + 188;
  c.block_size = bs;
  c.n_kv_heads = n_kv;
  c.head_dim = hd;
  c.types = GgmlType::F16;
  auto gpu = make_cuda_backend();
  gpu->init_kv_cache(c);
  const size_t e = static_cast<size_t>(bs) * n_kv * hd;
  for (int blk = 0; blk < c.num_blocks; ++blk) {
    const auto k = bf16_values(e, 3 * blk), v = bf16_values(e, 3 * blk + 1);
    gpu->write_kv_block(kLayer, blk, k.data(), v.data());
  }
  TestSeq x{{}, 299, 1}, y{{}, 2999, 1};
  for (int i = 0; i < 19; ++i) x.blocks.push_back(18 - i);  // reversed table
  for (int i = 0; i < 188; ++i) y.blocks.push_back(19 + i);
  std::vector<float> out_x[2];
  for (int run = 0; run < 2; ++run) {
    const StepPlan plan = run == 0 ? make_plan({x}, bs) : make_plan({x, y}, bs);
    const int n = plan.n_tokens();
    gpu->begin_step(plan);
    // Row t of each table depends only on t, so X (token 0) gets the same q, k, v both times.
    Tensor q = activation_from(*gpu, bf16_values(static_cast<size_t>(n) * n_heads * hd, 1), n,
                               n_heads * hd);
    Tensor k = activation_from(*gpu, bf16_values(static_cast<size_t>(n) * n_kv * hd, 2), n, n_kv * hd);
    Tensor v = activation_from(*gpu, bf16_values(static_cast<size_t>(n) * n_kv * hd, 3), n, n_kv * hd);
    Tensor out = gpu->alloc(n, n_heads * hd);
    gpu->store_kv(kLayer, k, v);
    gpu->attention(kLayer, q, out, n_heads, n_kv, hd, 0.125f);
    out_x[run] = read_all(*gpu, out, 1);
  }
  CHECK(out_x[0] == out_x[1]);
}

TEST_CASE("cuda: long-context decode rows (many splits) match the CPU and do not depend on their batch",
          "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  struct Heads {
    int n_heads, n_kv, hd;
  };
  const KvTypes kv_type = GENERATE(KvTypes(GgmlType::F16), KvTypes(GgmlType::F32), KvTypes(GgmlType::Q8_0),
                                   KvTypes(GgmlType::F16, GgmlType::Q8_0));
  // GQA ratios 1, 4 and 8 at head dims 64, 128 and 256 (all on the grouped kernel), plain
  // attention; then sliding windows (700: X's first split lies behind it, its second partly;
  // 100: only its last split) and soft-capping (attention_ext's decode rows), with 16 query heads
  // per KV head once (the per-head kernel).
  struct Case {
    Heads h;
    AttentionExtras e;
    bool ext;
  };
  for (Case cs : {Case{{2, 2, 64}, {}, false}, Case{{4, 1, 128}, {}, false}, Case{{8, 1, 64}, {}, false},
                  Case{{8, 1, 128}, {}, false}, Case{{4, 1, 256}, {}, false}, Case{{8, 1, 128}, {700, 2.0f}, true},
                  Case{{4, 2, 64}, {100, 0.0f}, true}, Case{{4, 1, 256}, {0, 1.5f}, true},
                  Case{{16, 1, 64}, {700, 0.0f}, true}}) {
    const Heads h = cs.h;
    const AttentionExtras* ext = cs.ext ? &cs.e : nullptr;
    INFO(kv_types_name(kv_type) << " heads " << h.n_heads << "/" << h.n_kv << " head_dim " << h.hd << " window "
                                << cs.e.window << " softcap " << cs.e.softcap);
    const int bs = 16;
    const uint32_t seed = 500 + h.hd + h.n_heads;
    // X: 1,300 keys = two whole splits and a partial third; then 2,049 keys (five splits, the
    // last holding one key), exactly one split, and one key. The 244 blocks they use are drawn
    // from a shuffled pool of 489, so unused blocks lie between them.
    std::vector<TestSeq> seqs = {TestSeq{{}, 1299, 1}, TestSeq{{}, 2048, 1}, TestSeq{{}, 511, 1},
                                 TestSeq{{}, 0, 1}};
    KvCacheConfig c;
    c.types = kv_type;
    c.n_layers = 2;
    c.block_size = bs;
    c.n_kv_heads = h.n_kv;
    c.head_dim = h.hd;
    c.num_blocks = assign_blocks(seqs, bs, seed, 245);
    // With a window, blocks wholly behind a row's window become holes (-1), as released ones.
    for (TestSeq& sq : seqs)
      for (size_t bi = 0; cs.e.window > 0 && static_cast<int>(bi + 1) * bs <= sq.n_past + 1 - cs.e.window; ++bi)
        sq.blocks[bi] = -1;
    Pair p(c);
    p.fill_cache(seed);
    const StepPlan batch = make_plan(seqs, bs);
    const auto cpu = attend_step(p.cpu, batch, h.n_heads, h.n_kv, h.hd, seed, ext);
    const auto gpu = attend_step(*p.gpu, batch, h.n_heads, h.n_kv, h.hd, seed, ext);
    require_close(gpu, cpu, 1e-4f, 1e-3f, "long-context decode attention");
    // X alone launches three splits instead of five: its row must be bit-identical.
    const auto alone = attend_step(*p.gpu, make_plan({seqs[0]}, bs), h.n_heads, h.n_kv, h.hd, seed, ext);
    const std::vector<float> x_in_batch(gpu.begin(), gpu.begin() + static_cast<ptrdiff_t>(alone.size()));
    CHECK(alone == x_in_batch);
  }
}

TEST_CASE("cuda: token-tree rows attend to the prefix and their ancestors as on the CPU", "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  // Sequence 0: a 7-node tree after 600 tokens; parents -1, 0, 1, 0, 3, 1, 5. Sequence 1: a
  // plain decode beside it.
  const std::vector<int> parent{-1, 0, 1, 0, 3, 1, 5};
  for (int bs : {16, 8}) {
    INFO("block " << bs);
    const auto r = run_attention(8, 2, 64, bs, {TestSeq{{}, 600, 7}, TestSeq{{}, 40, 1}}, 77 + bs, GgmlType::F16,
                                 nullptr, tree_edit(parent, 600));
    require_close(r[1], r[0], 1e-4f, 1e-3f, "tree attention");
  }
}

TEST_CASE("cuda: token-tree rows in windowed, soft-capped attention match the CPU", "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  // A 7-node tree (depths 0..3) after 45 committed tokens, next to a decode row and a prefill
  // chunk. Window 2 cuts into a deep node's own ancestors, window 20 into the committed prefix
  // across a block edge, window 0 is none; caps that bite and none; F16 and Q8_0 caches.
  const std::vector<int> parent{-1, 0, 1, 0, 3, 1, 5};
  const KvTypes kv_type =
      GENERATE(KvTypes(GgmlType::F16), KvTypes(GgmlType::Q8_0), KvTypes(GgmlType::F16, GgmlType::Q8_0));
  for (AttentionExtras e : {AttentionExtras{2, 1.5f}, AttentionExtras{20, 0.0f}, AttentionExtras{0, 2.0f}}) {
    INFO(kv_types_name(kv_type) << " window " << e.window << " softcap " << e.softcap);
    const auto r = run_attention(4, 2, 64, 16, {TestSeq{{}, 45, 7}, TestSeq{{}, 30, 1}, TestSeq{{}, 9, 5}},
                                 400 + e.window, kv_type, &e, tree_edit(parent, 45));
    require_close(r[1], r[0], 1e-4f, 1e-3f, "tree attention_ext");
    // The rows differ from causal ones (the tree reads its ancestors, not logical neighbours).
    const auto causal = run_attention(4, 2, 64, 16, {TestSeq{{}, 45, 7}, TestSeq{{}, 30, 1}, TestSeq{{}, 9, 5}},
                                      400 + e.window, kv_type, &e);
    CHECK(causal[1] != r[1]);
  }
}

TEST_CASE("cuda: slot copies move single slots exactly, before block copies", "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  // Mixed types too: K's and V's slots then differ in size (f32 K rows, q8_0 V rows).
  const KvTypes kv_type = GENERATE(KvTypes(GgmlType::F16), KvTypes(GgmlType::F32, GgmlType::Q8_0));
  INFO(kv_types_name(kv_type));
  KvCacheConfig c = cache_config(3, 8);
  c.types = kv_type;
  Pair p(c);
  p.fill_cache(5);
  StepPlan plan;
  plan.slot_copies = {{3 * 16 + 9, 3 * 16 + 2}, {3 * 16 + 12, 4 * 16 + 0}};
  plan.block_copies = {{3, 6}};  // sees the slot copies' results
  for (Backend* b : p.both) {
    b->begin_step(plan);
    b->apply_cache_edits(RopeConfig{64});
  }
  const size_t e = p.block_elems();
  for (int l = 0; l < c.n_layers; ++l)
    for (int blk = 0; blk < c.num_blocks; ++blk) {
      std::vector<float> kc(e), vc(e), kg(e), vg(e);
      p.cpu.read_kv_block(l, blk, kc.data(), vc.data());
      p.gpu->read_kv_block(l, blk, kg.data(), vg.data());
      CHECK(kc == kg);
      CHECK(vc == vg);
    }
}

TEST_CASE("cuda: block copies then K-shifts match the CPU; V is untouched", "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  const KvTypes kv_type =
      GENERATE(KvTypes(GgmlType::F16), KvTypes(GgmlType::Q8_0), KvTypes(GgmlType::F16, GgmlType::Q8_0));
  for (bool neox : {false, true}) {
    for (int n_rot : {64, 32}) {
      INFO(kv_types_name(kv_type) << " neox " << neox << " n_rot " << n_rot);
      KvCacheConfig c = cache_config(3, 16);
      c.types = kv_type;
      Pair p(c);
      p.fill_cache(neox ? 7 : 8);
      // Originals of the blocks involved, from the GPU, before any edit.
      const size_t e = p.block_elems();
      auto read = [&](Backend& b, int l, int blk) {
        std::vector<float> k(e), v(e);
        b.read_kv_block(l, blk, k.data(), v.data());
        return std::make_pair(k, v);
      };
      const auto src4 = read(*p.gpu, 2, 4);
      const auto before5 = read(*p.gpu, 0, 5);
      StepPlan plan;
      // 11 <- 4 then 12 <- 11 (a chain: must run in order); then 11 is shifted (after its
      // copy) and block 5 is shifted twice (the backend may merge the two).
      plan.block_copies = {{1, 9}, {2, 10}, {15, 3}, {4, 11}, {11, 12}};
      plan.k_shifts = {{5, -64}, {7, 5}, {0, -1000}, {11, -16}, {5, 16}};
      RopeConfig rc;
      rc.head_dim = n_rot;
      rc.freq_base = neox ? 1000000.0f : 10000.0f;
      rc.neox = neox;
      for (Backend* b : p.both) {
        b->begin_step(plan);
        b->apply_cache_edits(rc);
      }
      for (int l = 0; l < c.n_layers; ++l)
        for (int blk = 0; blk < c.num_blocks; ++blk) {
          INFO("layer " << l << " block " << blk);
          const auto cpu = read(p.cpu, l, blk), gpu = read(*p.gpu, l, blk);
          // One f16 rounding of nearly identical floats: allow one f16 ulp. Q8_0 (values within
          // 1, so a step max|group| / 127 <= 1/127): block 5 is shifted twice, which the CPU
          // re-quantizes after each shift and the CUDA backend merges into one (one
          // re-quantization), so they may differ by up to 1.5 steps there (measured under the
          // emulation: 0.0123); elsewhere a last-bit difference could move a value by a step.
          if (kv_type.k == GgmlType::Q8_0)
            require_close(gpu.first, cpu.first, 2.0f / 127, 0.0f, "K");
          else
            require_close(gpu.first, cpu.first, 1e-3f, 1e-3f, "K");
          require_close(gpu.second, cpu.second, 0.0f, 0.0f, "V");
        }
      // Copies are exact: block 9 equals block 1 bit for bit, on every layer.
      for (int l = 0; l < c.n_layers; ++l) {
        const auto a = read(*p.gpu, l, 1), b = read(*p.gpu, l, 9);
        CHECK(a.first == b.first);
        CHECK(a.second == b.second);
      }
      // The shifted copy keeps V of its source and a rotated K (norm per pair preserved).
      const auto s11 = read(*p.gpu, 2, 11);
      CHECK(s11.second == src4.second);
      CHECK(s11.first != src4.first);
      const auto s12 = read(*p.gpu, 2, 12);  // copied from 11 before 11 was shifted
      CHECK(s12.first == src4.first);
      CHECK(s12.second == src4.second);
      const auto after5 = read(*p.gpu, 0, 5);
      CHECK(after5.second == before5.second);
    }
  }
}

TEST_CASE("cuda: per-layer K-shifts (gemma3's local layers) match the CPU", "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  KvCacheConfig c;
  c.n_layers = 3;
  c.num_blocks = 8;
  c.block_size = 16;
  c.n_kv_heads = 2;
  c.head_dim = 64;
  Pair p(c);
  p.fill_cache(9);
  StepPlan plan;
  plan.block_copies = {{1, 6}};
  plan.k_shifts = {{6, -32}, {2, 7}};
  std::vector<RopeConfig> ropes(3);
  for (int l = 0; l < 3; ++l) {
    ropes[static_cast<size_t>(l)].head_dim = 64;
    ropes[static_cast<size_t>(l)].neox = true;
    ropes[static_cast<size_t>(l)].freq_base = l == 1 ? 1000000.0f : 10000.0f;  // layer 1 "global"
  }
  for (Backend* b : p.both) {
    b->begin_step(plan);
    b->apply_cache_edits_per_layer(ropes);
  }
  const size_t e = p.block_elems();
  for (int l = 0; l < c.n_layers; ++l)
    for (int blk = 0; blk < c.num_blocks; ++blk) {
      INFO("layer " << l << " block " << blk);
      std::vector<float> kc(e), vc(e), kg(e), vg(e);
      p.cpu.read_kv_block(l, blk, kc.data(), vc.data());
      p.gpu->read_kv_block(l, blk, kg.data(), vg.data());
      require_close(kg, kc, 1e-3f, 1e-3f, "K");
      require_close(vg, vc, 0.0f, 0.0f, "V");
    }
}

TEST_CASE("cuda: tensor-core prefill attention matches the CPU: masks, GQA, head dims, cache types",
          "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  struct Case {
    int n_heads, n_kv, hd;
    AttentionExtras e;
    bool ext;
  };
  const KvTypes kv_type = GENERATE(KvTypes(GgmlType::F16), KvTypes(GgmlType::F32), KvTypes(GgmlType::Q8_0),
                                   KvTypes(GgmlType::F16, GgmlType::Q8_0));
  // GQA 1, 4, 8, 16 (two blocks per KV group) and 12 (two blocks of 6 warps) at head dim 64/128;
  // 7 at 256 (two blocks of 4 warps, one idle); 80 and 96; causal, window, soft-cap and both.
  for (Case cs : {Case{4, 4, 64, {}, false}, Case{8, 2, 64, {8, 0.0f}, true}, Case{8, 1, 64, {0, 1.5f}, true},
                  Case{16, 1, 64, {33, 2.0f}, true}, Case{8, 2, 128, {}, false}, Case{12, 1, 128, {0, 0.0f}, true},
                  Case{7, 1, 256, {20, 0.0f}, true}, Case{4, 4, 256, {}, false}, Case{2, 1, 80, {}, false},
                  Case{6, 2, 96, {0, 2.0f}, true}}) {
    INFO(kv_types_name(kv_type) << " heads " << cs.n_heads << "/" << cs.n_kv << " head_dim " << cs.hd << " window "
                                << cs.e.window << " softcap " << cs.e.softcap);
    // Chunks of 2, 3, 16, 17 and 40 tokens (one to three tiles) from 0, mid-block, a block edge
    // and after a cached prefix, beside a decode row.
    const std::vector<TestSeq> seqs = {TestSeq{{}, 0, 17}, TestSeq{{}, 5, 1},  TestSeq{{}, 3, 16},
                                       TestSeq{{}, 37, 40}, TestSeq{{}, 90, 2}, TestSeq{{}, 0, 3}};
    const auto r = run_attention(cs.n_heads, cs.n_kv, cs.hd, 16, seqs, 600 + cs.hd + cs.n_heads, kv_type,
                                 cs.ext ? &cs.e : nullptr, {}, prefill_with(PrefillAttention::Mma));
    require_close(r[1], r[0], kMmaAtol, 0.0f, "tensor-core prefill attention");
  }
}

TEST_CASE("cuda: tensor-core prefill attention reads holes and K-shifted blocks as the CPU does",
          "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  const KvTypes kv_type = GENERATE(KvTypes(GgmlType::F16), KvTypes(GgmlType::Q8_0));
  for (int window : {0, 24}) {
    INFO(kv_types_name(kv_type) << " window " << window);
    const int n_heads = 8, n_kv = 2, hd = 128, bs = 8;
    const uint32_t seed = 700 + window;
    // A 20-token chunk after 130 cached tokens (blocks of 8 drawn from a shuffled pool with
    // spare ones between them) and a chunk from 0; with a window, the blocks wholly behind the
    // chunk's first row's window are holes (-1), as released ones.
    std::vector<TestSeq> seqs = {TestSeq{{}, 130, 20}, TestSeq{{}, 0, 9}};
    KvCacheConfig c;
    c.types = kv_type;
    c.n_layers = 2;
    c.block_size = bs;
    c.n_kv_heads = n_kv;
    c.head_dim = hd;
    c.num_blocks = assign_blocks(seqs, bs, seed, 6);
    for (size_t bi = 0; window > 0 && static_cast<int>(bi + 1) * bs <= seqs[0].n_past + 1 - window; ++bi)
      seqs[0].blocks[bi] = -1;
    Pair p(c, prefill_with(PrefillAttention::Mma));
    p.fill_cache(seed);
    // K-shift two of the chunk's cached blocks (one in the window, one partly) first.
    StepPlan plan = make_plan(seqs, bs);
    plan.k_shifts = {{seqs[0].blocks[15], -9}, {seqs[0].blocks[13], 40}};
    std::vector<std::vector<float>> r(2);
    AttentionExtras e{window, 0.0f};
    for (int i = 0; i < 2; ++i) {
      p.both[i]->begin_step(plan);
      RopeConfig rc;
      rc.head_dim = hd;
      p.both[i]->apply_cache_edits(rc);
      r[i] = attend_step(*p.both[i], plan, n_heads, n_kv, hd, seed, window > 0 ? &e : nullptr);
    }
    require_close(r[1], r[0], kMmaAtol, 0.0f, "tensor-core prefill attention, holes and shifts");
  }
}

TEST_CASE("cuda: tensor-core prefill rows do not depend on their batch; tree rows beside them", "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  const int n_heads = 8, n_kv = 2, hd = 128, bs = 16;
  const uint32_t seed = 800;
  // X (a 40-token chunk after 37 cached tokens) alone, then first in a batch of chunks, decode
  // rows and a longer context: X's rows must be bit-identical.
  std::vector<TestSeq> seqs = {TestSeq{{}, 37, 40}, TestSeq{{}, 0, 17}, TestSeq{{}, 5, 1}, TestSeq{{}, 300, 33},
                               TestSeq{{}, 2, 50}};
  KvCacheConfig c;
  c.n_layers = 2;
  c.block_size = bs;
  c.n_kv_heads = n_kv;
  c.head_dim = hd;
  c.num_blocks = assign_blocks(seqs, bs, seed, 4);
  Pair p(c, prefill_with(PrefillAttention::Mma));
  p.fill_cache(seed);
  const auto batch = attend_step(*p.gpu, make_plan(seqs, bs), n_heads, n_kv, hd, seed);
  const auto alone = attend_step(*p.gpu, make_plan({seqs[0]}, bs), n_heads, n_kv, hd, seed);
  const std::vector<float> x_in_batch(batch.begin(), batch.begin() + static_cast<ptrdiff_t>(alone.size()));
  CHECK(alone == x_in_batch);
  // A token tree (decode kernel) in the same step as tensor-core prefill chunks, windowed and capped.
  const std::vector<int> parent{-1, 0, 1, 0, 3, 1, 5};
  const AttentionExtras e{20, 1.5f};
  const auto r = run_attention(4, 2, 64, 16, {TestSeq{{}, 45, 7}, TestSeq{{}, 30, 1}, TestSeq{{}, 9, 5}}, 810,
                               GgmlType::F16, &e, tree_edit(parent, 45), prefill_with(PrefillAttention::Mma));
  require_close(r[1], r[0], kMmaAtol, 0.0f, "tree rows beside tensor-core prefill");
}

TEST_CASE("cuda: tensor-core prefill at long chunks and contexts (PAGODA_GPU_HEAVY=1)", "[gpu][heavy][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  const char* heavy = std::getenv("PAGODA_GPU_HEAVY");
  if (!heavy || std::string(heavy) != "1") {
    WARN("long-shape attention comparison skipped: set PAGODA_GPU_HEAVY=1 (minutes under the emulator)");
    return;
  }
  // Chunks of 4,096 tokens from 0 and of 512 after 12,000 cached ones, decode rows at 32k and
  // 16k contexts; GQA 4 at head dim 128, GQA 8 with a window and a cap at 256.
  struct Case {
    int n_heads, n_kv, hd;
    AttentionExtras e;
    bool ext;
  };
  const KvTypes kv_type = GENERATE(KvTypes(GgmlType::F16), KvTypes(GgmlType::Q8_0));
  for (Case cs : {Case{8, 2, 128, {}, false}, Case{8, 1, 256, {4096, 30.0f}, true}}) {
    INFO(kv_types_name(kv_type) << " heads " << cs.n_heads << "/" << cs.n_kv << " head_dim " << cs.hd);
    const std::vector<TestSeq> seqs = {TestSeq{{}, 0, 4096}, TestSeq{{}, 12000, 512}, TestSeq{{}, 32767, 1},
                                       TestSeq{{}, 16000, 1}};
    const auto r = run_attention(cs.n_heads, cs.n_kv, cs.hd, 16, seqs, 900 + cs.hd, kv_type, cs.ext ? &cs.e : nullptr,
                                 {}, prefill_with(PrefillAttention::Mma));
    require_close(r[1], r[0], kMmaAtol, 0.0f, "long tensor-core prefill attention");
  }
}
