// The CPU backend's non-matmul ops against plain scalar references (double precision, written
// from the definitions), with odd shapes: RMSNorm, add, bias, SiLU-gate, embedding, RoPE in both
// conventions (with and without rope_freqs), paged attention (GQA 1/2/4, scrambled block tables,
// prefill chunks after cached tokens, F16, F32 and Q8_0 KV), K-shift (with and without rope_freqs, and
// shifted K against K roped at the new position), block copy, logit-row gather; and the vector
// attention kernels (AVX2 plain / windowed / soft-capped, AVX-512) against the scalar ones, with
// each row bit-identical alone and in a group; and matmul on weights the backend keeps a decode
// layout of (Q5_K, IQ4_XS) against the kernels on the GGML bytes.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "engine/backend/cpu/backend_cpu.h"
#include "kernels/cpu/kv_quant.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops_window_softcap.h"
#include "kernels/cpu/ops_impl.h"
#include "kernels/cpu/quants.h"
#include "kernels/cpu/weight_pack.h"
#include "tests/support/isa.h"

using namespace pagoda;

namespace {

std::vector<float> randoms(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

Tensor filled(CpuBackend& be, int64_t rows, int64_t cols, const std::vector<float>& v) {
  Tensor t = be.alloc(rows, cols);
  std::memcpy(t.data, v.data(), sizeof(float) * v.size());
  return t;
}

std::vector<float> host(CpuBackend& be, const Tensor& t, int64_t rows) {
  std::vector<float> v(static_cast<size_t>(rows * t.cols));
  be.read(t, rows, v.data());
  return v;
}

// rows x cols random weights quantized to `type`, in the GGML layout.
std::vector<uint8_t> random_quantized(GgmlType type, int64_t rows, int64_t cols, uint64_t seed) {
  const auto wf = randoms(static_cast<size_t>(rows * cols), seed);
  std::vector<uint8_t> q(ggml_row_size(type, cols) * rows);
  for (int64_t r = 0; r < rows; ++r)
    cpu::quantize_row(type, wf.data() + r * cols, q.data() + r * ggml_row_size(type, cols), cols);
  return q;
}

// be.matmul of w, uploaded from the GGML bytes q, on n random rows: the scalar kernel's bits on q.
void check_matmul_bits(CpuBackend& be, const Tensor& w, const std::vector<uint8_t>& q, int64_t n, uint64_t seed) {
  const auto xv = randoms(static_cast<size_t>(n * w.cols), seed);
  Tensor x = filled(be, n, w.cols, xv);
  Tensor out = be.alloc(n, w.rows);
  be.matmul(w, x, out, n);
  std::vector<float> want(static_cast<size_t>(n * w.rows));
  cpu::ThreadPool pool(2);
  cpu::matmul(pool, cpu::CpuIsa::Scalar, w.type, q.data(), w.rows, w.cols, xv.data(), n, want.data());
  INFO(ggml_type_info(w.type).name << " n=" << n);
  CHECK(std::memcmp(host(be, out, n).data(), want.data(), want.size() * sizeof(float)) == 0);
}

// Relative to the largest reference magnitude: the error measure used throughout.
double max_rel_err(const std::vector<float>& got, const std::vector<double>& want) {
  double mx = 1e-30, err = 0;
  for (double w : want) mx = std::max(mx, std::fabs(w));
  for (size_t i = 0; i < want.size(); ++i) err = std::max(err, std::fabs(got[i] - want[i]));
  return err / mx;
}

struct SeqSpec {
  std::vector<int32_t> table;  // block ids
  int n_past = 0;              // cached tokens before the step
  int n_new = 0;               // tokens of this step
};

// A plan over several sequences; every token gets logits.
StepPlan make_plan(const std::vector<SeqSpec>& specs, int block_size) {
  StepPlan p;
  for (size_t s = 0; s < specs.size(); ++s) {
    const SeqSpec& sp = specs[s];
    SeqInStep seq;
    seq.seq_id = s;
    seq.first_token = p.n_tokens();
    seq.n_tokens = sp.n_new;
    seq.n_past = sp.n_past;
    seq.block_table_offset = static_cast<int32_t>(p.block_tables.size());
    seq.n_blocks = static_cast<int32_t>(sp.table.size());
    p.block_tables.insert(p.block_tables.end(), sp.table.begin(), sp.table.end());
    for (int i = sp.n_past; i < sp.n_past + sp.n_new; ++i) {
      p.logit_rows.push_back(p.n_tokens());
      p.tokens.push_back(0);
      p.positions.push_back(i);
      p.slots.push_back(sp.table[static_cast<size_t>(i / block_size)] * block_size + i % block_size);
      p.token_seq.push_back(static_cast<int32_t>(s));
    }
    p.seqs.push_back(seq);
  }
  return p;
}

// Reference rotation of one head in double precision, from the GGUF definitions; `ff`: the
// optional per-pair frequency divisors (rope_freqs.weight).
void ref_rope(double* x, int n_rot, double pos, double base, double scale, bool neox,
              const float* ff = nullptr) {
  for (int i = 0; i < n_rot / 2; ++i) {
    const double th = pos * scale * std::pow(base, -2.0 * i / n_rot) / (ff ? double(ff[i]) : 1.0);
    const int a = neox ? i : 2 * i, b = neox ? i + n_rot / 2 : 2 * i + 1;
    const double x0 = x[a], x1 = x[b];
    x[a] = x0 * std::cos(th) - x1 * std::sin(th);
    x[b] = x0 * std::sin(th) + x1 * std::cos(th);
  }
}

float round_f16(float x) { return cpu::fp16_to_fp32(cpu::fp32_to_fp16(x)); }

// `row` (whole heads of head_dim) as the cache of `type` stores it: the references then see
// exactly the values the kernels read.
void round_kv(GgmlType type, std::vector<float>& row, int head_dim) {
  if (type == GgmlType::F16) {
    for (auto& x : row) x = round_f16(x);
  } else if (type == GgmlType::Q8_0) {
    const int group = kv_q8_group(head_dim);
    std::vector<uint8_t> q(row.size() / size_t(group) * size_t(group + 2));
    cpu::kv_q8_quantize(row.data(), int64_t(row.size()), group, q.data());
    cpu::kv_q8_dequantize(q.data(), int64_t(row.size()), group, row.data());
  }
}

// The head sizes a test runs for a KV type: Q8_0 needs multiples of 8 (8, 48, 64 take its
// three group sizes 8, 16, 32).
std::vector<int> head_dims_for(GgmlType type, std::vector<int> plain) {
  return type == GgmlType::Q8_0 ? std::vector<int>{8, 48, 64} : plain;
}

}  // namespace

TEST_CASE("rms_norm, add, add_bias, silu_mul match scalar references", "[cpu_ops]") {
  CpuBackend be(2);
  for (int64_t cols : {1, 7, 16, 37, 300, 2051}) {
    const int64_t rows = 5;
    const auto xv = randoms(static_cast<size_t>(rows * cols), 1 + cols, -3, 3);
    const auto wv = randoms(static_cast<size_t>(cols), 2 + cols);
    const auto yv = randoms(static_cast<size_t>(rows * cols), 3 + cols, -3, 3);
    Tensor x = filled(be, rows, cols, xv), w = filled(be, 1, cols, wv), y = filled(be, rows, cols, yv);
    Tensor out = be.alloc(rows, cols);

    be.rms_norm(x, w, 1e-5f, out, rows);
    std::vector<double> ref(xv.size());
    for (int64_t r = 0; r < rows; ++r) {
      double ss = 0;
      for (int64_t c = 0; c < cols; ++c) ss += double(xv[r * cols + c]) * xv[r * cols + c];
      const double s = 1.0 / std::sqrt(ss / cols + 1e-5);
      for (int64_t c = 0; c < cols; ++c) ref[r * cols + c] = xv[r * cols + c] * s * wv[c];
    }
    CHECK(max_rel_err(host(be, out, rows), ref) < 1e-6);

    be.silu_mul(x, y, out, rows);
    for (size_t i = 0; i < ref.size(); ++i) ref[i] = xv[i] / (1.0 + std::exp(-double(xv[i]))) * yv[i];
    CHECK(max_rel_err(host(be, out, rows), ref) < 1e-6);

    be.add(x, y, rows);
    for (size_t i = 0; i < ref.size(); ++i) ref[i] = double(xv[i]) + yv[i];
    CHECK(max_rel_err(host(be, x, rows), ref) < 1e-7);

    be.add_bias(y, w, rows);
    for (size_t i = 0; i < ref.size(); ++i) ref[i] = double(yv[i]) + wv[i % cols];
    CHECK(max_rel_err(host(be, y, rows), ref) < 1e-7);
  }
}

TEST_CASE("silu_mul is accurate for large magnitudes", "[cpu_ops]") {
  CpuBackend be(1);
  std::vector<float> g = {-200.f, -90.f, -20.f, -1e-3f, 0.f, 1e-3f, 20.f, 90.f, 200.f};
  std::vector<float> u(g.size(), 1.5f);
  Tensor tg = filled(be, 1, static_cast<int64_t>(g.size()), g), tu = filled(be, 1, static_cast<int64_t>(g.size()), u);
  Tensor out = be.alloc(1, static_cast<int64_t>(g.size()));
  be.silu_mul(tg, tu, out, 1);
  const auto got = host(be, out, 1);
  for (size_t i = 0; i < g.size(); ++i) {
    const double want = g[i] / (1.0 + std::exp(-double(g[i]))) * 1.5;
    CHECK(std::fabs(got[i] - want) <= 1e-6 * std::max(1.0, std::fabs(want)));
  }
}

TEST_CASE("embed dequantizes the rows of the step's tokens", "[cpu_ops]") {
  CpuBackend be(2);
  be.init_kv_cache(KvCacheConfig{1, 4, 16, 1, 8, GgmlType::F32});
  const int64_t vocab = 11, dim = 64;
  const auto tab = randoms(static_cast<size_t>(vocab * dim), 9);
  for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::Q8_0}) {
    std::vector<uint8_t> q(ggml_row_size(type, dim) * vocab);
    for (int64_t r = 0; r < vocab; ++r)
      cpu::quantize_row(type, tab.data() + r * dim, q.data() + r * ggml_row_size(type, dim), dim);
    Tensor w = be.upload_weight(q.data(), type, vocab, dim);
    StepPlan p = make_plan({SeqSpec{{0, 1}, 0, 20}}, 16);
    for (int i = 0; i < 20; ++i) p.tokens[static_cast<size_t>(i)] = (i * 7) % vocab;
    be.begin_step(p);
    Tensor out = be.alloc(20, dim);
    be.embed(w, out);
    const auto got = host(be, out, 20);
    std::vector<float> row(static_cast<size_t>(dim));
    for (int i = 0; i < 20; ++i) {
      const int tok = (i * 7) % vocab;
      cpu::dequantize_row(type, q.data() + tok * ggml_row_size(type, dim), row.data(), dim);
      CHECK(std::memcmp(got.data() + i * dim, row.data(), sizeof(float) * dim) == 0);
    }
    p.tokens[3] = static_cast<int32_t>(vocab);
    be.begin_step(p);
    CHECK_THROWS(be.embed(w, out));
  }
}

