// Byte layout of one KV-cache head row (head_dim values of one token and KV head) for each KV
// element type, shared by the CPU and CUDA kernels so both address the same bytes.
//
// F32 / F16: head_dim plain values. Q8_0: the head row is cut into groups of G values
// (G = 32 when head_dim is a multiple of 32, as GGUF's Q8_0 block, else 16 or 8), each stored
// as an IEEE-half scale d followed by G int8 q; value = q * d. A group never crosses a head, so
// a head (what attention reads) is addressed alone. Quantizing: d = max|x| / 127,
// q = round-half-away(x / d) computed as x * (1/d) with d in f32 (0 when d is 0), then d is
// stored as f16 - the rule of ggml's quantize_row_q8_0_ref. For G = 32 a group is
// byte-for-byte a GGUF block_q8_0 (34 bytes: 1.88x fewer than f16).
//
// K and V may have different element types (KvTypes: --kv-cache-type-k / --kv-cache-type-v); each
// half's pool is laid out by its own type, so a slot's K row and V row can differ in size.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "kernels/ggml_type.h"

// The layout functions are also device functions in CUDA code (kernels/cuda/kv_elem.cuh).
#if defined(__CUDACC__)
#define PAGODA_KV_HD __host__ __device__
#else
#define PAGODA_KV_HD
#endif

namespace pagoda {

// Values per Q8_0 group for a head of `head_dim`, 0 when Q8_0 cannot hold it (not a multiple
// of 8).
PAGODA_KV_HD constexpr int kv_q8_group(int head_dim) {
  return head_dim % 32 == 0 ? 32 : head_dim % 16 == 0 ? 16 : head_dim % 8 == 0 ? 8 : 0;
}

// True for the element types a KV cache may use.
PAGODA_KV_HD constexpr bool kv_type_supported(GgmlType t) {
  return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::Q8_0;
}

// The KV type named `name` ("f16", "f32", "q8_0": GGUF's type names); false for any other.
inline bool kv_type_from_name(const char* name, GgmlType* out) {
  constexpr GgmlType kTypes[] = {GgmlType::F16, GgmlType::F32, GgmlType::Q8_0};
  for (GgmlType t : kTypes)
    if (std::strcmp(ggml_type_info(t).name, name) == 0) return *out = t, true;
  return false;
}

// Bytes of one head row of `head_dim` values; 0 when the type cannot hold such a row.
PAGODA_KV_HD constexpr int64_t kv_head_bytes(GgmlType t, int head_dim) {
  if (t == GgmlType::F32) return 4 * static_cast<int64_t>(head_dim);
  if (t == GgmlType::F16) return 2 * static_cast<int64_t>(head_dim);
  if (t == GgmlType::Q8_0 && kv_q8_group(head_dim) > 0)
    return static_cast<int64_t>(head_dim) / kv_q8_group(head_dim) * (kv_q8_group(head_dim) + 2);
  return 0;
}

// The element types of a cache's two halves. One type converts to both halves (what
// --kv-cache-type sets), so code that names one type for the whole cache reads as before.
struct KvTypes {
  GgmlType k = GgmlType::F16;
  GgmlType v = GgmlType::F16;

  constexpr KvTypes() = default;
  constexpr KvTypes(GgmlType both) : k(both), v(both) {}  // NOLINT(google-explicit-constructor)
  constexpr KvTypes(GgmlType k_type, GgmlType v_type) : k(k_type), v(v_type) {}
  constexpr bool operator==(const KvTypes& o) const { return k == o.k && v == o.v; }
  constexpr bool operator!=(const KvTypes& o) const { return !(*this == o); }
  constexpr bool mixed() const { return k != v; }
};

// "f16" when both halves agree, else "k=f16,v=q8_0" (log lines, test names).
inline std::string kv_types_name(KvTypes t) {
  if (!t.mixed()) return ggml_type_info(t.k).name;
  return std::string("k=") + ggml_type_info(t.k).name + ",v=" + ggml_type_info(t.v).name;
}

}  // namespace pagoda
