// Where one sequence's decode step spends its time on the CPU backend (a benchmark, not a test).
//
//   pagoda_bench_decode_step --model M.gguf [--threads T] [-n 64] [--prompt-len 128]
//
// Runs one sequence through LlmEngine (prompt of --prompt-len token ids, then -n decode
// steps) on a CpuBackend wrapped in a decorator that times every backend op, and prints per
// decode step: the wall time between tokens, the model's ops by kind (the weight matmuls with
// their bytes and GB/s against the streaming-read bandwidth measured here at the same thread
// count; attention with the KV store; norms; RoPE; element-wise ops; embedding; logits read
// back), and what is left (the engine's scheduling, host sampling and output handling). The
// target: step time within 10% of the matmuls' sum.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/backend/cpu/backend_cpu.h"
#include "engine/core/engine.h"
#include "engine/gguf/gguf.h"
#include "engine/model/model.h"
#include "kernels/cpu/thread_pool.h"
#include "tests/bench/bench_peaks.h"

using namespace pagoda;
using Clock = std::chrono::steady_clock;

namespace {

enum Kind { kMatmul, kAttention, kNorm, kRope, kElementwise, kEmbed, kRead, kStepSetup, kKinds };
const char* const kKindNames[kKinds] = {"weight matmuls", "attention + KV store", "rms norms", "rope",
                                        "add / silu_mul / bias", "embedding", "logits read back",
                                        "begin_step / cache edits"};

// Forwards every op to `inner` and adds its wall time to the current step's tally (the CPU
// backend's ops are synchronous, so wall time around the call is the op's time).
class TimedBackend final : public Backend {
 public:
  explicit TimedBackend(std::unique_ptr<Backend> inner) : in_(std::move(inner)) {}

  struct Tally {
    double seconds[kKinds] = {};
    double matmul_bytes = 0;
    int64_t decode_steps = 0;
  };
  Tally decode;           // summed over decode steps (one token per step)
  bool in_decode = false;

  std::string name() const override { return in_->name(); }
  MemoryInfo memory_info() const override { return in_->memory_info(); }
  Tensor upload_weight(const void* host, GgmlType t, int64_t r, int64_t c) override { return in_->upload_weight(host, t, r, c); }
  Tensor alloc(int64_t rows, int64_t cols) override { return in_->alloc(rows, cols); }
  size_t kv_block_bytes(const KvCacheConfig& cfg) const override { return in_->kv_block_bytes(cfg); }
  void init_kv_cache(const KvCacheConfig& cfg) override { in_->init_kv_cache(cfg); }
  void begin_step(const StepPlan& plan) override {
    in_decode = plan.tokens.size() == 1;
    if (in_decode) ++decode.decode_steps;
    timed(kStepSetup, [&] { in_->begin_step(plan); });
  }
  void apply_cache_edits(const RopeConfig& r) override { timed(kStepSetup, [&] { in_->apply_cache_edits(r); }); }
  void embed(const Tensor& table, Tensor& out) override { timed(kEmbed, [&] { in_->embed(table, out); }); }
  void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& out, int64_t n) override {
    timed(kNorm, [&] { in_->rms_norm(x, w, eps, out, n); });
  }
  void matmul(const Tensor& w, const Tensor& x, Tensor& out, int64_t n) override {
    timed(kMatmul, [&] { in_->matmul(w, x, out, n); });
    if (in_decode) decode.matmul_bytes += static_cast<double>(ggml_row_size(w.type, w.cols)) * static_cast<double>(w.rows);
  }
  void add_bias(Tensor& x, const Tensor& b, int64_t n) override { timed(kElementwise, [&] { in_->add_bias(x, b, n); }); }
  void add(Tensor& x, const Tensor& y, int64_t n) override { timed(kElementwise, [&] { in_->add(x, y, n); }); }
  void silu_mul(const Tensor& g, const Tensor& u, Tensor& out, int64_t n) override {
    timed(kElementwise, [&] { in_->silu_mul(g, u, out, n); });
  }
  void rope(Tensor& x, int n_heads, const RopeConfig& r) override { timed(kRope, [&] { in_->rope(x, n_heads, r); }); }
  void store_kv(int layer, const Tensor& k, const Tensor& v) override { timed(kAttention, [&] { in_->store_kv(layer, k, v); }); }
  void attention(int layer, const Tensor& q, Tensor& out, int n_heads, int n_kv_heads, int head_dim, float scale) override {
    timed(kAttention, [&] { in_->attention(layer, q, out, n_heads, n_kv_heads, head_dim, scale); });
  }
  void gather_logit_rows(const Tensor& x, Tensor& out) override { timed(kElementwise, [&] { in_->gather_logit_rows(x, out); }); }
  void read_kv_block(int layer, int block, float* k, float* v) override { in_->read_kv_block(layer, block, k, v); }
  void write_kv_block(int layer, int block, const float* k, const float* v) override { in_->write_kv_block(layer, block, k, v); }
  void read(const Tensor& x, int64_t rows, float* host) override { timed(kRead, [&] { in_->read(x, rows, host); }); }

