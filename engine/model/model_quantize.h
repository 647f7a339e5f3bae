// `pagoda quantize`: re-encodes a GGUF model's weight matrices to another weight type, keeping
// every metadata key (general.file_type updated) and every other tensor as it is.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "engine/model/model_writer.h"
#include "kernels/ggml_type.h"

namespace pagoda {

struct QuantizeOptions {
  GgmlType type = GgmlType::Q8_0;  // what 2-D weight matrices become (token_embd/output too)
  int threads = 0;                 // <= 0: all cores; never changes the bytes
};

// What happens to one tensor: `to` is the type written; `note` is non-empty when it is not the
// requested type (a fallback because the row does not fit the block, or a kept tensor).
struct TensorPlan {
  std::string name;
  GgmlType from;
  GgmlType to;
  std::string note;
};

// The type a weight matrix with rows of `cols` elements gets when `wanted` is asked for: wanted
// itself when cols is a multiple of its block, else the fallback llama.cpp uses (the 256-element
// types to a 32-element type: Q2_K, Q3_K, IQ4_XS -> IQ4_NL, Q4_K -> Q5_0, Q5_K -> Q5_1,
// Q6_K -> Q8_0), and F16 when even 32 does not divide cols.
GgmlType quantize_fallback_type(GgmlType wanted, int64_t cols);

// Reads `in`, writes `out`. `on_tensor` is told each tensor's plan before writing starts;
// `progress` reports bytes of tensor data written. Throws ModelSpecError for an unsupported
// target type, gguf::GgufError for unreadable input or I/O failure.
void quantize_model(const std::string& in, const std::string& out, const QuantizeOptions& opt,
                    const std::function<void(const TensorPlan&)>& on_tensor = {}, ProgressFn progress = {});

}  // namespace pagoda