TEST_CASE("matmul on uploaded quantized weights (decode layout on AVX2 hosts) gives the GGML bits", "[cpu_ops]") {
  // On an AVX2-level host upload_weight keeps a decode-layout copy of these types
  // (weight_pack.h) that every matmul reads (n = 20: the prefill tile unpacks it); heap memory
  // such as this test's keeps its bytes (want below is computed from them after the upload).
  const DecodePack mode = GENERATE(DecodePack::On, DecodePack::Off, DecodePack::Auto);
  CpuBackend be(2, mode);
  const int64_t rows = 75, cols = 512;  // 9 full groups of 8 rows and a partial one
  for (GgmlType type : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::IQ4_NL, GgmlType::Q8_0,
                         GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_XS}) {
    const auto q = random_quantized(type, rows, cols, 31);
    const Tensor w = be.upload_weight(q.data(), type, rows, cols);
    CHECK(w.data == q.data());
    for (int64_t n : {1, 3, 20}) check_matmul_bits(be, w, q, n, static_cast<uint64_t>(32 + n));
  }
}

TEST_CASE("matmul_same_x gives each matmul's GGML bits, together or one by one", "[cpu_ops]") {
  // q/k/v-like matrices of one type go through one job (decode-layout copies or not); a set with
  // two types falls back to separate matmuls. Each output equals the scalar kernel's on its bytes.
  const DecodePack mode = GENERATE(DecodePack::On, DecodePack::Off);
  CpuBackend be(2, mode);
  const int64_t cols = 512, rows[] = {80, 16, 48};
  for (const auto& types : std::vector<std::vector<GgmlType>>{{GgmlType::Q8_0, GgmlType::Q8_0, GgmlType::Q8_0},
                                                            {GgmlType::Q4_K, GgmlType::Q4_K, GgmlType::Q4_K},
                                                            {GgmlType::Q6_K, GgmlType::Q6_K, GgmlType::Q6_K},
                                                            {GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q4_K}}) {
    std::vector<std::vector<uint8_t>> q;
    std::vector<Tensor> w;
    for (int j = 0; j < 3; ++j) q.push_back(random_quantized(types[j], rows[j], cols, 50 + j));
    for (int j = 0; j < 3; ++j) w.push_back(be.upload_weight(q[j].data(), types[j], rows[j], cols));
    for (int64_t n : {1, 4, 20}) {
      const auto xv = randoms(static_cast<size_t>(n * cols), 60 + n);
      Tensor x = filled(be, n, cols, xv);
      std::vector<Tensor> out;
      for (int j = 0; j < 3; ++j) out.push_back(be.alloc(n, rows[j]));
      const Tensor* wp[] = {&w[0], &w[1], &w[2]};
      Tensor* op[] = {&out[0], &out[1], &out[2]};
      be.matmul_same_x(wp, 3, x, op, n);
      cpu::ThreadPool pool(2);
      for (int j = 0; j < 3; ++j) {
        std::vector<float> want(static_cast<size_t>(n * rows[j]));
        cpu::matmul(pool, cpu::CpuIsa::Scalar, types[j], q[j].data(), rows[j], cols, xv.data(), n, want.data());
        INFO(ggml_type_info(types[j]).name << " matrix " << j << " n=" << n);
        CHECK(std::memcmp(host(be, out[j], n).data(), want.data(), want.size() * sizeof(float)) == 0);
      }
    }
  }
}

