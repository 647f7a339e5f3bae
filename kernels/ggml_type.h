// GGML tensor element types as stored in GGUF files: numeric ids, block shapes and byte sizes.
// Shared by the GGUF reader (to validate tensor sizes) and by the kernels (to walk rows).
#pragma once
#include <cstddef>
#include <cstdint>

namespace pagoda {

// Numeric values are the on-disk GGUF/ggml ids; never renumber.
enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15, IQ4_NL = 20, IQ4_XS = 23,
  I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, BF16 = 30,
};

struct GgmlTypeInfo {
  GgmlType type;
  const char* name;
  int block_size;     // elements per block (1 for plain types)
  int type_size;      // bytes per block
  bool supported;     // pagoda has kernels for it (weights of this type can be loaded)
};

// nullptr when `id` is not a type pagoda knows the layout of.
inline const GgmlTypeInfo* ggml_type_info(uint32_t id) {
  static const GgmlTypeInfo table[] = {
      {GgmlType::F32, "f32", 1, 4, true},        {GgmlType::F16, "f16", 1, 2, true},
      {GgmlType::Q4_0, "q4_0", 32, 18, true},    {GgmlType::Q4_1, "q4_1", 32, 20, true},
      {GgmlType::Q5_0, "q5_0", 32, 22, true},    {GgmlType::Q5_1, "q5_1", 32, 24, true},
      {GgmlType::Q8_0, "q8_0", 32, 34, true},    {GgmlType::Q8_1, "q8_1", 32, 36, false},
      {GgmlType::Q2_K, "q2_k", 256, 84, true},   {GgmlType::Q3_K, "q3_k", 256, 110, true},
      {GgmlType::Q4_K, "q4_k", 256, 144, true},  {GgmlType::Q5_K, "q5_k", 256, 176, true},
      {GgmlType::Q6_K, "q6_k", 256, 210, true},  {GgmlType::Q8_K, "q8_k", 256, 292, false},
      {GgmlType::IQ4_NL, "iq4_nl", 32, 18, true}, {GgmlType::IQ4_XS, "iq4_xs", 256, 136, true},
      {GgmlType::I8, "i8", 1, 1, false},         {GgmlType::I16, "i16", 1, 2, false},
      {GgmlType::I32, "i32", 1, 4, false},       {GgmlType::I64, "i64", 1, 8, false},
      {GgmlType::F64, "f64", 1, 8, false},       {GgmlType::BF16, "bf16", 1, 2, true},
  };
  for (const auto& info : table)
    if (static_cast<uint32_t>(info.type) == id) return &info;
  return nullptr;
}

inline const GgmlTypeInfo& ggml_type_info(GgmlType t) { return *ggml_type_info(static_cast<uint32_t>(t)); }

// Bytes of a row of `n` elements; `n` must be a multiple of the block size.
inline size_t ggml_row_size(GgmlType t, int64_t n) {
  const auto& info = ggml_type_info(t);
  return static_cast<size_t>(n / info.block_size) * static_cast<size_t>(info.type_size);
}

}  // namespace pagoda
