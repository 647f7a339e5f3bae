// Microbenchmarks of the CPU kernels (not a test: prints figures).
//
//   pagoda_bench_kernels [--threads N] [--type q8_0] [--quick] [--cpu-time] [--peaks-only]
//   (--type: any supported type; --peaks-only: the two ceilings of (1) and stop; --decode-only:
//   n = 1 figures only; --prefill-only: n = 128 and 512 figures only, one weight copy per shape;
//   --no-stack: skip (3); --no-pack: quantized types from their GGML layout, no decode layout)
//
// 1. The ceilings (bench_peaks.h): streaming-read memory bandwidth (N threads summing a 1 GiB
//    buffer), the limit for decode; the int8 dot-product peak (register-only), the limit for
//    prefill.
// 2. matmul on TinyLlama-1.1B shapes: n = 1 as GB/s of weights streamed (weights rotated over
//    copies totalling twice the L3) and % of stream reads timed beside the calls; n = 16, 128
//    and 512 as GOP/s and % of the int8 peak.
// 3. The whole TinyLlama matmul stack (22 layers of q,k,v,o,gate,up,down + the output head):
//    decode tokens/s (n = 1; each matmul timed next to a stream read of its size, % of stream
//    as the median over tokens of the two sums' ratio), the decode kernel with its weights in
//    L3 (its compute ceiling, against the stream), batched decode (n = 4, 16) and prefill
//    tokens/s (n = 128, 512), matmuls only.
// Every figure is the median of several runs; prefill figures (% of the int8 peak) alternate
// with the peak probe so both see the same load.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quants.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/weight_pack.h"
#include "tests/bench/bench_peaks.h"

using namespace pagoda;
using namespace pagoda::cpu;

namespace {

bench::Timing g_timing;

template <class F>
double median_seconds(int reps, F&& f) {
  return bench::median_seconds(g_timing, reps, f);
}

// Random but valid weights of type t, written directly (quantizing a billion floats would take
// longer than the benchmark): random bytes, with every block's f16 scale(s) set to small values.
std::vector<uint8_t> random_weights(GgmlType t, int64_t rows, int64_t cols, uint64_t seed) {
  const size_t row_bytes = ggml_row_size(t, cols);
  std::vector<uint8_t> w(row_bytes * static_cast<size_t>(rows));
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i + 8 <= w.size(); i += 8) {
    const uint64_t v = rng();
    std::memcpy(&w[i], &v, 8);
  }
  const uint16_t small = fp32_to_fp16(0.01f);
  const GgmlTypeInfo& info = ggml_type_info(t);
  if (info.block_size > 1) {
    for (size_t b = 0; b < w.size() / info.type_size; ++b) {
      uint8_t* blk = &w[b * info.type_size];
      if (t == GgmlType::Q6_K) std::memcpy(blk + 208, &small, 2);
      else std::memcpy(blk, &small, 2);
      if (t == GgmlType::Q4_K) std::memcpy(blk + 2, &small, 2);
    }
  } else if (t == GgmlType::F32) {
    for (size_t i = 0; i < w.size() / 4; ++i) {
      const float f = static_cast<float>(i % 17) * 0.01f;
      std::memcpy(&w[4 * i], &f, 4);
    }
  } else {
    for (size_t i = 0; i < w.size() / 2; ++i) std::memcpy(&w[2 * i], &small, 2);
  }
  return w;
}

std::vector<float> random_x(int64_t n, int64_t k) {
  std::vector<float> x(static_cast<size_t>(n * k));
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  for (auto& v : x) v = nd(rng);
  return x;
}

// A weight matrix as the CPU backend holds it: the GGML bytes, plus the decode layout
// (weight_pack.h) where this host's kernels use one (--no-pack: never, for A/B).
struct Weights {
  std::vector<uint8_t> bytes;
  PackedWeight packed;
  void matmul(ThreadPool& pool, GgmlType t, int64_t out, int64_t in, const float* x, int64_t n, float* y) const {
    if (packed.bytes) cpu::matmul(pool, packed, x, n, y);
    else cpu::matmul(pool, t, bytes.data(), out, in, x, n, y);
  }
};
bool g_decode_pack = true;  // --no-pack clears it
double g_pack_seconds = 0, g_pack_bytes = 0;  // pack_for_decode on one thread: the load-time cost
Weights make_weights(GgmlType t, int64_t rows, int64_t cols, uint64_t seed) {
  Weights w{random_weights(t, rows, cols, seed), {}};
  const auto layout = decode_layout_for(default_cpu_isa(), t, rows, cols);
  if (g_decode_pack && layout) {
    const auto t0 = std::chrono::steady_clock::now();
    w.packed = pack_for_decode(t, w.bytes.data(), rows, cols, nullptr, *layout);
    g_pack_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    g_pack_bytes += static_cast<double>(w.packed.size);
  }
  return w;
}