namespace {
// Resident bytes of this process's mapping that contains p (/proc/self/smaps), or -1.
long resident_bytes_of_mapping(const void* p) {
  const auto at = reinterpret_cast<uintptr_t>(p);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > line.find(' ')) {
      inside = at >= lo && at < hi;
    } else if (inside && line.rfind("Rss:", 0) == 0) {
      return std::stol(line.substr(4)) * 1024;
    }
  }
  return -1;
}
}  // namespace

TEST_CASE("a packed matrix of a mapped file gives its pages back and still computes the same bits", "[cpu_ops]") {
  // What a GGUF mapping is to CpuBackend: read-only, private, file-backed. Once the decode
  // layout copy is made (AVX2 hosts), the mapping's pages are unmapped; every matmul reads the
  // copy, and a later read of the mapping (as a tied embedding's lookup does) faults them back.
  const int64_t rows = 64, cols = 1024;
  const GgmlType type = GgmlType::Q4_K;
  const auto q = random_quantized(type, rows, cols, 41);
  const size_t bytes = q.size();
  const std::string path = "/tmp/pagoda-test-mapped-" + std::to_string(::getpid()) + ".bin";
  {
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(q.data()), static_cast<std::streamsize>(bytes));
  }
  const int fd = ::open(path.c_str(), O_RDONLY);
  REQUIRE(fd >= 0);
  void* map = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  std::remove(path.c_str());
  REQUIRE(map != MAP_FAILED);
  CpuBackend be(2, DecodePack::On);
  const Tensor w = be.upload_weight(map, type, rows, cols);
  if (cpu::decode_pack_useful(cpu::default_cpu_isa(), type, rows, cols)) {
    INFO("resident bytes of the mapping after packing");
    CHECK(resident_bytes_of_mapping(map) < static_cast<long>(bytes) / 4);
  }
  for (int64_t n : {1, 20}) check_matmul_bits(be, w, q, n, static_cast<uint64_t>(42 + n));
  CHECK(std::memcmp(map, q.data(), bytes) == 0);  // the file's bytes, faulted back in
  ::munmap(map, bytes);
}

TEST_CASE("--cpu-decode-pack values", "[cpu_ops]") {
  CHECK(parse_decode_pack("auto", "--cpu-decode-pack") == DecodePack::Auto);
  CHECK(parse_decode_pack("on", "--cpu-decode-pack") == DecodePack::On);
  CHECK(parse_decode_pack("off", "--cpu-decode-pack") == DecodePack::Off);
  CHECK_THROWS_WITH(parse_decode_pack("yes", "--cpu-decode-pack"), Catch::Matchers::Contains("--cpu-decode-pack"));
}

TEST_CASE("rope rotates pairs (llama) or halves (neox) by the step's positions", "[cpu_ops]") {
  CpuBackend be(2);
  be.init_kv_cache(KvCacheConfig{1, 200, 16, 1, 8, GgmlType::F32});
  for (bool neox : {false, true}) {
    for (int head_dim : {8, 20, 64}) {
      for (int n_rot : {head_dim, head_dim / 2}) {
        for (bool with_ff : {false, true}) {
          if (n_rot % 2) continue;
          // Divisors as Llama 3.1 writes them (1 .. 8), plus some below 1.
          const auto ffv = randoms(static_cast<size_t>(n_rot / 2), 7 + n_rot, 0.3f, 8.0f);
          const int n_heads = 3;
          std::vector<int32_t> table(200);
          for (int i = 0; i < 200; ++i) table[static_cast<size_t>(i)] = i;
          StepPlan p = make_plan({SeqSpec{table, 0, 5}, SeqSpec{table, 3000, 4}}, 16);
          const int64_t n = p.n_tokens(), cols = int64_t{n_heads} * head_dim;
          const auto xv = randoms(static_cast<size_t>(n * cols), 50 + head_dim + n_rot);
          Tensor x = filled(be, n, cols, xv);
          be.begin_step(p);
          RopeConfig rc{n_rot, 500000.0f, 0.25f, neox, {}};
          if (with_ff) rc.freq_factors = Tensor{const_cast<float*>(ffv.data()), GgmlType::F32, 1, n_rot / 2};
          be.rope(x, n_heads, rc);
          std::vector<double> ref(xv.begin(), xv.end());
          for (int64_t t = 0; t < n; ++t)
            for (int h = 0; h < n_heads; ++h)
              ref_rope(ref.data() + t * cols + h * head_dim, n_rot, p.positions[static_cast<size_t>(t)],
                       500000.0, 0.25, neox, with_ff ? ffv.data() : nullptr);
          INFO("neox " << neox << " head_dim " << head_dim << " n_rot " << n_rot << " factors " << with_ff);
          CHECK(max_rel_err(host(be, x, n), ref) < 2e-6);
        }
      }
    }
  }
}

