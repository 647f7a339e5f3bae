// Where one sequence's decode step spends its time on the CPU backend (a benchmark, not a test).
//
//   pagoda_bench_decode_step --model M.gguf [--threads T] [-n 64] [--prompt-len 128]
//
// Runs one sequence through LlmEngine (prompt of --prompt-len token ids, then -n decode
// steps) on a CpuBackend wrapped in a decorator that times every backend op (any
// architecture: tests/support/forwarding_backend.h forwards them all), and prints per decode
// step: the wall time between tokens, the model's ops by kind (the weight matmuls and an MoE's
// grouped experts, with the bytes they read and GB/s against the streaming-read bandwidth
// measured here at the same thread count; attention with the KV store; norms; RoPE;
// element-wise ops; embedding; logits read back), and what is left (the engine's scheduling,
// host sampling and output handling). The target: step time within 10% of the matmuls' sum.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/backend/cpu/backend_cpu.h"
#include "engine/loop/engine.h"
#include "engine/gguf/gguf.h"
#include "engine/model/model.h"
#include "kernels/cpu/thread_pool.h"
#include "tests/bench/bench_peaks.h"
#include "tests/support/forwarding_backend.h"

using namespace pagoda;
using Clock = std::chrono::steady_clock;

namespace {

enum Kind { kMatmul, kMoe, kAttention, kNorm, kRope, kElementwise, kEmbed, kRead, kStepSetup, kOther, kKinds };
const char* const kKindNames[kKinds] = {"weight matmuls", "MoE experts (grouped)", "attention + KV store", "rms norms",
                                        "rope", "element-wise ops", "embedding", "logits read back",
                                        "begin_step / cache edits", "other ops"};

Kind kind_of(test::ForwardingBackend::Op op) {
  using Op = test::ForwardingBackend::Op;
  switch (op) {
    case Op::Matmul: return kMatmul;
    case Op::Moe: return kMoe;
    case Op::Attention: return kAttention;
    case Op::Norm: return kNorm;
    case Op::Rope: return kRope;
    case Op::Elementwise: return kElementwise;
    case Op::Embed: return kEmbed;
    case Op::Read: return kRead;
    case Op::StepSetup: return kStepSetup;
    case Op::KvBlock:
    case Op::Sampling: return kOther;
  }
  return kOther;
}

// Every op forwarded to the inner backend (test::ForwardingBackend forwards them all), its wall
// time added to the current step's tally (the CPU backend's ops are synchronous, so wall time
// around the call is the op's time); the weight bytes matmuls and the chosen experts read.
class TimedBackend final : public test::ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;

  struct Tally {
    double seconds[kKinds] = {};
    double matmul_bytes = 0;  // dense matmuls and the experts each step ran
    int64_t decode_steps = 0;
  };
  Tally decode;           // summed over decode steps (one token per step)
  bool in_decode = false;

  void begin_step(const StepPlan& plan) override {
    in_decode = plan.tokens.size() == 1;
    if (in_decode) ++decode.decode_steps;
    ForwardingBackend::begin_step(plan);
  }
  void matmul(const Tensor& w, const Tensor& x, Tensor& out, int64_t n) override {
    ForwardingBackend::matmul(w, x, out, n);
    if (in_decode) decode.matmul_bytes += bytes_of(w);
  }
  void moe_ffn(const ExpertWeights& w, const Tensor& x, const int32_t* experts, const float* weights, int k,
               const Tensor* shared, const float* shared_weights, Tensor& out, int64_t n) override {
    ForwardingBackend::moe_ffn(w, x, experts, weights, k, shared, shared_weights, out, n);
    if (!in_decode || w.n_experts <= 0) return;
    std::vector<bool> used(static_cast<size_t>(w.n_experts), false);
    for (int64_t i = 0; i < n * k; ++i) used[static_cast<size_t>(experts[i])] = true;
    const double per_expert = (bytes_of(w.gate) + bytes_of(w.up) + bytes_of(w.down)) / w.n_experts;
    decode.matmul_bytes += per_expert * static_cast<double>(std::count(used.begin(), used.end(), true));
  }  // (a shared expert's matmuls go through matmul())

 private:
  static double bytes_of(const Tensor& w) {
    return static_cast<double>(ggml_row_size(w.type, w.cols)) * static_cast<double>(w.rows);
  }
  void around(Op op, const std::function<void()>& call) override {
    const auto t0 = Clock::now();
    call();
    if (in_decode) decode.seconds[kind_of(op)] += std::chrono::duration<double>(Clock::now() - t0).count();
  }
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
  const double mm_ms = (t.seconds[kMatmul] + t.seconds[kMoe]) * 1e3 / static_cast<double>(steps);
  const double mm_gb = t.matmul_bytes / static_cast<double>(steps) / 1e9;

  std::printf("%s, %d threads, %ld decode steps after a %d-token prompt\n", a.model.c_str(), a.threads,
              static_cast<long>(steps), a.prompt_len);
  std::printf("stream read bandwidth: %.1f GB/s; weights read per step %.3f GB -> %.2f ms at stream speed\n", bw,
              mm_gb, mm_gb / bw * 1e3);
  std::printf("decode: %.2f ms per token (%.2f tok/s), wall between tokens\n", wall_ms, 1e3 / wall_ms);
  for (int k = 0; k < kKinds; ++k) {
    const double ms = t.seconds[k] * 1e3 / static_cast<double>(steps);
    std::printf("  %-26s %8.3f ms  %5.1f%%", kKindNames[k], ms, 100.0 * ms / wall_ms);
    std::printf("\n");
  }
  std::printf("  matmuls + experts: %.3f ms, %.1f GB/s, %.0f%% of stream\n", mm_ms, mm_gb / mm_ms * 1e3,
              100.0 * mm_gb / mm_ms * 1e3 / bw);
  std::printf("  %-26s %8.3f ms  %5.1f%%\n", "engine (schedule, sample)", wall_ms - ops_ms, 100.0 * (wall_ms - ops_ms) / wall_ms);
  std::printf("step / (matmul + expert) sum: %.3f (target <= 1.10)\n", wall_ms / mm_ms);
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
