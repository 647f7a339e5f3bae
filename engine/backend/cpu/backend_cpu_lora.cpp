// CpuBackend's LoRA op: each row of an adapter's group gets kernels/cpu/lora.h's update, the
// rows spread over the thread pool (each row's arithmetic is the same on any thread).
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/backend/cpu/backend_cpu.h"
#include "kernels/cpu/lora.h"

namespace pagoda {

void CpuBackend::lora_add(const LoraRows& g, const Tensor& x, Tensor& out) {
  const int64_t rank = g.a.rows;
  if (g.a.type != GgmlType::F32 || g.b.type != GgmlType::F32 || x.type != GgmlType::F32 || out.type != GgmlType::F32)
    throw std::invalid_argument("lora_add: adapter matrices and activations must be F32");
  if (g.a.cols != x.cols || g.b.rows != out.cols || g.b.cols != rank || rank <= 0)
    throw std::invalid_argument("lora_add: A [" + std::to_string(g.a.rows) + " x " + std::to_string(g.a.cols) +
                                "] and B [" + std::to_string(g.b.rows) + " x " + std::to_string(g.b.cols) +
                                "] do not fit x (" + std::to_string(x.cols) + " columns) -> out (" +
                                std::to_string(out.cols) + ")");
  for (int64_t i = 0; i < g.n_rows; ++i)
    if (g.rows[i] < 0 || g.rows[i] >= x.rows || g.rows[i] >= out.rows)
      throw std::invalid_argument("lora_add: row " + std::to_string(g.rows[i]) + " is outside the activations");
  const float* a = static_cast<const float*>(g.a.data);
  const float* b = static_cast<const float*>(g.b.data);
  const float* xs = static_cast<const float*>(x.data);
  float* ys = static_cast<float*>(out.data);
  std::vector<std::vector<float>> scratch(static_cast<size_t>(n_threads()), std::vector<float>(static_cast<size_t>(rank)));
  each_row(g.n_rows, rank * (x.cols + out.cols), [&](int64_t i, int thread) {
    const int64_t r = g.rows[i];
    cpu::lora_add_row(a, b, static_cast<int>(rank), x.cols, out.cols, g.scale, xs + r * x.cols, ys + r * out.cols,
                      scratch[static_cast<size_t>(thread)].data());
  });
}

}  // namespace pagoda
