// LoRA on the CudaBackend against the CpuBackend: the kernel (kernels/cuda/lora.cu) against the
// CPU reference row by row, and the Model with two adapters in a batch beside the base model:
// every row's logits within the GPU's bf16 tolerance of the CPU's (relative L2 under 3%, as
// test_cuda_model allows for 16-bit weights), while the adapters move the logits far more than
// that. Skips (CTest: Skipped) without a CUDA device; runs under scripts/gpu-check.sh emu.
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include "engine/backend/cpu/backend_cpu.h"
#include "engine/backend/cuda/backend_cuda.h"
#include "engine/lora/lora_adapter.h"
#include "engine/lora/lora_writer.h"
#include "engine/model/model.h"
#include "kernels/cpu/lora.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/lora.h"
#include "tests/gpu/cuda_test_util.h"

using namespace pagoda;
using namespace pagoda::gputest;

namespace {

template <class T>
T* to_device(const std::vector<T>& v) {
  void* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, v.size() * sizeof(T)));
  CUDA_CHECK(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return static_cast<T*>(p);
}

}  // namespace

TEST_CASE("cuda: lora_add on gathered rows matches the CPU reference", "[cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  const int rank = 12, in = 96, out = 80, n = 6;
  const std::vector<float> a = bf16_values(size_t(rank * in), 1, 0.2f), b = bf16_values(size_t(out * rank), 2, 0.2f);
  const std::vector<float> x = bf16_values(size_t(n * in), 3);
  std::vector<float> y = bf16_values(size_t(n * out), 4);
  const std::vector<int32_t> rows = {4, 1, 5};  // rows 0, 2, 3 untouched
  float *da = to_device(a), *db = to_device(b), *dx = to_device(x), *dy = to_device(y);
  int32_t* dr = to_device(rows);
  cuda::lora_add(da, db, rank, in, out, 0.75f, dx, dy, dr, int64_t(rows.size()), nullptr);
  std::vector<float> got(y.size());
  CUDA_CHECK(cudaMemcpy(got.data(), dy, got.size() * sizeof(float), cudaMemcpyDeviceToHost));
  std::vector<float> want = y, scratch(rank);
  for (int32_t r : rows)
    cpu::lora_add_row(a.data(), b.data(), rank, in, out, 0.75f, x.data() + r * in, want.data() + r * out, scratch.data());
  require_close(got, want, 1e-5f, 1e-5f, "lora_add");
  for (int r : {0, 2, 3})
    for (int j = 0; j < out; ++j) CHECK(got[size_t(r * out + j)] == y[size_t(r * out + j)]);
  for (void* p : {static_cast<void*>(da), static_cast<void*>(db), static_cast<void*>(dx), static_cast<void*>(dy),
                  static_cast<void*>(dr)})
    CUDA_CHECK(cudaFree(p));
}

TEST_CASE("cuda: a batch of the base model and two adapters matches the CPU backend row by row", "[cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  const gguf::GgufFile& file = tiny_bf16_model();
  const std::string dir = std::filesystem::temp_directory_path().string();
  std::vector<std::string> paths;
  for (int i = 0; i < 2; ++i) {
    LoraSpec spec;
    spec.rank = 8 * (i + 1);
    spec.seed = 40 + uint64_t(i);
    spec.projections = parse_lora_projections("q,k,v,o,gate,up,down,output");
    paths.push_back(dir + "/pagoda_cuda_lora_" + std::to_string(i) + "_" + std::to_string(::getpid()) + ".gguf");
    write_random_lora(file, spec, paths.back(), "");
  }
  Model cpu(file, std::make_unique<CpuBackend>(2), 64);
  Model gpu(file, make_cuda_backend(), 64);
  for (Model* m : {&cpu, &gpu}) {
    m->init_kv_cache(16, 16);
    for (int i = 0; i < 2; ++i) m->set_lora(i + 1, LoraAdapter::load(paths[size_t(i)], "llama", m->lora_targets(), 64));
  }
  for (const auto& p : paths) std::remove(p.c_str());

  // The same 10-token prompt three times (own blocks), under the base model and adapters 1, 2.
  StepPlan plan = make_plan({{{0}, 0, 10}, {{1}, 0, 10}, {{2}, 0, 10}}, 16);
  for (int s = 0; s < 3; ++s) plan.seqs[size_t(s)].lora = s;
  for (size_t t = 0; t < plan.tokens.size(); ++t) plan.tokens[t] = int32_t((t % 10) * 7 + 3);
  std::vector<float> lc, lg;
  cpu.forward(plan, lc);
  gpu.forward(plan, lg);
  const size_t vocab = size_t(cpu.config().vocab_size);
  REQUIRE(lc.size() == 3 * vocab);
  REQUIRE(lg.size() == lc.size());
  auto row = [&](const std::vector<float>& v, int s) {
    return std::vector<float>(v.begin() + std::ptrdiff_t(size_t(s) * vocab), v.begin() + std::ptrdiff_t(size_t(s + 1) * vocab));
  };
  for (int s = 0; s < 3; ++s) {
    INFO("sequence " << s);
    CHECK(rel_l2(row(lg, s), row(lc, s)) < 0.03);
  }
  CHECK(rel_l2(row(lg, 1), row(lg, 0)) > 0.1);
  CHECK(rel_l2(row(lg, 2), row(lg, 0)) > 0.1);
}
