// Decode attention over long paged contexts on the CPU backend, per KV cache element type:
// one new token for each of S sequences (--seqs, default 1), contexts of 1k..--max-ctx tokens
// each, a Llama-8B-like head layout (32 query heads, 8 KV heads of 128, so 4 query heads read
// each KV head). With one sequence, 8 layers are cycled so each call reads its K/V from memory,
// not from cache; with several, their caches (S x the context) already exceed any L3 at the
// contexts that matter, and one layer keeps the memory bounded (16 x 32k tokens: 2.1 GB of f16
// K/V). Prints per type and context the median time of an attention call (types alternate
// within each round) and the KV bytes it reads per second, the figure to hold against the
// host's stream read rate. With one thread the time is the thread's CPU time (so a busy host's
// descheduling does not count; cache and memory contention still do); with more, wall time.
//   build/tests/bench_kv_attention [--threads N] [--rounds R] [--max-ctx C] [--seqs S]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <time.h>

#include "engine/backend/cpu/backend_cpu.h"

using namespace pagoda;

namespace {

constexpr int kHeads = 32, kKvHeads = 8, kHeadDim = 128, kBlock = 16, kLayers = 8;

double now_s(bool cpu_time) {
  timespec ts;
  clock_gettime(cpu_time ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct Setup {
  CpuBackend be;
  Tensor q, out;
  int seqs, layers, blocks_per_seq;
  Setup(int threads, GgmlType type, int max_ctx, int n_seqs)
      : be(threads), seqs(n_seqs), layers(n_seqs > 1 ? 1 : kLayers), blocks_per_seq((max_ctx + kBlock - 1) / kBlock + 1) {
    const int blocks = seqs * blocks_per_seq;
    be.init_kv_cache(KvCacheConfig{layers, blocks, kBlock, kKvHeads, kHeadDim, type});
    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    // 64 random blocks, written round robin: the values only need to look like K/V.
    const size_t block_floats = static_cast<size_t>(kBlock) * kKvHeads * kHeadDim;
    std::vector<float> pool(64 * block_floats);
    for (auto& x : pool) x = nd(rng);
    for (int l = 0; l < layers; ++l)
      for (int b = 0; b < blocks; ++b) {
        const float* k = pool.data() + static_cast<size_t>((b + l) % 64) * block_floats;
        const float* v = pool.data() + static_cast<size_t>((b + l + 17) % 64) * block_floats;
        be.write_kv_block(l, b, k, v);
      }
    q = be.alloc(seqs, kHeads * kHeadDim);
    out = be.alloc(seqs, kHeads * kHeadDim);
    for (int i = 0; i < seqs * kHeads * kHeadDim; ++i) static_cast<float*>(q.data)[i] = nd(rng);
  }
  // Seconds per attention call at context `ctx` for every sequence (median of `reps` calls,
  // layers cycled).
  double time(int ctx, int reps) {
    StepPlan p;
    for (int i = 0; i < seqs; ++i) {
      SeqInStep s;
      s.seq_id = static_cast<uint64_t>(i);
      s.first_token = i;
      s.block_table_offset = static_cast<int32_t>(p.block_tables.size());
      s.n_tokens = 1;
      s.n_past = ctx - 1;
      s.n_blocks = (ctx + kBlock - 1) / kBlock;
      p.seqs.push_back(s);
      for (int b = 0; b < s.n_blocks; ++b) p.block_tables.push_back(i * blocks_per_seq + b);
      p.tokens.push_back(0);
      p.positions.push_back(ctx - 1);
      p.slots.push_back(i * blocks_per_seq * kBlock + ctx - 1);
      p.token_seq.push_back(i);
      p.logit_rows.push_back(i);
    }
    be.begin_step(p);
    std::vector<double> t;
    for (int r = 0; r < reps; ++r) {
      const bool cpu_time = be.n_threads() == 1;
      const double t0 = now_s(cpu_time);
      be.attention(r % layers, q, out, kHeads, kKvHeads, kHeadDim, 1.0f / std::sqrt(float(kHeadDim)));
      t.push_back(now_s(cpu_time) - t0);
    }
    std::nth_element(t.begin(), t.begin() + reps / 2, t.end());
    return t[size_t(reps / 2)];
  }
};

}  // namespace

int main(int argc, char** argv) {
  int threads = 1, rounds = 5, max_ctx = 16384, seqs = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string f = argv[i];
    if (f == "--threads") threads = std::atoi(argv[i + 1]);
    else if (f == "--rounds") rounds = std::atoi(argv[i + 1]);
    else if (f == "--max-ctx") max_ctx = std::atoi(argv[i + 1]);
    else if (f == "--seqs") seqs = std::max(1, std::atoi(argv[i + 1]));
  }
  // Several sequences: f16 and q8_0 (the f32 cache would double the memory for a type servers
  // do not use at these lengths).
  const std::vector<GgmlType> types = seqs > 1 ? std::vector<GgmlType>{GgmlType::F16, GgmlType::Q8_0}
                                               : std::vector<GgmlType>{GgmlType::F16, GgmlType::Q8_0, GgmlType::F32};
  const size_t n_types = types.size();
  std::vector<Setup*> setups;
  for (GgmlType t : types) setups.push_back(new Setup(threads, t, max_ctx, seqs));
  std::printf("decode attention, %d sequence(s), %d heads / %d KV heads x %d, %d thread(s), median of %d rounds\n",
              seqs, kHeads, kKvHeads, kHeadDim, threads, rounds);
  std::printf("%8s %8s %12s %12s %10s\n", "context", "kv type", "us / call", "KV GB/s", "vs f16");
  for (int ctx = 1024; ctx <= max_ctx; ctx *= 2) {
    std::vector<std::vector<double>> per(n_types);
    for (int r = 0; r < rounds; ++r)
      for (size_t i = 0; i < n_types; ++i) per[i].push_back(setups[i]->time(ctx, seqs > 1 ? 3 : 2 * kLayers));
    double f16 = 0;
    for (size_t i = 0; i < n_types; ++i) {
      std::sort(per[i].begin(), per[i].end());
      const double s = per[i][per[i].size() / 2];
      if (i == 0) f16 = s;
      const double bytes = 2.0 * seqs * ctx * kKvHeads * double(kv_head_bytes(types[i], kHeadDim));
      std::printf("%8d %8s %12.1f %12.2f %9.2fx\n", ctx, ggml_type_info(types[i]).name, s * 1e6, bytes / s / 1e9,
                  f16 / s);
    }
  }
  for (Setup* s : setups) delete s;
  return 0;
}