void report_packing() {
  if (g_pack_bytes > 0)
    std::printf("decode layout: packed %.2f GB in %.2f s (%.2f GB/s on one thread)\n", g_pack_bytes / 1e9, g_pack_seconds,
                g_pack_bytes / 1e9 / g_pack_seconds);
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// A figure measured against a ceiling of the host, measured next to it: decode calls against
// the stream read (interleaved_with_stream), prefill runs against the int8 peak
// (prefill_vs_peak). On a shared machine the probe then sees the same contention as the run.
struct PairedFigure {
  double rate = 0, pct_of_ceiling = 0, seconds = 0, ceiling = 0;  // rate: work (GB, GOP) per second
};

// Decode calls against the stream, interleaved call by call: each call is timed next to a
// stream read of as many bytes (which of the two goes first alternates), so contention that
// changes within milliseconds falls on both alike (on a shared 2-vCPU host, pairing each whole
// 70 ms decode run with a stream pass before it gave medians of 74-90% of stream from one
// process to the next; this gives 75-85%). `bytes(i)` and `call(i)` for i in [0, calls). The
// figure: the calls' bytes per second and, as the ceiling, the stream reads'.
template <class Bytes, class Call>
PairedFigure interleaved_with_stream(bench::StreamProbe& probe, ThreadPool& pool, size_t calls, Bytes&& bytes,
                                     Call&& call) {
  double t_call = 0, t_stream = 0, total = 0;
  for (size_t i = 0; i < calls; ++i) {
    for (int half = 0; half < 2; ++half) {
      const bool stream = (half == 0) == (i % 2 == 0);
      const auto t0 = std::chrono::steady_clock::now();
      if (stream) probe.read_next(pool, bytes(i));
      else call(i);
      (stream ? t_stream : t_call) += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    total += static_cast<double>(bytes(i));
  }
  return {total / t_call / 1e9, 100.0 * t_stream / t_call, t_call, total / t_stream / 1e9};
}

// The medians of `rounds` such figures.
template <class Round>
PairedFigure median_round(int rounds, Round&& round) {
  std::vector<double> rate, pct, secs, ceiling;
  for (int r = 0; r < rounds; ++r) {
    const PairedFigure f = round();
    rate.push_back(f.rate), pct.push_back(f.pct_of_ceiling), secs.push_back(f.seconds), ceiling.push_back(f.ceiling);
  }
  return {median_of(rate), median_of(pct), median_of(secs), median_of(ceiling)};
}

// Each prefill run right after a measure of the int8 peak; the medians of `reps` runs.
template <class F>
PairedFigure prefill_vs_peak(ThreadPool& pool, int reps, double ops, F&& run) {
  std::string what;
  return median_round(reps, [&] {
    const double peak = bench::int8_peak_gops(pool, g_timing, what);
    const double t = median_seconds(1, run), rate = ops / 1e9 / t;
    return PairedFigure{rate, peak > 0 ? 100.0 * rate / peak : 0.0, t, peak};
  });
}

// The decode kernel's own ceiling: n = 1 over and over on one matrix that fits in half this
// host's L3 (4 MiB a thread at most), so its weights come from cache and the kernel's
// instructions bound it, each call timed next to a stream read of as many bytes from memory
// (interleaved_with_stream). (A matrix the size of L2 measured less than the stream here: the
// per-call work, activation quantization and waking the threads, was then a tenth of a call.)
// Where this is not well above the stream, the decode matmuls cannot reach the stream however
// the memory system behaves: that type is compute-bound on this core at this thread count.
struct CacheCeiling {
  int64_t rows = 0;
  double bytes_per_thread = 0;
  PairedFigure f;
};
// in_l2: half of L2 a thread (the kernel's arithmetic alone: on a VM the L3 is shared with
// other tenants, and its figure swung 22-43 GB/s between runs on one host); else up to 4 MiB a
// thread in L3.
CacheCeiling decode_in_cache(bench::StreamProbe& probe, ThreadPool& pool, GgmlType type, int threads, bool quick,
                             bool in_l2) {
  const int64_t cols = 2048;
  const size_t row_bytes = ggml_row_size(type, cols);
  const size_t l3 = cpu_caches().l3, per_threads = (size_t(4) << 20) * threads;  // l3: 0 when unknown
  const size_t l2 = cpu_caches().l2 > 0 ? cpu_caches().l2 : size_t(1) << 20;
  const size_t bytes_wanted = in_l2 ? l2 / 2 * threads : l3 > 0 ? std::min(l3 / 2, per_threads) : per_threads;
  const int64_t rows = std::max<int64_t>(8, static_cast<int64_t>(bytes_wanted / row_bytes) / 8 * 8);
  const Weights w = make_weights(type, rows, cols, 3);
  const auto x = random_x(1, cols);
  std::vector<float> out(static_cast<size_t>(rows));
  const size_t bytes = row_bytes * static_cast<size_t>(rows);
  w.matmul(pool, type, rows, cols, x.data(), 1, out.data());  // into the cache
  const PairedFigure f = median_round(quick ? 7 : 15, [&] {
    return interleaved_with_stream(
        probe, pool, 16, [&](size_t) { return bytes; },
        [&](size_t) { w.matmul(pool, type, rows, cols, x.data(), 1, out.data()); });
  });
  return {rows, static_cast<double>(bytes) / threads, f};
}

struct Shape {
  const char* name;
  int64_t out, in;
};

}  // namespace

int main(int argc, char** argv) {
  int threads = 2;
  GgmlType type = GgmlType::Q8_0;
  bool quick = false, peaks_only = false, decode_only = false, prefill_only = false, no_stack = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) threads = std::stoi(argv[++i]);
    else if (a == "--quick") quick = true;
    else if (a == "--cpu-time") g_timing.cpu_time = true;
    else if (a == "--peaks-only") peaks_only = true;
    else if (a == "--decode-only") decode_only = true;
    else if (a == "--prefill-only") prefill_only = true;
    else if (a == "--no-stack") no_stack = true;
    else if (a == "--no-pack") g_decode_pack = false;
    else if (a == "--type" && i + 1 < argc) {
      const std::string t = argv[++i];
      bool found = false;
      for (uint32_t id = 0; id < 40; ++id)
        if (const GgmlTypeInfo* info = ggml_type_info(id); info && info->supported && t == info->name) type = info->type, found = true;
      if (!found) return std::fprintf(stderr, "unknown type %s\n", t.c_str()), 2;
    } else {
      std::fprintf(stderr, "usage: %s [--threads N] [--type TYPE (any supported: q8_0, q5_k, iq4_xs, f16, ...)] [--quick] [--cpu-time] [--peaks-only] [--decode-only] [--prefill-only] [--no-stack] [--no-pack]\n", argv[0]);
      return 2;
    }
  }
  g_timing.threads = threads;
  ThreadPool pool(threads);
  std::printf("%s, %d threads, weights %s\n", cpu_features_string().c_str(), threads, ggml_type_info(type).name);
  // Decode figures read next to this probe (interleaved_with_stream); prefill-only runs need none.
  std::optional<bench::StreamProbe> probe;
  if (!prefill_only) std::printf("stream read bandwidth: %.1f GB/s\n", probe.emplace().gbps(pool, g_timing));
  std::string peak_what;
  const double peak = bench::int8_peak_gops(pool, g_timing, peak_what);
  std::printf("int8 dot-product peak: %.0f GOPS (%s, registers only)\n", peak, peak_what.c_str());
  if (peaks_only) return 0;

  // Weights rotate over copies totalling twice this host's L3 (at least 256 MiB), so that n = 1
  // reads them from memory as a decode step does.
  const size_t rotation_bytes = std::max<size_t>(size_t(256) << 20, 2 * cpu_caches().l3);
  const Shape shapes[] = {{"attn q/o 2048x2048", 2048, 2048},
                          {"ffn gate/up 5632x2048", 5632, 2048},
                          {"ffn down 2048x5632", 2048, 5632},
                          {"output 32000x2048", 32000, 2048}};
  for (const Shape& s : shapes) {
    const size_t wbytes = ggml_row_size(type, s.in) * static_cast<size_t>(s.out);
    // PAGODA_BENCH_HOT=1 keeps one copy (weights mostly cache-resident): shows compute limits.
    // Prefill re-reads each weight tile from cache for many rows: it does not need the rotation.
    const bool hot = std::getenv("PAGODA_BENCH_HOT") != nullptr || prefill_only;
    const int copies = hot ? 1 : static_cast<int>(std::max<size_t>(1, rotation_bytes / wbytes));
    std::vector<Weights> ws;
    for (int c = 0; c < copies; ++c) ws.push_back(make_weights(type, s.out, s.in, 10 + c));
    std::vector<float> out(static_cast<size_t>(512 * s.out));
    const auto x = random_x(512, s.in);
    int next = 0;
    std::printf("%-24s", s.name);
    if (!prefill_only) {
      const PairedFigure f = median_round(quick ? 3 : 7, [&] {
        return interleaved_with_stream(
            *probe, pool, quick ? 8 : 16, [&](size_t) { return wbytes; },
            [&](size_t) { ws[next++ % copies].matmul(pool, type, s.out, s.in, x.data(), 1, out.data()); });
      });
      std::printf(" n=1   %7.3f ms  %6.1f GB/s (%3.0f%% of stream)", f.seconds / (quick ? 8 : 16) * 1e3, f.rate,
                  f.pct_of_ceiling);
    }
    // Small batches (batched decode of several sequences): time per call.
    for (int64_t n : {2, 3, 4, 8, 16}) {
      if (decode_only || prefill_only) break;
      const double t = median_seconds(quick ? 5 : 15, [&] {
        ws[next++ % copies].matmul(pool, type, s.out, s.in, x.data(), n, out.data());
      });
      std::printf("  n=%ld %.3fms", static_cast<long>(n), t * 1e3);
    }
    // GOP/s against the int8 peak measured beside each run: prefill (128, 512) and a 16-sequence
    // decode step (16), whose weight traffic is one sequence's, so that it is compute-bound
    // unless the kernel reaches a large share of the peak.
    for (int64_t n : {16, 128, 512}) {
      if (decode_only || (quick && n == 512) || (prefill_only && n == 16)) continue;
      const PairedFigure f = prefill_vs_peak(pool, quick ? 3 : 7, 2.0 * n * s.out * s.in, [&] {
        ws[next++ % copies].matmul(pool, type, s.out, s.in, x.data(), n, out.data());
      });
      std::printf("  n=%-3ld %6.1f GOP/s (%2.0f%%)", static_cast<long>(n), f.rate, f.pct_of_ceiling);
    }
    std::printf("\n");
  }

  if (no_stack) {
    report_packing();
    return 0;
  }
  // The whole TinyLlama-1.1B matmul stack.
  struct Mat {
    int64_t out, in;
    Weights w;
  };
  std::vector<Mat> model;
  size_t total = 0;
  const int layers = 22;  // 1.1 GB at Q8_0: more than any L3
  for (int l = 0; l < layers; ++l)
    for (const auto& [o, i] : {std::pair<int64_t, int64_t>{2048, 2048}, {256, 2048}, {256, 2048}, {2048, 2048},
                               {5632, 2048}, {5632, 2048}, {2048, 5632}}) {
      model.push_back({o, i, make_weights(type, o, i, 100 + model.size())});
      total += model.back().w.bytes.size();
    }
  model.push_back({32000, 2048, make_weights(type, 32000, 2048, 7)});
  total += model.back().w.bytes.size();
  report_packing();
  const auto x = random_x(512, 5632);
  std::vector<float> out(static_cast<size_t>(512) * 32000);
  auto forward = [&](int64_t n) {
    for (const Mat& m : model) m.w.matmul(pool, type, m.out, m.in, x.data(), n, out.data());
  };
  if (!prefill_only) {
    const int rounds = quick ? 7 : 11;
    const PairedFigure f = median_round(rounds, [&] {
      return interleaved_with_stream(
          *probe, pool, model.size(), [&](size_t i) { return model[i].w.bytes.size(); },
          [&](size_t i) { model[i].w.matmul(pool, type, model[i].out, model[i].in, x.data(), 1, out.data()); });
    });
    std::printf("tinyllama matmuls (%d layers, %.2f GB): decode %.1f tok/s (%.1f GB/s, %.0f%% of stream; "
                "medians of %d tokens, each matmul timed next to a stream read of its size: %.1f GB/s)\n",
                layers, total / 1e9, 1.0 / f.seconds, f.rate, f.pct_of_ceiling, rounds, f.ceiling);
    for (const bool in_l2 : {false, true}) {
      const CacheCeiling c = decode_in_cache(*probe, pool, type, threads, quick, in_l2);
      std::printf("decode kernel, weights in %s (%ldx2048, %.0f KiB a thread): %.1f GB/s, %.0f%% of stream (timed "
                  "next to a stream read of its size: %.1f GB/s; the kernel's own limit: under 100%%, compute-bound "
                  "here)\n",
                  in_l2 ? "L2" : "L3", static_cast<long>(c.rows), c.bytes_per_thread / 1024.0, c.f.rate,
                  c.f.pct_of_ceiling, c.f.ceiling);
    }
  }
  for (int64_t n : {4, 16}) {  // batched decode of n sequences (as scripts/bench_engine.sh runs them)
    if (decode_only || prefill_only) break;
    const double tb = median_seconds(5, [&] { forward(n); });
    std::printf("tinyllama matmuls batched decode n=%ld: %.1f tok/s aggregate\n", static_cast<long>(n), n / tb);
  }
  for (int64_t n : {128, 512}) {
    if (decode_only || (quick && n == 512)) continue;
    double flops = 0;
    for (const Mat& m : model) flops += 2.0 * n * m.out * m.in;
    const PairedFigure f = prefill_vs_peak(pool, 5, flops, [&] { forward(n); });
    std::printf("tinyllama matmuls prefill n=%ld: %.1f tok/s (%.1f GOP/s, %.0f%% of the int8 peak)\n",
                static_cast<long>(n), n / f.seconds, f.rate, f.pct_of_ceiling);
  }
  return 0;
}