namespace {

// Scalar attention straight from the definition, over K/V stored per logical index.
std::vector<double> ref_attention(const std::vector<float>& q, const std::vector<std::vector<float>>& K,
                                  const std::vector<std::vector<float>>& V, int pos, int n_heads,
                                  int n_kv_heads, int head_dim) {
  std::vector<double> out(static_cast<size_t>(n_heads * head_dim), 0.0);
  const double scale = 1.0 / std::sqrt(double(head_dim));
  for (int h = 0; h < n_heads; ++h) {
    const int kvh = h / (n_heads / n_kv_heads);
    std::vector<double> s(static_cast<size_t>(pos + 1));
    double mx = -1e300, sum = 0;
    for (int i = 0; i <= pos; ++i) {
      double d = 0;
      for (int c = 0; c < head_dim; ++c) d += double(q[h * head_dim + c]) * K[i][kvh * head_dim + c];
      s[i] = d * scale;
      mx = std::max(mx, s[i]);
    }
    for (auto& x : s) sum += x = std::exp(x - mx);
    for (int i = 0; i <= pos; ++i)
      for (int c = 0; c < head_dim; ++c) out[h * head_dim + c] += s[i] / sum * V[i][kvh * head_dim + c];
  }
  return out;
}

}  // namespace

TEST_CASE("paged attention matches a scalar reference over block tables", "[cpu_ops]") {
  const int bs = 4;
  struct Layout {
    std::vector<SeqSpec> seqs;
    const char* what;
  };
  const std::vector<Layout> layouts = {
      {{SeqSpec{{0, 1, 2}, 0, 9}}, "one prefill, contiguous blocks"},
      {{SeqSpec{{7, 2, 5, 1}, 0, 13}}, "one prefill, scrambled blocks"},
      {{SeqSpec{{3, 6, 0}, 6, 5}}, "prefill chunk after 6 cached tokens"},
      {{SeqSpec{{4, 9}, 7, 1}, SeqSpec{{8}, 2, 1}, SeqSpec{{10, 11, 2}, 0, 10}}, "decodes and a prefill"},
      {{SeqSpec{{5, 3}, 4, 1}, SeqSpec{{5, 1}, 4, 3}}, "two sequences sharing a prefix block"},
  };
  for (GgmlType kv_type : {GgmlType::F32, GgmlType::F16, GgmlType::Q8_0}) {
    for (int ratio : {1, 2, 4}) {
      for (int head_dim : head_dims_for(kv_type, {8, 20, 64})) {
        const int n_kv = 2, n_heads = n_kv * ratio;
        CpuBackend be(2);
        be.init_kv_cache(KvCacheConfig{2, 12, bs, n_kv, head_dim, kv_type});
        const int kv_cols = n_kv * head_dim, q_cols = n_heads * head_dim;
        for (const Layout& lay : layouts) {
          INFO(lay.what << ", kv " << ggml_type_info(kv_type).name << ", ratio " << ratio
                        << ", head_dim " << head_dim);
          // Every sequence's K/V by logical index; cached ones written first, in their own step.
          uint64_t seed = 1000;
          std::vector<std::vector<std::vector<float>>> K(lay.seqs.size()), V(lay.seqs.size());
          for (size_t s = 0; s < lay.seqs.size(); ++s) {
            const SeqSpec& sp = lay.seqs[s];
            for (int i = 0; i < sp.n_past + sp.n_new; ++i) {
              // Cached tokens are seeded by their slot, so sequences sharing a block agree on it.
              const int slot = sp.table[size_t(i / bs)] * bs + i % bs;
              const uint64_t sk = i < sp.n_past ? 5000 + 2 * slot : seed++;
              const uint64_t sv = i < sp.n_past ? 5001 + 2 * slot : seed++;
              K[s].push_back(randoms(static_cast<size_t>(kv_cols), sk, -2, 2));
              V[s].push_back(randoms(static_cast<size_t>(kv_cols), sv));
              round_kv(kv_type, K[s].back(), head_dim);
              round_kv(kv_type, V[s].back(), head_dim);
            }
            if (sp.n_past > 0) {
              StepPlan cached = make_plan({SeqSpec{sp.table, 0, sp.n_past}}, bs);
              std::vector<float> kf, vf;
              for (int i = 0; i < sp.n_past; ++i) {
                kf.insert(kf.end(), K[s][i].begin(), K[s][i].end());
                vf.insert(vf.end(), V[s][i].begin(), V[s][i].end());
              }
              Tensor tk = filled(be, sp.n_past, kv_cols, kf), tv = filled(be, sp.n_past, kv_cols, vf);
              be.begin_step(cached);
              be.store_kv(1, tk, tv);
            }
          }
          StepPlan p = make_plan(lay.seqs, bs);
          const int n = p.n_tokens();
          std::vector<float> kf, vf;
          for (int t = 0; t < n; ++t) {
            const size_t s = static_cast<size_t>(p.token_seq[static_cast<size_t>(t)]);
            const int pos = p.positions[static_cast<size_t>(t)];
            kf.insert(kf.end(), K[s][pos].begin(), K[s][pos].end());
            vf.insert(vf.end(), V[s][pos].begin(), V[s][pos].end());
          }
          const auto qv = randoms(static_cast<size_t>(n * q_cols), 77, -2, 2);
          Tensor q = filled(be, n, q_cols, qv), out = be.alloc(n, q_cols);
          Tensor tk = filled(be, n, kv_cols, kf), tv = filled(be, n, kv_cols, vf);
          be.begin_step(p);
          be.store_kv(1, tk, tv);
          be.attention(1, q, out, n_heads, n_kv, head_dim, 1.0f / std::sqrt(float(head_dim)));
          const auto got = host(be, out, n);
          for (int t = 0; t < n; ++t) {
            const size_t s = static_cast<size_t>(p.token_seq[static_cast<size_t>(t)]);
            std::vector<float> qt(qv.begin() + t * q_cols, qv.begin() + (t + 1) * q_cols);
            const auto want = ref_attention(qt, K[s], V[s], p.positions[static_cast<size_t>(t)], n_heads, n_kv, head_dim);
            std::vector<float> g(got.begin() + t * q_cols, got.begin() + (t + 1) * q_cols);
            CHECK(max_rel_err(g, want) < 2e-6);
          }
        }
      }
    }
  }
}

