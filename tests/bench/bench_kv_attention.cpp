// Decode attention over a long paged context on the CPU backend, per KV cache element type:
// one sequence, one new token, contexts of 1k..16k tokens, a Llama-8B-like head layout
// (32 query heads, 8 KV heads of 128). Layers are cycled so each call reads its K/V from
// memory, not from cache. Prints per type and context the median time of an attention call
// (types alternate within each round) and the KV bytes it reads per second. With one thread
// the time is the thread's CPU time (so a busy host's descheduling does not count; cache and
// memory contention still do); with more, wall time.
//   build/tests/bench_kv_attention [--threads N] [--rounds R] [--max-ctx C]
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
  Setup(int threads, GgmlType type, int max_ctx) : be(threads) {
    const int blocks = (max_ctx + kBlock - 1) / kBlock + 1;
    be.init_kv_cache(KvCacheConfig{kLayers, blocks, kBlock, kKvHeads, kHeadDim, type});
    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> k(static_cast<size_t>(kBlock) * kKvHeads * kHeadDim), v(k.size());
    for (int l = 0; l < kLayers; ++l)
      for (int b = 0; b < blocks; ++b) {
        for (auto& x : k) x = nd(rng);
        for (auto& x : v) x = nd(rng);
        be.write_kv_block(l, b, k.data(), v.data());
      }
    q = be.alloc(1, kHeads * kHeadDim);
    out = be.alloc(1, kHeads * kHeadDim);
    for (int i = 0; i < kHeads * kHeadDim; ++i) static_cast<float*>(q.data)[i] = nd(rng);
  }
  // Seconds per attention call at context `ctx` (median of `reps` calls, layers cycled).
  double time(int ctx, int reps) {
    StepPlan p;
    SeqInStep s;
    s.n_tokens = 1;
    s.n_past = ctx - 1;
    s.n_blocks = (ctx + kBlock - 1) / kBlock;
    p.seqs.push_back(s);
    for (int b = 0; b < s.n_blocks; ++b) p.block_tables.push_back(b);
    p.tokens = {0};
    p.positions = {ctx - 1};
    p.slots = {(ctx - 1)};
    p.token_seq = {0};
    p.logit_rows = {0};
    be.begin_step(p);
    std::vector<double> t;
    for (int r = 0; r < reps; ++r) {
      const bool cpu_time = be.n_threads() == 1;
      const double t0 = now_s(cpu_time);
      be.attention(r % kLayers, q, out, kHeads, kKvHeads, kHeadDim, 1.0f / std::sqrt(float(kHeadDim)));
      t.push_back(now_s(cpu_time) - t0);
    }
    std::nth_element(t.begin(), t.begin() + reps / 2, t.end());
    return t[size_t(reps / 2)];
  }
};

}  // namespace

int main(int argc, char** argv) {
  int threads = 1, rounds = 5, max_ctx = 16384;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string f = argv[i];
    if (f == "--threads") threads = std::atoi(argv[i + 1]);
    else if (f == "--rounds") rounds = std::atoi(argv[i + 1]);
    else if (f == "--max-ctx") max_ctx = std::atoi(argv[i + 1]);
  }
  const GgmlType types[] = {GgmlType::F16, GgmlType::Q8_0, GgmlType::F32};
  std::vector<Setup*> setups;
  for (GgmlType t : types) setups.push_back(new Setup(threads, t, max_ctx));
  std::printf("decode attention, %d heads / %d KV heads x %d, %d thread(s), median of %d rounds\n", kHeads,
              kKvHeads, kHeadDim, threads, rounds);
  std::printf("%8s %8s %12s %12s %10s\n", "context", "kv type", "us / call", "KV GB/s", "vs f16");
  for (int ctx = 1024; ctx <= max_ctx; ctx *= 2) {
    std::vector<std::vector<double>> per(3);
    for (int r = 0; r < rounds; ++r)
      for (size_t i = 0; i < 3; ++i) per[i].push_back(setups[i]->time(ctx, 2 * kLayers));
    double f16 = 0;
    for (size_t i = 0; i < 3; ++i) {
      std::sort(per[i].begin(), per[i].end());
      const double s = per[i][per[i].size() / 2];
      if (i == 0) f16 = s;
      const double bytes = 2.0 * ctx * kKvHeads * double(kv_head_bytes(types[i], kHeadDim));
      std::printf("%8d %8s %12.1f %12.2f %9.2fx\n", ctx, ggml_type_info(types[i]).name, s * 1e6, bytes / s / 1e9,
                  f16 / s);
    }
  }
  for (Setup* s : setups) delete s;
  return 0;
}
