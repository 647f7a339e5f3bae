// Decode and prefill benchmark of the Model on the CudaBackend (not a test; built with the GPU
// tests).
//
//   bench_cuda_decode --model M.gguf [--batches 1,4,16,64,256] [--prefill 512,2048] [--prompt 128]
//                     [--new 128] [--max-batch-tokens 2048] [--hbm-tbps 4.8]
//                     [--cuda-weights quantized|quantized-f32|bf16] [--cuda-quant-gemm mma|cublas]
//                     [--cuda-prefill-attention mma|exact] [--cuda-batch-invariant on|off]
//                     [--copy-mib 1024] [--sampling device|host]
//                     [--cuda-graphs on|off] [--kv-cache-type T] [--kv-cache-type-k T]
//                     [--kv-cache-type-v T] [--long-ctx 4096,16384,32768] [--long-batches 1]
//
// First it measures the device-to-device copy rate (cudaMemcpy of --copy-mib MiB timed with
// events, median of 20; read + write bytes) and the weight bytes read per token: every matrix
// as the backend holds it (--cuda-weights quantized or quantized-f32: its GGUF bits, decoded with
// int8 or f32 activations, and more than 8 rows by the tensor-core GEMM on the blocks or, with
// --cuda-quant-gemm cublas, by a bf16 copy of one matrix at a time for cuBLAS; bf16: 2 bytes a
// value, as
// F16 / BF16 matrices always are; F32 matrices 4), f32 vectors, without the embedding table (a
// token reads one row) and of stacked experts only the used share. It also prints the device
// memory the load took (weights plus load-time scratch), which shows what the backend really
// holds.
// For each batch size B: B sequences of `prompt` tokens are prefilled (chunked into steps of at
// most max-batch-tokens), then `new` decode steps run with all B sequences in every step. It
// prints decode tokens/s (B * new / decode time) and the rate at which the weights are read
// (bytes per token x steps/s, since a step reads them once for all B rows), over --hbm-tbps
// (nominal) and over the measured copy rate. For each --prefill length P: one sequence of P
// tokens in one step (after a warm-up of the same shape), tokens/s of the faster of two runs.
// Each decode step samples on the GPU as the engine does for plain requests (--sampling device,
// the default: Model::forward with one greedy draw per sequence, only ids come back); with
// --sampling host it copies B rows of logits to the host instead (the path of requests with
// logprobs or penalties), without sampling them. Prefill steps sample nothing. The tokens fed
// back are fixed ids (the throughput does not depend on their values). --cuda-graphs on records
// the decode steps as CUDA graphs (CudaBackendOptions::cuda_graphs) and replays them.
// For each --long-ctx length C and --long-batches size B (none by default): B sequences whose
// caches already hold C positions decode `new` tokens. Nothing is prefilled (what the cache
// holds does not change the time a step takes), so a 32k context costs no 32k-token prefill.
// It prints tokens/s, ms per step and the bytes a step reads, weights plus every row's KV
// (C + new/2 positions on average, all layers, K and V at the cache's types), over the
// measured copy rate: the long-context decode attention's figure of merit.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include <algorithm>

#include "engine/backend/cuda/backend_cuda.h"
#include "engine/gguf/gguf.h"
#include "engine/model/model.h"

using namespace pagoda;