TEST_CASE("attention results do not depend on the thread count or batch mates", "[cpu_ops]") {
  const int bs = 16, n_kv = 4, head_dim = 64, n_heads = 32;
  std::vector<float> results[2];
  int idx = 0;
  for (int threads : {1, 2}) {
    CpuBackend be(threads);
    be.init_kv_cache(KvCacheConfig{1, 16, bs, n_kv, head_dim, GgmlType::F16});
    StepPlan p = make_plan({SeqSpec{{3, 1, 4}, 0, 40}}, bs);
    const int n = p.n_tokens();
    Tensor k = filled(be, n, n_kv * head_dim, randoms(size_t(n) * n_kv * head_dim, 5));
    Tensor v = filled(be, n, n_kv * head_dim, randoms(size_t(n) * n_kv * head_dim, 6));
    Tensor q = filled(be, n, n_heads * head_dim, randoms(size_t(n) * n_heads * head_dim, 7));
    Tensor out = be.alloc(n, n_heads * head_dim);
    be.begin_step(p);
    be.store_kv(0, k, v);
    be.attention(0, q, out, n_heads, n_kv, head_dim, 0.125f);
    results[idx++] = host(be, out, n);
    // The last token alone (a decode step over the same cache) gives the same bits.
    StepPlan last = make_plan({SeqSpec{{3, 1, 4}, 39, 1}}, bs);
    const auto qh = host(be, q, n);
    Tensor q1 = filled(be, 1, n_heads * head_dim, std::vector<float>(qh.end() - n_heads * head_dim, qh.end()));
    Tensor out1 = be.alloc(1, n_heads * head_dim);
    be.begin_step(last);
    be.attention(0, q1, out1, n_heads, n_kv, head_dim, 0.125f);
    const auto alone = host(be, out1, 1);
    CHECK(std::memcmp(alone.data(), results[idx - 1].data() + (n - 1) * n_heads * head_dim,
                      sizeof(float) * alone.size()) == 0);
  }
  CHECK(results[0] == results[1]);
}

TEST_CASE("backend memory comes 64-byte aligned and zeroed, also where the heap reuses freed blocks", "[cpu_ops]") {
  // Buffers of many sizes (small ones come from the heap, large ones from fresh pages), filled
  // with garbage and freed with their backend; a second backend's buffers of the same sizes
  // and its KV pools, initialised twice, must read all zeros.
  const std::vector<int64_t> cols = {1, 7, 64, 1000, 4096, 70000, 300000};
  {
    CpuBackend be(1);
    for (int64_t c : cols) {
      Tensor t = be.alloc(3, c);
      std::memset(t.data, 0xA5, sizeof(float) * 3 * c);
    }
    be.init_kv_cache(KvCacheConfig{2, 40, 16, 2, 64, GgmlType::F16});
    const std::vector<float> k(16 * 2 * 64, 3.0f);
    for (int b = 0; b < 40; ++b) be.write_kv_block(1, b, k.data(), k.data());
  }
  CpuBackend be(1);
  for (int64_t c : cols) {
    Tensor t = be.alloc(3, c);
    INFO("cols " << c);
    CHECK(reinterpret_cast<uintptr_t>(t.data) % 64 == 0);
    const auto v = host(be, t, 3);
    CHECK(std::all_of(v.begin(), v.end(), [](float x) { return x == 0.0f; }));
    std::memset(t.data, 0x5A, sizeof(float) * 3 * c);
  }
  for (int round = 0; round < 2; ++round) {
    be.init_kv_cache(KvCacheConfig{2, 40, 16, 2, 64, GgmlType::F16});
    std::vector<float> k(16 * 2 * 64, 1.0f), v(k.size(), 1.0f);
    bool zero = true;
    for (int l = 0; l < 2; ++l)
      for (int b = 0; b < 40; ++b) {
        be.read_kv_block(l, b, k.data(), v.data());
        zero = zero && std::all_of(k.begin(), k.end(), [](float x) { return x == 0.0f; }) &&
               std::all_of(v.begin(), v.end(), [](float x) { return x == 0.0f; });
        const std::vector<float> garbage(k.size(), 7.0f);
        be.write_kv_block(l, b, garbage.data(), garbage.data());
      }
    INFO("KV round " << round);
    CHECK(zero);
  }
}

