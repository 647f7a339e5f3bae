// CpuBackend::moe_ffn: shape checks, then the grouped expert FFN of kernels/cpu/moe.
#include <stdexcept>
#include <string>

#include "engine/backend/cpu/backend_cpu.h"
#include "kernels/cpu/thread_pool.h"

namespace pagoda {

void CpuBackend::moe_ffn(const ExpertWeights& w, const Tensor& x, const int32_t* experts,
                         const float* weights, int k, const Tensor* shared,
                         const float* shared_weights, Tensor& out, int64_t n) {
  auto require = [](bool ok, const char* what) {
    if (!ok) throw std::invalid_argument(std::string("CpuBackend: moe_ffn: ") + what);
  };
  const int64_t ne = w.n_experts;
  require(ne > 0 && k > 0 && k <= ne, "need 1 <= k <= n_experts");
  require(w.gate.rows % ne == 0 && w.gate.rows == w.up.rows && w.gate.cols == x.cols &&
              w.up.cols == x.cols,
          "gate/up must be [n_experts*ff x dim]");
  const int64_t ff = w.gate.rows / ne;
  require(w.down.rows == ne * x.cols && w.down.cols == ff, "down must be [n_experts*dim x ff]");
  require(out.cols == x.cols && n >= 0 && n <= x.rows && n <= out.rows && x.data != out.data,
          "x and out must be distinct [>= n x dim] tensors");
  require(shared == nullptr || (shared->cols == x.cols && n <= shared->rows && shared_weights),
          "the shared expert's output must be [>= n x dim] with weights");
  cpu::MoeExperts e;
  e.gate = w.gate.data, e.up = w.up.data, e.down = w.down.data;
  e.gate_type = w.gate.type, e.up_type = w.up.type, e.down_type = w.down.type;
  // A decode-layout copy serves per expert when each expert's rows are whole groups of its layout.
  auto use_packed = [&](const Tensor& m, int64_t expert_rows, const void*& data, bool& packed) {
    const cpu::PackedWeight* p = packed_copy(m);
    if (p == nullptr || expert_rows % cpu::decode_layout_rows(p->layout) != 0) return;
    data = p->bytes.get();
    packed = true;
    e.layout = p->layout;
  };
  use_packed(w.gate, ff, e.gate, e.gate_packed);
  use_packed(w.up, ff, e.up, e.up_packed);
  use_packed(w.down, x.cols, e.down, e.down_packed);
  e.n_experts = w.n_experts, e.dim = x.cols, e.ff = ff;
  cpu::moe_ffn(*pool_, e, static_cast<const float*>(x.data), n, k, experts, weights,
               shared ? static_cast<const float*>(shared->data) : nullptr, shared_weights,
               static_cast<float*>(out.data), moe_scratch_);
}

}  // namespace pagoda
