// `pagoda quantize`: re-encodes a GGUF model's weight matrices to another weight type, keeping
// every metadata key (general.file_type updated) and every other tensor as it is.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "engine/model/model_writer.h"
#include "engine/model/weight_mix.h"
#include "kernels/ggml_type.h"

namespace pagoda {

struct QuantizeOptions {
  GgmlType type = GgmlType::Q8_0;  // what 2-D weight matrices become (token_embd/output too)
  int threads = 0;                 // <= 0: all cores; never changes the bytes
  WeightMix mix = WeightMix::None;  // a mix over `type` (weight_mix.h): per-tensor types
};

// What happens to one tensor: `to` is the type written; `note` is non-empty when it is not the
// requested type (the mix's choice for it, a fallback because the row does not fit the block,
// or a kept tensor).
struct TensorPlan {
  std::string name;
  GgmlType from;
  GgmlType to;
  std::string note;
};

// Reads `in`, writes `out`. `on_tensor` is told each tensor's plan before writing starts;
// `progress` reports bytes of tensor data written. Throws ModelSpecError for an unsupported
// target type, gguf::GgufError for unreadable input or I/O failure.
void quantize_model(const std::string& in, const std::string& out, const QuantizeOptions& opt,
                    const std::function<void(const TensorPlan&)>& on_tensor = {}, ProgressFn progress = {});

}  // namespace pagoda