TEST_CASE("K-shift re-ropes K by delta, leaves V alone; block copy copies K and V", "[cpu_ops]") {
  const int bs = 5, n_kv = 3, head_dim = 16;
  const int row = n_kv * head_dim;
  const std::vector<float> ffv = {1.0f, 8.0f, 0.5f, 3.0f};  // rope_freqs for n_rot 8
  for (GgmlType kv_type : {GgmlType::F32, GgmlType::F16, GgmlType::Q8_0}) {
    for (bool neox : {false, true}) {
      for (bool with_ff : {false, true}) {
        CpuBackend be(2);
        be.init_kv_cache(KvCacheConfig{2, 6, bs, n_kv, head_dim, kv_type});
        std::vector<std::vector<float>> k0, v0;
        for (int l = 0; l < 2; ++l)
          for (int b = 0; b < 6; ++b) {
            k0.push_back(randoms(size_t(bs) * row, 100 + l * 6 + b));
            v0.push_back(randoms(size_t(bs) * row, 200 + l * 6 + b));
            round_kv(kv_type, k0.back(), head_dim);
            round_kv(kv_type, v0.back(), head_dim);
            be.write_kv_block(l, b, k0.back().data(), v0.back().data());
          }
        StepPlan p;
        p.block_copies = {BlockCopy{1, 4}, BlockCopy{2, 5}};
        p.k_shifts = {KShift{4, -37}, KShift{0, 11}};
        be.begin_step(p);
        RopeConfig rc{8, 10000.0f, 1.0f, neox, {}};  // n_rot < head_dim: dims 8..11 untouched
        if (with_ff) rc.freq_factors = Tensor{const_cast<float*>(ffv.data()), GgmlType::F32, 1, 4};
        be.apply_cache_edits(rc);
        std::vector<float> k(size_t(bs) * row), v(size_t(bs) * row);
        for (int l = 0; l < 2; ++l) {
          for (int b = 0; b < 6; ++b) {
            be.read_kv_block(l, b, k.data(), v.data());
            const int src = b == 4 ? 1 : b == 5 ? 2 : b;
            const int delta = b == 4 ? -37 : b == 0 ? 11 : 0;
            INFO(ggml_type_info(kv_type).name << " layer " << l << " block " << b << " neox " << neox
                                              << " factors " << with_ff);
            CHECK(v == v0[size_t(l * 6 + src)]);
            std::vector<double> want(k0[size_t(l * 6 + src)].begin(), k0[size_t(l * 6 + src)].end());
            for (int s = 0; s < bs * n_kv; ++s)
              ref_rope(want.data() + s * head_dim, 8, delta, 10000.0, 1.0, neox, with_ff ? ffv.data() : nullptr);
            // F16 storage rounds the rotated values once more (relative 2^-11); Q8_0 re-quantizes
            // them (at most half a step, max|group| / 254, of the largest value).
            const double tol = kv_type == GgmlType::F16 ? 1e-3 : kv_type == GgmlType::Q8_0 ? 5e-3 : 1e-6;
            CHECK(max_rel_err(k, want) < tol);
            if (delta == 0) CHECK(k == k0[size_t(l * 6 + src)]);
          }
        }
      }
    }
  }
}

TEST_CASE("a K-shift with rope_freqs equals roping at the new position", "[cpu_ops][rope_freqs]") {
  // K roped at positions p0.. and cached, then shifted by delta, must read as K roped directly
  // at p0 + delta..: the context-shift invariant, with Llama 3.1-style frequency divisors.
  const int bs = 4, n_kv = 2, head_dim = 16, n_rot = 16, p0 = 400, delta = -300;
  const int64_t row = n_kv * head_dim;
  const std::vector<float> ffv = {1.0f, 1.0f, 1.2f, 2.0f, 3.5f, 6.0f, 8.0f, 8.0f};
  std::vector<int32_t> table(128);
  for (int i = 0; i < 128; ++i) table[static_cast<size_t>(i)] = i;
  for (GgmlType kv_type : {GgmlType::F32, GgmlType::F16}) {
    for (bool neox : {false, true}) {
      INFO("kv " << ggml_type_info(kv_type).name << " neox " << neox);
      CpuBackend be(2);
      be.init_kv_cache(KvCacheConfig{1, 128, bs, n_kv, head_dim, kv_type});
      RopeConfig rc{n_rot, 500000.0f, 1.0f, neox, {}};
      rc.freq_factors = Tensor{const_cast<float*>(ffv.data()), GgmlType::F32, 1, n_rot / 2};
      const auto kv = randoms(static_cast<size_t>(bs * row), 77 + neox);
      // Rope at p0.. and store: the tokens fill block p0 / bs exactly.
      be.begin_step(make_plan({SeqSpec{table, p0, bs}}, bs));
      Tensor k = filled(be, bs, row, kv), v = filled(be, bs, row, kv);
      be.rope(k, n_kv, rc);
      be.store_kv(0, k, v);
      StepPlan shift;
      shift.k_shifts = {KShift{p0 / bs, delta}};
      be.begin_step(shift);
      be.apply_cache_edits(rc);
      std::vector<float> got(static_cast<size_t>(bs * row)), vv(got.size());
      be.read_kv_block(0, p0 / bs, got.data(), vv.data());
      // The same rows roped directly at the new positions.
      be.begin_step(make_plan({SeqSpec{table, p0 + delta, bs}}, bs));
      Tensor direct = filled(be, bs, row, kv);
      be.rope(direct, n_kv, rc);
      const auto want_f = host(be, direct, bs);
      const std::vector<double> want(want_f.begin(), want_f.end());
      // F32: two roundings of the rotation; F16: the cache rounds twice (2^-11 each).
      CHECK(max_rel_err(got, want) < (kv_type == GgmlType::F16 ? 2e-3 : 2e-6));
      // Without the factors the shifted K would differ: the test can tell.
      RopeConfig plain = rc;
      plain.freq_factors = Tensor{};
      Tensor other = filled(be, bs, row, kv);
      be.rope(other, n_kv, plain);
      const auto other_f = host(be, other, bs);
      CHECK(max_rel_err(got, std::vector<double>(other_f.begin(), other_f.end())) > 1e-2);
    }
  }
}

TEST_CASE("begin_step rejects plans that point outside the cache", "[cpu_ops]") {
  CpuBackend be(1);
  be.init_kv_cache(KvCacheConfig{1, 4, 4, 1, 8, GgmlType::F16});
  StepPlan ok = make_plan({SeqSpec{{0, 3}, 0, 8}}, 4);
  CHECK_NOTHROW(be.begin_step(ok));
  StepPlan bad = ok;
  bad.block_tables[1] = 4;
  CHECK_THROWS_AS(be.begin_step(bad), std::invalid_argument);
  bad = ok;
  bad.slots[2] = 16;
  CHECK_THROWS_AS(be.begin_step(bad), std::invalid_argument);
  bad = ok;
  bad.positions[7] = 8;  // beyond the 2 blocks of its table
  CHECK_THROWS_AS(be.begin_step(bad), std::invalid_argument);
  bad = ok;
  bad.logit_rows.push_back(8);
  CHECK_THROWS_AS(be.begin_step(bad), std::invalid_argument);
  bad = ok;
  bad.k_shifts.push_back(KShift{9, 1});
  CHECK_THROWS_AS(be.begin_step(bad), std::invalid_argument);
}

