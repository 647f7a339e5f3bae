// make-model: writes a random-weight GGUF model of any llama/qwen2/qwen2moe/qwen3/qwen3moe/gemma2/gemma3/phi3 shape (MoE
// included) and weight type, with
// a tokenizer (the project's own byte-level vocabulary, or every tokenizer.* key copied from
// another GGUF). Weights are seeded and deterministic: the same spec gives identical bytes,
// whatever the number of threads used to generate them.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/gguf/gguf.h"
#include "engine/model/model_config.h"
#include "engine/model/weight_mix.h"
#include "kernels/ggml_type.h"

namespace pagoda {

// Per-pair RoPE frequency factors written as rope_freqs.weight.
enum class RopeFreqs {
  None,    // no rope_freqs.weight (Llama 2/3, Qwen2)
  Llama3,  // Llama 3.1's published "llama3" scaling: llama3_rope_freq_factors(n_rot, base)
  LongRope,  // phi3: rope_factors_short/long.weight (longrope_factors), original context ctx/4
};

struct ModelSpec {
  Arch arch = Arch::Llama;
  std::string name = "pagoda-random";
  int n_layers = 2;
  int dim = 256;
  int ff_dim = 512;
  int n_heads = 4;
  int n_kv_heads = 2;
  int head_dim = 0;  // 0: dim / n_heads; otherwise written as attention.key_length (Qwen3, Gemma)
  int ctx = 1024;
  int vocab_size = 0;        // 0: the vocabulary's own size; larger pads the own vocabulary
  float rope_freq_base = 0;  // 0: the architecture's default (llama 1e4, qwen2 1e6)
  RopeFreqs rope_freqs = RopeFreqs::None;
  float rms_eps = 0;         // 0: the architecture's default (llama 1e-5, qwen2 1e-6)
  GgmlType type = GgmlType::F16;  // matrices and the embedding table; norms/biases stay F32
  WeightMix mix = WeightMix::None;  // a mix over `type` (weight_mix.h): per-matrix types
  uint64_t seed = 0;
  std::string vocab_from;    // GGUF path whose tokenizer.* keys are copied; empty: own vocabulary
  int pooling_type = 0;      // > 0: written as <arch>.pooling_type (1 mean, 2 CLS, 3 last)
  // <arch>.attention.sliding_window for gemma2/gemma3/phi3; -1: the architecture's default
  // (gemma2 4096, gemma3 512, phi3 ctx - 1); 0: none (phi3 only).
  int sliding_window = -1;
  // Mixture of experts: n_experts > 0 writes <arch>.expert_count / expert_used_count, a router
  // (ffn_gate_inp, F32 as llama.cpp's converter writes it) and stacked experts
  // (ffn_{gate,up,down}_exps, 3-D, of `type`) instead of the dense FFN: a Mixtral-style llama.
  // qwen2moe always has experts (defaults below) and a shared expert (ffn_*_shexp, gated by
  // ffn_gate_inp_shexp); qwen3moe always has experts and no shared expert.
  int n_experts = 0;             // 0: dense llama/qwen2; qwen2moe/qwen3moe: kQwen2MoeExperts
  int n_experts_used = 0;        // 0: kDefaultExpertsUsed
  int expert_ff_dim = 0;         // 0: ff_dim (qwen*moe: expert_feed_forward_length; llama: it
                                 // replaces ff_dim, as feed_forward_length, as in Mixtral files)
  int shared_expert_ff_dim = 0;  // qwen2moe only; 0: ff_dim
};

constexpr int kQwen2MoeExperts = 8;  // also qwen3moe's default
constexpr int kDefaultExpertsUsed = 2;

struct ModelSpecError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The spec of a named preset ("demo", "tinyllama-1.1b", "llama3-8b", "llama3.1-8b" = the
// llama3-8b shape with Llama 3.1's rope_freqs and 128k context, "llama3-70b" = Llama 3.1 70B's
// shape, "qwen3-8b"); throws ModelSpecError.
ModelSpec model_preset(const std::string& name);
std::vector<std::string> model_preset_names();

// Parses a --rope-freqs value ("none", "llama3", "longrope"); throws ModelSpecError.
RopeFreqs parse_rope_freqs(const std::string& name);

// Parses an --arch value (arch_name's names); throws ModelSpecError.
Arch parse_arch_name(const std::string& name);

// Made-up LongRoPE divisors for n_rot/2 pairs, smooth in the pair index as the published ones
// are: short rises from 1 to 1.5, long from 1 to 16 (geometrically).
std::vector<float> longrope_factors(int n_rot, bool long_factors);

// Llama 3.1's "llama3" RoPE scaling as one frequency divisor per rotated pair (what llama.cpp's
// converter stores in rope_freqs.weight; pair i rotates by pos * base^(-2i/n_rot) / factor[i]).
// With wavelength w_i = 2 pi base^(2i/n_rot): 1 when w_i < original_ctx / high_freq_factor
// (high frequencies kept), `factor` when w_i > original_ctx / low_freq_factor, and in between
// 1 / ((1 - s) / factor + s) with s = (original_ctx / w_i - low_freq_factor) /
// (high_freq_factor - low_freq_factor). Defaults: the published Llama 3.1 values.
std::vector<float> llama3_rope_freq_factors(int n_rot, float freq_base, double factor = 8.0,
                                            double low_freq_factor = 1.0,
                                            double high_freq_factor = 4.0,
                                            int original_ctx = 8192);

// Parses a weight type name accepted by make-model and quantize ("f32", "q8_0", "iq4_xs", ...:
// every type ggml_type_info marks supported); throws ModelSpecError.
GgmlType parse_weight_type(const std::string& name);
// Those names, comma-separated, in GGML id order.
std::string weight_type_names();

// Parses a --type value: a weight type name, or a mix name ("q4_k_m": Q4_K with Q6_K where
// llama.cpp's Q4_K_M puts it, see weight_mix.h); throws ModelSpecError.
WeightChoice parse_weight_choice(const std::string& name);
// The type names, then the mix names, comma-separated.
std::string weight_choice_names();

// llama.cpp's general.file_type number for a model whose matrices are mostly `t`.
uint32_t gguf_file_type(GgmlType t);

// Number of tokens of the project's own byte-level vocabulary (256 bytes + special tokens).
int builtin_vocab_size();

// Writes the own vocabulary's tokenizer.* keys: model "gpt2", the 256 GPT-2 byte tokens, no
// merges, control tokens <|bos|> <|eos|> <|im_start|> <|im_end|>, a ChatML chat template, and
// padding up to `vocab_size` (which must be >= builtin_vocab_size()) with distinct
// space-prefixed pseudo-words ("Ġbaka"): never produced by encoding (there are no merges), but
// readable when a random model samples them.
void add_builtin_vocab(gguf::GgufWriter& w, int vocab_size);

// Copies every tokenizer.* key of `src` to `w`; returns the token count. Throws ModelSpecError
// when `src` has no tokenizer.ggml.tokens.
int copy_vocab(const gguf::GgufFile& src, gguf::GgufWriter& w);

// Progress of the streaming write: bytes of tensor data produced so far, and the total.
using ProgressFn = std::function<void(uint64_t done, uint64_t total)>;

// Validates the spec and returns a writer whose tensors are generated on demand (Fillers), so
// writing a multi-GB model keeps one tensor in memory at a time. `threads` <= 0: all cores.
gguf::GgufWriter build_model(const ModelSpec& spec, ProgressFn progress = {}, int threads = 0);

// build_model(...).write(path).
void write_model(const ModelSpec& spec, const std::string& path, ProgressFn progress = {},
                 int threads = 0);

}  // namespace pagoda