 private:
  template <class F>
  void timed(Kind kind, F&& f) {
    const auto t0 = Clock::now();
    f();
    if (in_decode) decode.seconds[kind] += std::chrono::duration<double>(Clock::now() - t0).count();
  }
  std::unique_ptr<Backend> in_;
};

struct Args {
  std::string model;
  int threads = 2, n = 64, prompt_len = 128;
};

int run(const Args& a) {
  const gguf::GgufFile file = gguf::GgufFile::open(a.model);
  auto timed_owner = std::make_unique<TimedBackend>(std::make_unique<CpuBackend>(a.threads));
  TimedBackend& timed = *timed_owner;
  Model model(file, std::move(timed_owner), 512);

  EngineConfig cfg;
  cfg.max_seqs = 1;
  cfg.max_batch_tokens = 512;
  cfg.ctx_size = std::max(a.prompt_len + a.n + 1, 2 * cfg.block_size + 1);
  cfg.kv_cache_memory = static_cast<size_t>((cfg.ctx_size + cfg.block_size - 1) / cfg.block_size) *
                        model.kv_block_bytes(cfg.block_size);
  LlmEngine engine(model, nullptr, cfg);
  GenerationRequest req;
  for (int i = 0; i < a.prompt_len; ++i) req.prompt.push_back(1 + i % 200);
  req.stop.max_tokens = a.n + 1;
  req.stop.ignore_eos = true;
  SubmitError err;
  auto stream = engine.submit(std::move(req), &err);
  if (!stream) throw std::runtime_error("request rejected: " + err.message);
  int tokens = 0;
  Clock::time_point t_first, t_last;
  while (!stream->done()) {
    const auto d = stream->next(std::chrono::seconds(1));
    if (!d) continue;
    if (!d->tokens.empty()) {
      t_last = Clock::now();
      if (tokens == 0) t_first = t_last;
      tokens += static_cast<int>(d->tokens.size());
    }
    if (d->finish == FinishReason::Error) throw std::runtime_error(d->error);
  }
  const auto& t = timed.decode;
  const int64_t steps = t.decode_steps;
  if (steps < 2 || tokens < 2) throw std::runtime_error("too few decode steps to measure");
  // Per token: the steps after the first token (the prefill's last step made that one).
  const double wall_ms = std::chrono::duration<double>(t_last - t_first).count() * 1e3 / (tokens - 1);
  double ops_ms = 0;
  for (double s : t.seconds) ops_ms += s * 1e3 / static_cast<double>(steps);
  cpu::ThreadPool pool(a.threads);
  const double bw = bench::stream_read_gbps(pool, bench::Timing{false, a.threads});
  const double mm_ms = t.seconds[kMatmul] * 1e3 / static_cast<double>(steps);
  const double mm_gb = t.matmul_bytes / static_cast<double>(steps) / 1e9;

  std::printf("%s, %d threads, %ld decode steps after a %d-token prompt\n", a.model.c_str(), a.threads,
              static_cast<long>(steps), a.prompt_len);
  std::printf("stream read bandwidth: %.1f GB/s; weights read per step %.3f GB -> %.2f ms at stream speed\n", bw,
              mm_gb, mm_gb / bw * 1e3);
  std::printf("decode: %.2f ms per token (%.2f tok/s), wall between tokens\n", wall_ms, 1e3 / wall_ms);
  for (int k = 0; k < kKinds; ++k) {
    const double ms = t.seconds[k] * 1e3 / static_cast<double>(steps);
    std::printf("  %-26s %8.3f ms  %5.1f%%", kKindNames[k], ms, 100.0 * ms / wall_ms);
    if (k == kMatmul) std::printf("  (%.1f GB/s, %.0f%% of stream)", mm_gb / ms * 1e3, 100.0 * mm_gb / ms * 1e3 / bw);
    std::printf("\n");
  }
  std::printf("  %-26s %8.3f ms  %5.1f%%\n", "engine (schedule, sample)", wall_ms - ops_ms, 100.0 * (wall_ms - ops_ms) / wall_ms);
  std::printf("step / matmul sum: %.3f (target <= 1.10)\n", wall_ms / mm_ms);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(f + " needs a value");
      return argv[++i];
    };
    try {
      if (f == "--model") a.model = value();
      else if (f == "--threads") a.threads = std::stoi(value());
      else if (f == "-n") a.n = std::stoi(value());
      else if (f == "--prompt-len") a.prompt_len = std::stoi(value());
      else throw std::invalid_argument("unknown argument " + f);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s\nusage: %s --model M.gguf [--threads T] [-n 64] [--prompt-len 128]\n", e.what(), argv[0]);
      return 2;
    }
  }
  if (a.model.empty() || a.threads < 1 || a.n < 2 || a.prompt_len < 1) {
    std::fprintf(stderr, "usage: %s --model M.gguf [--threads T] [-n 64] [--prompt-len 128]\n", argv[0]);
    return 2;
  }
  try {
    return run(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pagoda_bench_decode_step: %s\n", e.what());
    return 1;
  }
}