TEST_CASE("gather_logit_rows picks the plan's rows in order", "[cpu_ops]") {
  CpuBackend be(1);
  be.init_kv_cache(KvCacheConfig{1, 4, 4, 1, 8, GgmlType::F16});
  StepPlan p = make_plan({SeqSpec{{0, 1}, 0, 6}}, 4);
  p.logit_rows = {5, 0, 3};
  const auto xv = randoms(6 * 9, 3);
  Tensor x = filled(be, 6, 9, xv), out = be.alloc(3, 9);
  be.begin_step(p);
  be.gather_logit_rows(x, out);
  const auto got = host(be, out, 3);
  for (int j = 0; j < 3; ++j)
    for (int c = 0; c < 9; ++c) CHECK(got[j * 9 + c] == xv[p.logit_rows[j] * 9 + c]);
}

TEST_CASE("portable and AVX-512 variants agree", "[cpu_ops][avx512]") {
  if (!testing::isa_available(cpu::CpuIsa::Avx512, cpu::detail::ops_have_avx512(), "AVX-512 F/BW/VL/DQ")) return;
  for (int64_t n : {1, 15, 16, 33, 2048}) {
    const auto x = randoms(size_t(n), 1, -30, 30), w = randoms(size_t(n), 2), u = randoms(size_t(n), 3);
    std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
    cpu::detail::rms_norm_row_portable(x.data(), w.data(), 1e-6f, a.data(), n);
    cpu::detail::rms_norm_row_avx512(x.data(), w.data(), 1e-6f, b.data(), n);
    for (int64_t i = 0; i < n; ++i) CHECK(std::fabs(a[i] - b[i]) <= 1e-6f * (1 + std::fabs(a[i])));
    cpu::detail::silu_mul_row_portable(x.data(), u.data(), a.data(), n);
    cpu::detail::silu_mul_row_avx512(x.data(), u.data(), b.data(), n);
    for (int64_t i = 0; i < n; ++i) CHECK(std::fabs(a[i] - b[i]) <= 1e-6f * (1 + std::fabs(a[i])));
    a = x;
    b = x;
    cpu::detail::softmax_row_portable(a.data(), n);
    cpu::detail::softmax_row_avx512(b.data(), n);
    for (int64_t i = 0; i < n; ++i) CHECK(std::fabs(a[i] - b[i]) <= 1e-6f * (1e-6f + a[i]));
  }
}

namespace {

// A vector attention kernel under test, with attention_group_ext's arguments (the plain
// kernels get window 0 and softcap 0).
using AttnKernel = void (*)(const cpu::AttnRows&, int, int, float, int, float, const cpu::KvPool&, const cpu::KvPool&,
                            int, const int32_t*, float*);

void avx512_plain(const cpu::AttnRows& r, int g, int head_dim, float scale, int, float, const cpu::KvPool& k,
                  const cpu::KvPool& v, int kv_head, const int32_t* table, float* scratch) {
  cpu::detail::attention_group_avx512(r, g, head_dim, scale, k, v, kv_head, table, scratch);
}

// The scalar kernels: the plain one, or the windowed / soft-capped one.
void scalar_attention(const cpu::AttnRows& r, int g, int head_dim, float scale, int window, float softcap,
                      const cpu::KvPool& k, const cpu::KvPool& v, int kv_head, const int32_t* table, float* scratch) {
  if (window == 0 && softcap == 0) return cpu::detail::attention_group_portable(r, g, head_dim, scale, k, v, kv_head, table, scratch);
  cpu::detail::attention_group_ext_portable(r, g, head_dim, scale, window, softcap, k, v, kv_head, table, scratch);
}

// Checks `vec` against the scalar kernels: F16, F32 and Q8_0 pools (K and V also of different
// types), odd head sizes up to 256, a scrambled block table, 3 query rows at contexts 43-45,
// token-tree rows; and that each row run alone gives bit for bit what it gives in the group.
// Outputs are averages of V rows in [-1, 1]: within 1e-5 of the scalar ones (F32 sums in
// another order, and exp / tanh within a few ulp).
void check_attention_kernel(AttnKernel vec, bool ext) {
  const std::pair<GgmlType, GgmlType> kv_types[] = {{GgmlType::F16, GgmlType::F16},   {GgmlType::F32, GgmlType::F32},
                                                    {GgmlType::Q8_0, GgmlType::Q8_0}, {GgmlType::F16, GgmlType::Q8_0},
                                                    {GgmlType::Q8_0, GgmlType::F32}};
  const std::pair<int, float> window_cap[] = {{0, 5.0f}, {20, 0.0f}, {41, 5.0f}};  // ext only
  for (const auto& [kt, vt] : kv_types) {
    const bool q8 = kt == GgmlType::Q8_0 || vt == GgmlType::Q8_0;
    for (int head_dim : q8 ? std::vector<int>{8, 48, 64, 128, 256} : std::vector<int>{8, 20, 64, 100, 128, 256}) {
      for (const auto& [window, softcap] : ext ? std::vector<std::pair<int, float>>(std::begin(window_cap), std::end(window_cap))
                                               : std::vector<std::pair<int, float>>{{0, 0.0f}}) {
        INFO(ggml_type_info(kt).name << "/" << ggml_type_info(vt).name << " head_dim " << head_dim << " window "
                                     << window << " softcap " << softcap);
        const int bs = 16, n_kv = 2, g = 4, n_ctx = 45, blocks = 4;
        const auto kd = randoms(size_t(blocks) * bs * n_kv * head_dim, 4, -2, 2);
        const auto vd = randoms(size_t(blocks) * bs * n_kv * head_dim, 5);
        // The pools, filled through kv_store_row in each type's layout.
        std::vector<uint8_t> kbuf(size_t(blocks) * bs * n_kv * size_t(kv_head_bytes(kt, head_dim)));
        std::vector<uint8_t> vbuf(size_t(blocks) * bs * n_kv * size_t(kv_head_bytes(vt, head_dim)));
        cpu::KvPool kp{kbuf.data(), kt, bs, n_kv, head_dim, blocks}, vp{vbuf.data(), vt, bs, n_kv, head_dim, blocks};
        for (int64_t slot = 0; slot < int64_t(blocks) * bs; ++slot) {
          cpu::kv_store_row(kp, slot, kd.data() + slot * kp.row_elems());
          cpu::kv_store_row(vp, slot, vd.data() + slot * vp.row_elems());
        }
        const int32_t table[] = {2, 0, 3};
        const int n_q = 3, row = g * head_dim;
        const auto q = randoms(size_t(n_q) * row, 6, -2, 2);
        std::vector<float> scratch(size_t(std::max(cpu::attention_scratch_floats(n_q, g, head_dim, n_ctx),
                                                   cpu::attention_ext_scratch_floats(n_q, g, n_ctx, kp.row_elems()))));
        std::vector<float> a(size_t(n_q) * row), b(size_t(n_q) * row);
        cpu::AttnRows ra{q.data(), row, a.data(), row, n_q, n_ctx - 2}, rb = ra;
        rb.out = b.data();
        scalar_attention(ra, g, head_dim, 0.3f, window, softcap, kp, vp, 1, table, scratch.data());
        vec(rb, g, head_dim, 0.3f, window, softcap, kp, vp, 1, table, scratch.data());
        for (size_t i = 0; i < a.size(); ++i) CHECK(std::fabs(a[i] - b[i]) <= 1e-5f);
        // Batch invariance: each row alone, bit for bit.
        for (int t = 0; t < n_q; ++t) {
          std::vector<float> alone(static_cast<size_t>(row));
          cpu::AttnRows r1{q.data() + t * row, row, alone.data(), row, 1, n_ctx - 2 + t};
          vec(r1, g, head_dim, 0.3f, window, softcap, kp, vp, 1, table, scratch.data());
          CHECK(std::equal(alone.begin(), alone.end(), b.begin() + t * row));
        }
        // Token trees: indices from 40 on read explicit slots. The block table's own slots give
        // bit-identical results; other slots agree between the variants.
        const int32_t same[] = {3 * bs + 8, 3 * bs + 9, 3 * bs + 10, 3 * bs + 11, 3 * bs + 12};
        const int32_t moved[] = {1 * bs + 2, 1 * bs + 7, 3 * bs + 1, 1 * bs + 9, 0};
        for (const int32_t* tail : {same, moved}) {
          std::vector<float> c(a.size()), d(a.size());
          cpu::AttnRows rc = ra, rd = ra;
          rc.out = c.data(), rd.out = d.data();
          rc.tail_base = rd.tail_base = 40;
          rc.tail_slots = rd.tail_slots = tail;
          scalar_attention(rc, g, head_dim, 0.3f, window, softcap, kp, vp, 1, table, scratch.data());
          vec(rd, g, head_dim, 0.3f, window, softcap, kp, vp, 1, table, scratch.data());
          for (size_t i = 0; i < a.size(); ++i) CHECK(std::fabs(c[i] - d[i]) <= 1e-5f);
          if (tail == same) {
            CHECK(c == a);
            CHECK(d == b);
          } else {
            CHECK(c != a);
          }
        }
      }
    }
  }
}

}  // namespace

