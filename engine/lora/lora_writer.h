// Random LoRA adapters for tests (`pagoda make-model --lora-for`): a seeded adapter for a given
// base model, in the GGUF layout LoraAdapter reads (llama.cpp's), and the merged model, whose
// adapted matrices are W + scale * B A in F32 (everything else copied), which an adapter's
// outputs are checked against.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/ggml_type.h"

namespace pagoda::gguf { class GgufFile; }

namespace pagoda {

struct LoraSpec {
  int rank = 8;
  float alpha = 16.0f;  // scale = alpha / rank
  uint64_t seed = 0;
  // Which projections: any of q, k, v, o, gate, up, down, output; empty: every layer projection.
  std::vector<std::string> projections;
  GgmlType type = GgmlType::F32;  // of lora_a / lora_b: f32, f16 or bf16
};

// Parses a comma-separated projection list ("q,v,output"); throws std::invalid_argument.
std::vector<std::string> parse_lora_projections(const std::string& list);

// Writes the adapter for `base` to `adapter_path` and, when `merged_path` is not empty, the
// merged model there. The update's entries are about half the size of the base matrix's
// (make-model's weights have a std of 1/sqrt(in)), so an adapter visibly changes the outputs.
// Throws std::invalid_argument for a bad spec or a base with none of the projections.
void write_random_lora(const gguf::GgufFile& base, const LoraSpec& spec, const std::string& adapter_path,
                       const std::string& merged_path);

}  // namespace pagoda
