// Decode benchmark of the Model on the CudaBackend (not a test; built with the GPU tests).
//
//   bench_cuda_decode --model M.gguf [--batches 1,64,256] [--prompt 128] [--new 128]
//                     [--max-batch-tokens 2048] [--hbm-tbps 4.8] [--sampling device|host]
//                     [--cuda-graphs on|off] [--kv-cache-type T] [--kv-cache-type-k T]
//                     [--kv-cache-type-v T]
//
// For each batch size B: B sequences of `prompt` tokens are prefilled (chunked into steps of at
// most max-batch-tokens), then `new` decode steps run with all B sequences in every step. It
// prints decode tokens/s (B * new / decode time) and, for B = 1, the fraction of HBM bandwidth
// that reading the weights once per token implies: bytes read per token (bf16 matrices and f32
// vectors as held on the GPU, without the embedding table, of which a token reads one row, and
// of stacked experts only the used share) x tok/s, over --hbm-tbps (nominal) and over the
// bandwidth of a device-to-device copy it measures first (bytes read plus bytes written).
// Each decode step samples on the GPU as the engine does for plain requests (--sampling device,
// the default: Model::forward with one greedy draw per sequence, only ids come back); with
// --sampling host it copies B rows of logits to the host instead (the path of requests with
// logprobs or penalties), without sampling them. Prefill steps sample nothing. The tokens fed
// back are fixed ids (the throughput does not depend on their values). --cuda-graphs on records
// the decode steps as CUDA graphs (CudaBackendOptions::cuda_graphs) and replays them.
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

// Device-to-device copy bandwidth in TB/s (read + write bytes), median of 20 copies of 1 GiB
// timed with events; 0 when a CUDA call fails.
double measured_copy_tbps() {
  const size_t bytes = size_t(1) << 30;
  void *a = nullptr, *b = nullptr;
  if (cudaMalloc(&a, bytes) != cudaSuccess) return 0;
  if (cudaMalloc(&b, bytes) != cudaSuccess) {
    cudaFree(a);
    return 0;
  }
  cudaMemset(a, 1, bytes);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
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
  return 2.0 * double(bytes) / (double(ms[ms.size() / 2]) * 1e-3) / 1e12;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int run(int argc, char** argv) {
  std::string model_path;
  std::vector<int> batches = {1, 64, 256};
  int prompt = 128, n_new = 128, max_tokens = 2048;
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
    else if (flag == "--kv-cache-type") kv_types = KvTypes(kv_type(flag, v));
    else if (flag == "--kv-cache-type-k") kv_types.k = kv_type(flag, v);
    else if (flag == "--kv-cache-type-v") kv_types.v = kv_type(flag, v);
    else if (flag == "--batches") {
      batches.clear();
      std::stringstream ss(v);
      for (std::string b; std::getline(ss, b, ',');) batches.push_back(std::stoi(b));
    } else {
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
  const double copy_tbps = measured_copy_tbps();
  const auto file = gguf::GgufFile::open(model_path);
  Model model(file, make_cuda_backend(opts), max_tokens);
  const ModelConfig& cfg = model.config();
  const int vocab = cfg.vocab_size;
  // As held on the GPU: bf16 matrices, f32 vectors. Per token: see the file comment.
  double weight_bytes = 0, bytes_per_token = 0;
  for (const auto& t : file.tensors()) {
    const double b = static_cast<double>(t.n_elements()) * (t.dims.size() >= 2 ? 2.0 : 4.0);
    weight_bytes += b;
    if (t.name == "token_embd.weight" && !cfg.tied_embeddings) continue;
    const bool experts = t.dims.size() == 3 && cfg.n_experts > 0;
    bytes_per_token += experts ? b * cfg.n_experts_used / cfg.n_experts : b;
  }
  std::printf("model %s: %.2f GB of weights on the GPU (bf16), %.2f GB read per token; KV %s/%s; "
              "sampling on the %s, CUDA graphs %s; device copy %.2f TB/s (read + write)\n",
              model_path.c_str(), weight_bytes / 1e9, bytes_per_token / 1e9, ggml_type_info(kv_types.k).name,
              ggml_type_info(kv_types.v).name, device_sampling ? "device" : "host (logits copied back)",
              opts.cuda_graphs ? "on" : "off", copy_tbps);

  for (int B : batches) {
    const int blocks_per_seq = (prompt + n_new + kBlock - 1) / kBlock;
    model.init_kv_cache(B * blocks_per_seq, kBlock, kv_types);
    std::vector<Seq> seqs(static_cast<size_t>(B));
    for (int s = 0; s < B; ++s)
      for (int b = 0; b < blocks_per_seq; ++b) seqs[static_cast<size_t>(s)].table.push_back(s * blocks_per_seq + b);
    std::vector<float> logits;
    std::vector<SampleRequest> draws(static_cast<size_t>(B));  // greedy, one per sequence
    for (int s = 0; s < B; ++s) draws[static_cast<size_t>(s)].row = s;
    StepLogits drawn;
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
    const auto t_decode = std::chrono::steady_clock::now();
    for (int step = 0; step < n_new; ++step) {
      StepPlan plan;
      for (int s = 0; s < B; ++s) add_tokens(plan, seqs[static_cast<size_t>(s)], prompt + step, prompt + step + 1, vocab);
      if (device_sampling) model.forward(plan, draws, drawn);
      else model.forward(plan, logits);
    }
    const double decode_s = seconds_since(t_decode);
    const double tps = static_cast<double>(B) * n_new / decode_s;
    std::printf("batch %4d: prefill %.0f tok/s (%.2f s), decode %.1f tok/s aggregate, %.2f ms/step",
                B, static_cast<double>(B) * prompt / prefill_s, prefill_s, tps, 1e3 * decode_s / n_new);
    if (B == 1) {
      const double used = bytes_per_token * tps / 1e12;  // TB/s of weight reads
      std::printf(", weights read at %.2f TB/s = %.0f%% of %.2f nominal", used, 100.0 * used / hbm_tbps, hbm_tbps);
      if (copy_tbps > 0) std::printf(", %.0f%% of the measured copy", 100.0 * used / copy_tbps);
    }
    std::printf("\n");
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