TEST_CASE("AVX-512 attention agrees with the scalar kernel", "[cpu_ops][avx512]") {
  if (!testing::isa_available(cpu::CpuIsa::Avx512, cpu::detail::ops_have_avx512(), "AVX-512 F/BW/VL/DQ")) return;
  check_attention_kernel(avx512_plain, false);
}

TEST_CASE("AVX2 silu / GELU gates and soft-capping against double-precision references", "[cpu_ops][avx2]") {
  if (!testing::isa_available(cpu::CpuIsa::Avx2, cpu::detail::ops_have_avx2(), "AVX2 + FMA + F16C")) return;
  const std::vector<float> extremes = {-200.f, -90.f, -20.f, -5.f, -1e-3f, 0.f, 1e-3f, 5.f, 20.f, 90.f, 200.f};
  for (int64_t n : {1, 7, 8, 9, 37, 2048}) {
    auto g = randoms(size_t(n), 10 + n, -30, 30);
    const auto u = randoms(size_t(n), 20 + n, -2, 2);
    for (size_t i = 0; i < g.size() && i < extremes.size(); ++i) g[i] = extremes[i];
    std::vector<float> out(static_cast<size_t>(n));
    // |error| <= tol * max(1, |want|), or <= tol where `absolute`.
    auto check = [&](const char* what, double tol, bool absolute, auto want_of) {
      for (int64_t i = 0; i < n; ++i) {
        INFO(what << " n=" << n << " i=" << i << " g=" << g[i]);
        const double want = want_of(double(g[i]), double(u[i]));
        CHECK(std::fabs(out[i] - want) <= tol * (absolute ? 1.0 : std::max(1.0, std::fabs(want))));
      }
    };
    cpu::detail::silu_mul_row_avx2(g.data(), u.data(), out.data(), n);
    check("silu", 1e-6, false, [](double x, double y) { return x / (1.0 + std::exp(-x)) * y; });
    cpu::detail::gelu_mul_row_avx2(g.data(), u.data(), out.data(), n);
    check("gelu", 1e-6, false, [](double x, double y) {
      return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))) * y;
    });
    // cap (1 - 2 / (e^(2x/cap) + 1)): a few ulp of cap near 0, so the bound is in units of cap.
    for (float cap : {30.f, 50.f}) {
      out = g;
      cpu::detail::softcap_row_avx2(out.data(), cap, n);
      check("softcap", 4e-7 * cap, true, [cap](double x, double) { return cap * std::tanh(x / cap); });
    }
    // The tails (n % 8) take the same arithmetic as full vectors: element i's result does not
    // depend on n.
    std::vector<float> whole(g.size());
    cpu::detail::gelu_mul_row_avx2(g.data(), u.data(), whole.data(), n);
    for (int64_t m = 1; m <= std::min<int64_t>(n, 9); ++m) {
      std::vector<float> part(static_cast<size_t>(m));
      cpu::detail::gelu_mul_row_avx2(g.data(), u.data(), part.data(), m);
      for (int64_t i = 0; i < m; ++i) CHECK(part[i] == whole[i]);
    }
  }
}

TEST_CASE("AVX2 attention (plain, windowed, soft-capped) agrees with the scalar kernels", "[cpu_ops][avx2]") {
  if (!testing::isa_available(cpu::CpuIsa::Avx2, cpu::detail::ops_have_avx2(), "AVX2 + FMA + F16C")) return;
  check_attention_kernel(cpu::detail::attention_group_avx2, false);
  check_attention_kernel(cpu::detail::attention_group_avx2, true);
}