namespace {

constexpr int kBlock = 16;

struct Seq {
  std::vector<int32_t> table;
  int n_past = 0;
};

// Adds tokens [begin, end) of `seq` (token ids arbitrary but valid) to `plan`.
void add_tokens(StepPlan& plan, const Seq& seq, int begin, int end, int vocab) {
  SeqInStep s;
  s.seq_id = plan.seqs.size();
  s.first_token = plan.n_tokens();
  s.n_tokens = end - begin;
  s.n_past = begin;
  s.block_table_offset = static_cast<int32_t>(plan.block_tables.size());
  s.n_blocks = static_cast<int32_t>(seq.table.size());
  plan.block_tables.insert(plan.block_tables.end(), seq.table.begin(), seq.table.end());
  for (int i = begin; i < end; ++i) {
    plan.tokens.push_back((i * 7919 + 13) % vocab);
    plan.positions.push_back(i);
    plan.slots.push_back(seq.table[static_cast<size_t>(i / kBlock)] * kBlock + i % kBlock);
    plan.token_seq.push_back(static_cast<int32_t>(plan.seqs.size()));
  }
  plan.seqs.push_back(s);
  plan.logit_rows.push_back(plan.n_tokens() - 1);
}

// Device-to-device copy rate in TB/s (read + write bytes), median of 20 copies of `bytes` timed
// with events; 0 when a CUDA call fails.
double measured_copy_tbps(size_t bytes) {
  void *a = nullptr, *b = nullptr;
  if (cudaMalloc(&a, bytes) != cudaSuccess) return 0;
  if (cudaMalloc(&b, bytes) != cudaSuccess) {
    cudaFree(a);
    return 0;
  }
  cudaMemsetAsync(a, 1, bytes, nullptr);
  cudaEvent_t e0, e1;
  cudaEventCreateWithFlags(&e0, cudaEventDefault);
  cudaEventCreateWithFlags(&e1, cudaEventDefault);
  std::vector<float> ms;
  for (int i = 0; i < 23; ++i) {
    cudaEventRecord(e0);
    cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float t = 0;
    cudaEventElapsedTime(&t, e0, e1);
    if (i >= 3) ms.push_back(t);  // the first copies warm up
  }
  const bool ok = cudaGetLastError() == cudaSuccess;
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaFree(a);
  cudaFree(b);
  if (!ok) return 0;
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  const double s = double(ms[ms.size() / 2]) * 1e-3;
  return s > 0 ? 2.0 * double(bytes) / s / 1e12 : 0;
}

// Bytes the backend holds for tensor `t` (see the file comment).
double device_bytes(const gguf::TensorInfo& t, bool quantized_weights) {
  const double n = static_cast<double>(t.n_elements());
  if (t.dims.size() < 2 || t.type == GgmlType::F32) return 4.0 * n;
  if (!quantized_weights || t.type == GgmlType::F16 || t.type == GgmlType::BF16) return 2.0 * n;
  int64_t rows = 1;
  for (size_t d = 1; d < t.dims.size(); ++d) rows *= t.dims[d];
  return static_cast<double>(ggml_row_size(t.type, t.dims[0])) * static_cast<double>(rows);
}

size_t device_free_bytes() {
  size_t free_b = 0, total = 0;
  return cudaMemGetInfo(&free_b, &total) == cudaSuccess ? free_b : 0;
}

std::vector<int> int_list(const std::string& v) {
  std::vector<int> out;
  std::stringstream ss(v);
  for (std::string b; std::getline(ss, b, ',');)
    if (!b.empty()) out.push_back(std::stoi(b));
  return out;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int run(int argc, char** argv) {
  std::string model_path;
  std::vector<int> batches = {1, 4, 16, 64, 256}, prefills = {512, 2048}, long_ctx, long_batches = {1};
  int prompt = 128, n_new = 128, max_tokens = 2048, copy_mib = 1024;
  double hbm_tbps = 4.8;
  bool device_sampling = true;
  CudaBackendOptions opts;
  KvTypes kv_types;
  auto kv_type = [](const std::string& flag, const std::string& v) {
    GgmlType t{};
    if (!kv_type_from_name(v.c_str(), &t)) throw std::runtime_error(flag + ": unknown KV type '" + v + "'");
    return t;
  };
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], v = argv[i + 1];
    if (flag == "--model") model_path = v;
    else if (flag == "--prompt") prompt = std::stoi(v);
    else if (flag == "--new") n_new = std::stoi(v);
    else if (flag == "--max-batch-tokens") max_tokens = std::stoi(v);
    else if (flag == "--hbm-tbps") hbm_tbps = std::stod(v);
    else if (flag == "--sampling" && (v == "device" || v == "host")) device_sampling = v == "device";
    else if (flag == "--cuda-graphs" && (v == "on" || v == "off")) opts.cuda_graphs = v == "on";
    else if (flag == "--cuda-batch-invariant" && (v == "on" || v == "off")) opts.batch_invariant = v == "on";
    else if (flag == "--kv-cache-type") kv_types = KvTypes(kv_type(flag, v));
    else if (flag == "--kv-cache-type-k") kv_types.k = kv_type(flag, v);
    else if (flag == "--kv-cache-type-v") kv_types.v = kv_type(flag, v);
    else if (flag == "--batches") batches = int_list(v);
    else if (flag == "--prefill") prefills = int_list(v);
    else if (flag == "--long-ctx") long_ctx = int_list(v);
    else if (flag == "--long-batches") long_batches = int_list(v);
    else if (flag == "--copy-mib") copy_mib = std::stoi(v);
    else if (flag == "--cuda-weights") opts.weights = parse_cuda_weights(v, "--cuda-weights");
    else if (flag == "--cuda-quant-gemm") opts.quant_gemm = parse_quant_gemm(v, "--cuda-quant-gemm");
    else if (flag == "--cuda-prefill-attention")
      opts.prefill_attention = parse_prefill_attention(v, "--cuda-prefill-attention");
    else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  if (model_path.empty()) {
    std::fprintf(stderr, "usage: bench_cuda_decode --model M.gguf [--batches 1,64,256] ...\n");
    return 2;
  }
  std::string why;
  if (!cuda_available(&why)) {
    std::fprintf(stderr, "bench_cuda_decode: %s\n", why.c_str());
    return 1;
  }
  const double copy_tbps = measured_copy_tbps(size_t(std::max(1, copy_mib)) << 20);
  const bool quantized = opts.weights != CudaWeights::Bf16;
  const auto file = gguf::GgufFile::open(model_path);
  for (int p : prefills) max_tokens = std::max(max_tokens, p);
  const size_t free_before = device_free_bytes();
  Model model(file, make_cuda_backend(opts), max_tokens);
  const size_t free_after = device_free_bytes();
  const ModelConfig& cfg = model.config();
  const int vocab = cfg.vocab_size;
  double weight_bytes = 0, bytes_per_token = 0;
  for (const auto& t : file.tensors()) {
    const double b = device_bytes(t, quantized);
    weight_bytes += b;
    if (t.name == "token_embd.weight" && !cfg.tied_embeddings) continue;
    const bool experts = t.dims.size() == 3 && cfg.n_experts > 0;
    bytes_per_token += experts ? b * cfg.n_experts_used / cfg.n_experts : b;
  }
  std::printf("model %s: weights %s%s%s: %.4g GB on the GPU (the load took %.4g GB of device memory), %.4g GB read "
              "per token; KV %s/%s; prefill attention %s; sampling on the %s, CUDA graphs %s%s; device copy %.3f TB/s (read + write)\n",
              model_path.c_str(), cuda_weights_name(opts.weights), quantized ? ", GEMM " : "",
              quantized ? quant_gemm_name(opts.quant_gemm) : "", weight_bytes / 1e9, free_before > free_after ? double(free_before - free_after) / 1e9 : 0.0,
              bytes_per_token / 1e9, ggml_type_info(kv_types.k).name, ggml_type_info(kv_types.v).name,
              prefill_attention_name(opts.prefill_attention), device_sampling ? "device" : "host (logits copied back)", opts.cuda_graphs ? "on" : "off",
              opts.batch_invariant ? ", batch-invariant matmuls" : "", copy_tbps);
  std::fflush(stdout);

  // A cache for B sequences of `len` positions each (contiguous tables), and `new` decode steps
  // of all B sequences from position `start` on; returns their seconds.
  auto make_seqs = [&](int B, int len) {
    const int blocks_per_seq = (len + kBlock - 1) / kBlock;
    model.init_kv_cache(B * blocks_per_seq, kBlock, kv_types);
    std::vector<Seq> seqs(static_cast<size_t>(B));
    for (int s = 0; s < B; ++s)
      for (int b = 0; b < blocks_per_seq; ++b) seqs[static_cast<size_t>(s)].table.push_back(s * blocks_per_seq + b);
    return seqs;
  };
  auto decode_steps = [&](const std::vector<Seq>& seqs, int start) {
    const int B = static_cast<int>(seqs.size());
    std::vector<float> logits;
    std::vector<SampleRequest> draws(static_cast<size_t>(B));  // greedy, one per sequence
    for (int s = 0; s < B; ++s) draws[static_cast<size_t>(s)].row = s;
    StepLogits drawn;
    const auto t_decode = std::chrono::steady_clock::now();
    for (int step = 0; step < n_new; ++step) {
      StepPlan plan;
      for (int s = 0; s < B; ++s) add_tokens(plan, seqs[static_cast<size_t>(s)], start + step, start + step + 1, vocab);
      if (device_sampling) model.forward(plan, draws, drawn);
      else model.forward(plan, logits);
    }
    return seconds_since(t_decode);
  };

  for (int B : batches) {
    const std::vector<Seq> seqs = make_seqs(B, prompt + n_new);
    std::vector<float> logits;
    // Prefill: whole prompts, as many sequences per step as the token budget allows.
    const auto t_prefill = std::chrono::steady_clock::now();
    for (int s = 0; s < B;) {
      StepPlan plan;
      while (s < B && plan.n_tokens() + prompt <= max_tokens) {
        add_tokens(plan, seqs[static_cast<size_t>(s)], 0, prompt, vocab);
        ++s;
      }
      if (plan.n_tokens() == 0) {
        std::fprintf(stderr, "prompt longer than --max-batch-tokens\n");
        return 2;
      }
      model.forward(plan, logits);
    }
    const double prefill_s = seconds_since(t_prefill);
    // Decode: every sequence advances one token per step.
    const double decode_s = decode_steps(seqs, prompt);
    const double tps = static_cast<double>(B) * n_new / decode_s;
    std::printf("batch %4d: prefill %.0f tok/s (%.2f s), decode %.1f tok/s aggregate, %.2f ms/step",
                B, static_cast<double>(B) * prompt / prefill_s, prefill_s, tps, 1e3 * decode_s / n_new);
    // The weights are read once per step for all B rows.
    const double used = bytes_per_token * (n_new / decode_s) / 1e12;  // TB/s of weight reads
    std::printf(", weights read at %.3f TB/s = %.0f%% of %.2f nominal", used, 100.0 * used / hbm_tbps, hbm_tbps);
    if (copy_tbps > 0) std::printf(", %.0f%% of the measured copy", 100.0 * used / copy_tbps);
    std::printf("\n");
    std::fflush(stdout);
  }

  // Bytes of one position's K and V over all layers.
  const double kv_bytes_per_pos =
      static_cast<double>(cfg.n_layers) * cfg.n_kv_heads *
      static_cast<double>(kv_head_bytes(kv_types.k, cfg.head_dim) + kv_head_bytes(kv_types.v, cfg.head_dim));
  for (int C : long_ctx)
    for (int B : long_batches) {
      const std::vector<Seq> seqs = make_seqs(B, C + n_new);
      decode_steps(seqs, C);  // warm-up: scratch, graphs for this shape
      const double decode_s = decode_steps(seqs, C);
      const double step_s = decode_s / n_new;
      const double kv_bytes = B * (C + n_new / 2.0) * kv_bytes_per_pos;
      const double tbps = (bytes_per_token + kv_bytes) / step_s / 1e12;
      std::printf("long context %6d batch %3d: decode %.1f tok/s aggregate, %.2f ms/step, %.3g GB read per step "
                  "(weights %.3g + KV %.3g) at %.3f TB/s",
                  C, B, B / step_s, 1e3 * step_s, (bytes_per_token + kv_bytes) / 1e9, bytes_per_token / 1e9,
                  kv_bytes / 1e9, tbps);
      if (copy_tbps > 0) std::printf(" = %.0f%% of the measured copy", 100.0 * tbps / copy_tbps);
      std::printf("\n");
      std::fflush(stdout);
    }

  for (int P : prefills) {
    const int blocks = (P + kBlock - 1) / kBlock;
    model.init_kv_cache(blocks, kBlock, kv_types);
    Seq seq;
    for (int b = 0; b < blocks; ++b) seq.table.push_back(b);
    std::vector<float> logits;
    double best = 0;
    for (int run = 0; run < 3; ++run) {  // run 0 warms up (scratch, GEMM choices)
      const auto t0 = std::chrono::steady_clock::now();
      StepPlan plan;
      add_tokens(plan, seq, 0, P, vocab);
      model.forward(plan, logits);
      const double s = seconds_since(t0);
      if (run > 0 && (best == 0 || s < best)) best = s;
    }
    std::printf("prefill %5d tokens: %.0f tok/s (%.3f s, one sequence, one step)\n", P, P / best, best);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cuda_decode: %s\n", e.what());
    return 1;
  }
}
