// LoraAdapter: a LoRA adapter read from GGUF as llama.cpp's convert_lora_to_gguf.py writes it,
// checked against the base model and held on the host as F32.
//
// The file: general.type "adapter", adapter.type "lora", general.architecture the base model's,
// adapter.lora.alpha (absent or 0: scale 1), and for each adapted base matrix W ([out x in],
// GGUF dims {in, out}) the pair "<W's name>.lora_a" (dims {in, rank}: A, [rank x in]) and
// "<W's name>.lora_b" (dims {rank, out}: B, [out x rank]). The adapted matrix is
// W + scale * B A with scale = alpha / rank (per pair, as llama.cpp computes it). Tensors named
// "*_norm.weight" are skipped (llama.cpp skips them too); anything else is refused. Any type
// the CPU kernels dequantize is read; the values must be finite.
//
// Every refusal is a LoraError whose message names the file and the key or tensor at fault.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace pagoda::gguf { class GgufFile; }

namespace pagoda {

struct LoraError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A base-model matrix an adapter may adapt: its GGUF name and shape [rows x cols] = [out x in]
// (Model::lora_targets lists them).
struct LoraTarget {
  std::string name;
  int64_t rows = 0;
  int64_t cols = 0;
};

// The projections of a layer an adapter may adapt, and their GGUF names
// ("blk.<layer>.attn_q.weight", ...). A model has a target for each of them that its file holds
// as a separate dense matrix (phi3's fused attn_qkv and MoE experts are not targets), and for
// "output.weight" when the output is not tied to the embeddings.
enum class LoraProj { Q, K, V, O, Gate, Up, Down, kCount };
std::string lora_target_name(int layer, LoraProj p);
constexpr const char* kLoraOutputTarget = "output.weight";
// Those of them `file` holds as 2-D matrices, with their shapes (layers first, projection
// order, then the output matrix).
std::vector<LoraTarget> lora_targets_of(const gguf::GgufFile& file, int n_layers);

// One adapted matrix: A [rank x cols] and B [rows x rank], row-major F32.
struct LoraPair {
  std::string target;  // the base matrix's name
  int rank = 0;
  int64_t rows = 0, cols = 0;
  float scale = 1.0f;  // alpha / rank, or 1 when alpha is 0
  std::vector<float> a, b;
};

class LoraAdapter {
 public:
  // Reads and checks `path` against a base model of architecture `arch` (its
  // general.architecture) whose adaptable matrices are `targets`; a pair of rank above
  // `max_rank` is refused. Throws LoraError.
  static std::shared_ptr<const LoraAdapter> load(const std::string& path, const std::string& arch,
                                                 const std::vector<LoraTarget>& targets, int max_rank);
  // The same over an opened file (tests).
  static std::shared_ptr<const LoraAdapter> from_file(const gguf::GgufFile& file, const std::string& arch,
                                                      const std::vector<LoraTarget>& targets, int max_rank);

  const std::string& path() const { return path_; }
  float alpha() const { return alpha_; }
  int max_rank() const { return max_rank_; }
  // In target order (the order of `targets` given to load).
  const std::vector<LoraPair>& pairs() const { return pairs_; }
  const LoraPair* find(const std::string& target) const;
  // A 64-bit digest of everything that changes the adapter's outputs (alpha, every pair's name,
  // shape and values); never 0. The prefix cache keys an adapter's blocks by it, so two files
  // with the same weights share blocks and nothing else does.
  uint64_t content_key() const { return key_; }

 private:
  std::string path_;
  float alpha_ = 0;
  int max_rank_ = 0;
  std::vector<LoraPair> pairs_;
  uint64_t key_ = 0;
};

}  // namespace pagoda
