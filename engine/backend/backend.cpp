// Backend's defaults: the memory query (host memory, for backends whose tensors live there) and
// per-layer cache edits where every layer rotates alike.
#include "engine/backend/backend.h"

#include <unistd.h>

#include <fstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace pagoda {

std::string kv_types_problem(const KvCacheConfig& cfg) {
  const std::pair<GgmlType, const char*> halves[] = {{cfg.types.k, "K"}, {cfg.types.v, "V"}};
  for (const auto& [t, half] : halves) {
    if (!kv_type_supported(t))
      return std::string("the KV cache type (") + half + ") must be f16, f32 or q8_0";
    if (kv_head_bytes(t, cfg.head_dim) <= 0)
      return std::string("a q8_0 KV cache (") + half + ") needs a head_dim that is a multiple of 8, not " +
             std::to_string(cfg.head_dim);
  }
  return "";
}

MemoryInfo Backend::memory_info() const { return host_memory_info(); }

MemoryInfo host_memory_info() {
  MemoryInfo m;
  std::ifstream f("/proc/meminfo");
  std::string key, unit;
  size_t kb = 0;
  while (f >> key >> kb >> unit) {
    if (key == "MemAvailable:") m.free_bytes = kb * 1024;
    else if (key == "MemTotal:") m.total_bytes = kb * 1024;
    if (m.free_bytes > 0 && m.total_bytes > 0) break;  // the first lines; later ones may lack a unit
  }
  if (m.free_bytes == 0) {  // no /proc (or no MemAvailable): what sysconf knows
    const long pages = sysconf(_SC_AVPHYS_PAGES);
    const long page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0) m.free_bytes = static_cast<size_t>(pages) * static_cast<size_t>(page);
  }
  return m;
}

void Backend::matmul_same_x(const Tensor* const* w, int count, const Tensor& x, Tensor* const* out, int64_t n) {
  for (int j = 0; j < count; ++j) matmul(*w[j], x, *out[j], n);
}

void Backend::add_rms_norm(Tensor& x, const Tensor* residual, const Tensor& weight, float eps, Tensor& out,
                           int64_t n) {
  if (residual) add(x, *residual, n);
  rms_norm(x, weight, eps, out, n);
}

void Backend::add_rms_norm_matmuls(Tensor& x, const Tensor* residual, const Tensor& weight, float eps, Tensor& xn,
                                   const Tensor* const* w, int count, Tensor* const* out, int64_t n) {
  add_rms_norm(x, residual, weight, eps, xn, n);
  matmul_same_x(w, count, xn, out, n);
}

void Backend::rope_store_kv(int layer, Tensor& q, Tensor& k, const Tensor& v, int n_heads, int n_kv_heads,
                            const RopeConfig& r) {
  rope(q, n_heads, r);
  rope(k, n_kv_heads, r);
  store_kv(layer, k, v);
}

void Backend::apply_cache_edits_per_layer(const std::vector<RopeConfig>& rope_of_layer) {
  if (rope_of_layer.empty()) throw std::invalid_argument("apply_cache_edits_per_layer: no layers");
  const RopeConfig& a = rope_of_layer.front();
  for (const RopeConfig& r : rope_of_layer)
    if (r.head_dim != a.head_dim || r.freq_base != a.freq_base || r.freq_scale != a.freq_scale ||
        r.neox != a.neox || r.freq_factors.data != a.freq_factors.data)
      throw std::logic_error("backend '" + name() +
                             "' cannot shift the K of layers that rotate differently (context shift of this model)");
  apply_cache_edits(a);
}

}  // namespace pagoda
