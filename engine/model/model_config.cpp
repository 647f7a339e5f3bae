// ModelConfig::from_gguf: hyper-parameters from "<arch>.*" metadata, then a check that every
// tensor the forward pass will touch exists with the expected shape and a supported type, so
// that a bad file fails at load time with a message naming the key or tensor, not mid-forward.
#include "engine/model/model_config.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "engine/gguf/gguf.h"

namespace pagoda {

const char* arch_name(Arch a) {
  switch (a) {
    case Arch::Llama: return "llama";
    case Arch::Qwen2: return "qwen2";
    case Arch::Qwen3: return "qwen3";
    case Arch::Gemma2: return "gemma2";
    case Arch::Gemma3: return "gemma3";
    case Arch::Phi3: return "phi3";
    case Arch::Qwen2Moe: return "qwen2moe";
    case Arch::Qwen3Moe: return "qwen3moe";
  }
  return "unknown";
}

namespace {

using gguf::GgufFile;
using gguf::TensorInfo;

std::string shape_str(const std::vector<int64_t>& dims) {
  std::string s = "{";
  for (size_t k = 0; k < dims.size(); ++k) s += (k ? ", " : "") + std::to_string(dims[k]);
  return s + "}";
}

std::string supported_types() {
  std::string s;
  for (uint32_t id = 0; id < 64; ++id) {
    const GgmlTypeInfo* info = ggml_type_info(id);
    if (info != nullptr && info->supported) s += (s.empty() ? "" : ", ") + std::string(info->name);
  }
  return s;
}

// Reads metadata with the file's name in every message, turning type errors from the GGUF
// layer into ModelConfigError.
class Reader {
 public:
  Reader(const GgufFile& f, std::string prefix) : f_(f), prefix_(std::move(prefix)) {}

  const GgufFile& file() const { return f_; }

  [[noreturn]] void fail(const std::string& problem) const {
    throw ModelConfigError(f_.path() + ": " + problem);
  }

  std::optional<int64_t> opt_int(const std::string& key) const {
    try {
      return f_.get_int(key);
    } catch (const gguf::GgufError& e) {
      fail(std::string("bad metadata: ") + e.what());
    }
  }
  std::optional<double> opt_float(const std::string& key) const {
    try {
      return f_.get_float(key);
    } catch (const gguf::GgufError& e) {
      fail(std::string("bad metadata: ") + e.what());
    }
  }
  std::optional<std::string> opt_string(const std::string& key) const {
    try {
      return f_.get_string(key);
    } catch (const gguf::GgufError& e) {
      fail(std::string("bad metadata: ") + e.what());
    }
  }

  // "<arch>.<key>" as a positive int; `fallback` when absent (0 = the key is required).
  int arch_int(const std::string& key, int64_t fallback = 0) const {
    const std::string full = prefix_ + key;
    std::optional<int64_t> v = opt_int(full);
    if (!v) {
      if (fallback > 0) return int(fallback);
      fail("missing metadata key '" + full + "'");
    }
    if (*v <= 0 || *v > std::numeric_limits<int32_t>::max())
      fail("metadata key '" + full + "' is " + std::to_string(*v) + " (must be a positive int32)");
    return int(*v);
  }

  // "<arch>.<key>" as a finite float in (lo, hi); `fallback` when absent.
  float arch_float(const std::string& key, double fallback, double lo, double hi) const {
    const std::string full = prefix_ + key;
    double v = opt_float(full).value_or(fallback);
    if (!std::isfinite(v) || v <= lo || v >= hi)
      fail("metadata key '" + full + "' is " + std::to_string(v) + " (must be in (" +
           std::to_string(lo) + ", " + std::to_string(hi) + "))");
    return float(v);
  }

  // The tensor `name`, or nullptr when absent and optional; checks shape and type.
  const TensorInfo* tensor(const std::string& name, std::vector<int64_t> shape, bool required = true,
                           bool must_be_f32 = false) const {
    const TensorInfo* t = f_.find_tensor(name);
    if (t == nullptr) {
      if (required) fail("missing tensor '" + name + "'");
      return nullptr;
    }
    if (t->dims != shape)
      fail("tensor '" + name + "' has shape " + shape_str(t->dims) + ", expected " +
           shape_str(shape) + " (ggml order: row length first)");
    const GgmlTypeInfo& info = ggml_type_info(t->type);
    if (!info.supported)
      fail("tensor '" + name + "' has type " + info.name +
           ", which pagoda does not support (supported: " + supported_types() + ")");
    if (must_be_f32 && t->type != GgmlType::F32)
      fail("tensor '" + name + "' has type " + info.name + ", expected f32 (norms and biases)");
    return t;
  }

 private:
  const GgufFile& f_;
  std::string prefix_;
};

Arch parse_arch(const Reader& r) {
  std::optional<std::string> a = r.opt_string("general.architecture");
  if (!a) r.fail("missing metadata key 'general.architecture'");
  for (Arch arch : {Arch::Llama, Arch::Qwen2, Arch::Qwen3, Arch::Gemma2, Arch::Gemma3, Arch::Phi3, Arch::Qwen2Moe,
                    Arch::Qwen3Moe})
    if (*a == arch_name(arch)) return arch;
  r.fail("unsupported architecture '" + *a + "' (supported: llama, qwen2, qwen3, gemma2, gemma3, phi3, qwen2moe, qwen3moe)");
}

// What each architecture's forward does differently from llama's, as flags the model and the
// tensor checks read (an architecture added later sets its flags here, nowhere else).
void set_arch_traits(ModelConfig& c) {
  const bool gemma = c.arch == Arch::Gemma2 || c.arch == Arch::Gemma3;
  c.rope_neox = c.arch != Arch::Llama;
  c.qk_norm = c.arch == Arch::Qwen3 || c.arch == Arch::Qwen3Moe || c.arch == Arch::Gemma3;
  c.post_norms = gemma;
  c.gelu_ffn = gemma;
  c.fused_qkv = c.fused_gate_up = c.arch == Arch::Phi3;
  c.embed_scale = gemma ? std::sqrt(static_cast<float>(c.dim)) : 1.0f;
}

// Returns whether the file asks for "llama3" rope scaling (whose factors live in
// rope_freqs.weight, read by read_rope_freqs).
bool read_hparams(const Reader& r, ModelConfig& c) {
  c.n_layers = r.arch_int("block_count");
  // Every layer has several tensors, so more layers than the file has tensors is a corrupt
  // count: refused before anything is sized by it (a block_count of 2^31 - 1 sized per-layer
  // tables of gigabytes first and ran the host out of memory).
  if (static_cast<size_t>(c.n_layers) > r.file().tensors().size())
    r.fail("metadata key '" + std::string(arch_name(c.arch)) + ".block_count' is " + std::to_string(c.n_layers) +
           ", more layers than the file has tensors (" + std::to_string(r.file().tensors().size()) + ")");
  c.dim = r.arch_int("embedding_length");
  c.ff_dim = r.arch_int("feed_forward_length");
  c.n_heads = r.arch_int("attention.head_count");
  c.n_kv_heads = r.arch_int("attention.head_count_kv", c.n_heads);
  c.ctx_train = r.arch_int("context_length");
  if (c.n_heads % c.n_kv_heads != 0)
    r.fail("attention.head_count " + std::to_string(c.n_heads) +
           " is not a multiple of attention.head_count_kv " + std::to_string(c.n_kv_heads));

  const std::string prefix = std::string(arch_name(c.arch)) + ".";
  if (r.opt_int(prefix + "attention.key_length")) {
    c.head_dim = r.arch_int("attention.key_length");
  } else {
    if (c.dim % c.n_heads != 0)
      r.fail("embedding_length " + std::to_string(c.dim) + " is not a multiple of head_count " +
             std::to_string(c.n_heads));
    c.head_dim = c.dim / c.n_heads;
  }
  if (std::optional<int64_t> v = r.opt_int(prefix + "attention.value_length"); v && *v != c.head_dim)
    r.fail("attention.value_length " + std::to_string(*v) + " differs from the key length " +
           std::to_string(c.head_dim) + " (not supported)");
  if (c.head_dim % 2 != 0) r.fail("head dimension " + std::to_string(c.head_dim) + " is odd");
  c.n_rot = r.arch_int("rope.dimension_count", c.head_dim);
  if (c.n_rot > c.head_dim || c.n_rot % 2 != 0)
    r.fail("rope.dimension_count " + std::to_string(c.n_rot) + " must be even and <= head dimension " +
           std::to_string(c.head_dim));

  c.rms_eps = r.arch_float("attention.layer_norm_rms_epsilon", 1e-5, 0.0, 1.0);
  c.rope_freq_base = r.arch_float("rope.freq_base", 10000.0, 0.0, 1e12);
  // Linear position scaling: the legacy rope.scale_linear, or rope.scaling.{type,factor}.
  // "llama3" scaling is per-pair frequency factors (rope_freqs.weight); its rope.scaling.factor,
  // if written, is already folded into them and must not scale positions as well.
  float scale = r.arch_float("rope.scale_linear", 1.0, 0.0, 1e6);
  bool llama3 = false;
  if (std::optional<std::string> type = r.opt_string(prefix + "rope.scaling.type")) {
    if (*type == "linear") {
      scale = r.arch_float("rope.scaling.factor", 1.0, 0.0, 1e6);
    } else if (*type == "llama3") {
      llama3 = true;
    } else if (*type != "none") {
      r.fail("rope scaling type '" + *type + "' is not supported (supported: none, linear, llama3)");
    }
  }
  c.rope_freq_scale = 1.0f / scale;
  return llama3;
}

// Attention scale, soft-capping, sliding windows and the local layers' RoPE base: keys the
// Gemma and Phi-3 families define (the others get 1/sqrt(head_dim) and none of the rest).
void read_attention_extras(const Reader& r, ModelConfig& c) {
  c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  const std::string prefix = std::string(arch_name(c.arch)) + ".";
  int local_every = 0;  // layer l is local when l % local_every != local_every - 1; 0: all layers
  switch (c.arch) {
    case Arch::Gemma2:
    case Arch::Gemma3:
      // The 27B models scale queries by 1/sqrt(dim/heads) (their query_pre_attn_scalar, which
      // GGUF does not carry; llama.cpp recognises them by their layer count, as here).
      if (c.n_layers == (c.arch == Arch::Gemma2 ? 46 : 62))
        c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.dim / c.n_heads));
      if (c.arch == Arch::Gemma2) {
        c.sliding_window = r.arch_int("attention.sliding_window", 4096);
        c.attn_softcap = r.arch_float("attn_logit_softcapping", 50.0, 0.0, 1e9);
        c.final_softcap = r.arch_float("final_logit_softcapping", 30.0, 0.0, 1e9);
        local_every = 2;
      } else {
        c.sliding_window = r.arch_int("attention.sliding_window");
        c.rope_freq_base_local = r.arch_float("rope.freq_base_swa", 10000.0, 0.0, 1e12);
        local_every = 6;
      }
      break;
    case Arch::Phi3: {
      // 0 (Phi-4): no window. Absent: the window llama.cpp assumes for the early Phi-3 files.
      std::optional<int64_t> w = r.opt_int(prefix + "attention.sliding_window");
      if (!w) {
        if ((c.n_layers == 32 || c.n_layers == 40) && c.ctx_train == 4096) w = 2047;
        else if (c.n_layers == 32 && c.n_kv_heads == 32 && c.ctx_train == 131072) w = 262144;
        else if (c.n_layers == 40 && c.ctx_train == 131072) w = 131072;
        else r.fail("missing metadata key '" + prefix + "attention.sliding_window'");
      }
      if (*w < 0 || *w > std::numeric_limits<int32_t>::max())
        r.fail("metadata key '" + prefix + "attention.sliding_window' is " + std::to_string(*w));
      c.sliding_window = static_cast<int>(*w);
      c.rope_orig_ctx = r.arch_int("rope.scaling.original_context_length", c.ctx_train);
      c.rope_attn_factor = r.arch_float("rope.scaling.attn_factor", 1.0, 0.0, 1e3);
      break;
    }
    default:
      break;
  }
  c.layer_window.assign(static_cast<size_t>(c.n_layers), 0);
  if (c.sliding_window > 0)
    for (int l = 0; l < c.n_layers; ++l)
      if (local_every == 0 || l % local_every != local_every - 1) c.layer_window[static_cast<size_t>(l)] = c.sliding_window;
}

// A tensor of per-pair RoPE divisors (n_rot/2 finite positive F32 values), read into `out`.
void read_pair_factors(const Reader& r, const ModelConfig& c, const char* name, std::vector<float>& out) {
  const TensorInfo* t = r.file().find_tensor(name);
  if (t == nullptr) r.fail(std::string("missing tensor '") + name + "'");
  const int64_t n = c.n_rot / 2;
  if (t->dims != std::vector<int64_t>{n})
    r.fail(std::string("tensor '") + name + "' has shape " + shape_str(t->dims) + ", expected {" +
           std::to_string(n) + "} (one factor per rotated dimension pair: rope.dimension_count / 2)");
  if (t->type != GgmlType::F32)
    r.fail(std::string("tensor '") + name + "' has type " + ggml_type_info(t->type).name + ", expected f32");
  out.resize(static_cast<size_t>(n));
  std::memcpy(out.data(), r.file().tensor_data(*t), sizeof(float) * static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const float f = out[static_cast<size_t>(i)];
    if (!std::isfinite(f) || f <= 0.0f)
      r.fail(std::string("tensor '") + name + "' element " + std::to_string(i) + " is " +
             std::to_string(f) + " (frequency factors must be finite and positive)");
  }
}

// ---- mixture of experts: the keys, then each layer's router and expert tensors ----

void read_experts(const Reader& r, ModelConfig& c) {
  const std::string prefix = std::string(arch_name(c.arch)) + ".";
  const std::optional<int64_t> count = r.opt_int(prefix + "expert_count");
  const std::optional<int64_t> used = r.opt_int(prefix + "expert_used_count");
  if ((c.arch == Arch::Qwen2Moe || c.arch == Arch::Qwen3Moe) && (!count || *count == 0))
    r.fail("missing metadata key '" + prefix + "expert_count' (" + arch_name(c.arch) + " needs experts)");
  if (!count || *count == 0) {  // a dense model (llama writes expert_count = 0 in some files)
    if (used && *used != 0)
      r.fail("metadata key '" + prefix + "expert_used_count' is " + std::to_string(*used) +
             " but the model has no experts (expert_count missing or 0)");
    return;
  }
  constexpr int kMaxExperts = 1024;
  c.n_experts = r.arch_int("expert_count");
  if (c.n_experts > kMaxExperts)
    r.fail("metadata key '" + prefix + "expert_count' is " + std::to_string(c.n_experts) +
           " (at most " + std::to_string(kMaxExperts) + " supported)");
  c.n_experts_used = r.arch_int("expert_used_count");
  if (c.n_experts_used > c.n_experts)
    r.fail("metadata key '" + prefix + "expert_used_count' is " + std::to_string(c.n_experts_used) +
           ", more than expert_count " + std::to_string(c.n_experts));
  if (c.arch == Arch::Qwen2Moe) {
    // llama.cpp's defaults when the lengths are absent: ff / used, and ff for the shared one.
    c.expert_ff_dim = r.arch_int("expert_feed_forward_length", c.ff_dim / c.n_experts_used);
    c.shared_expert_ff_dim = r.arch_int("expert_shared_feed_forward_length", c.ff_dim);
    c.expert_weights_norm = false;
  } else if (c.arch == Arch::Qwen3Moe) {
    // No shared expert; the top-k weights are renormalized (norm_topk_prob in Qwen3-MoE).
    c.expert_ff_dim = r.arch_int("expert_feed_forward_length", c.ff_dim / c.n_experts_used);
    c.expert_weights_norm = true;
  } else {
    c.expert_ff_dim = r.arch_int("expert_feed_forward_length", c.ff_dim);
    c.expert_weights_norm = true;  // Mixtral: the top-k weights are renormalized
  }
  if (std::optional<int64_t> v = r.opt_int(prefix + "expert_weights_norm"))
    c.expert_weights_norm = *v != 0;
}

void check_expert_tensors(const Reader& r, const ModelConfig& c, const std::string& b) {
  const int64_t dim = c.dim, ff = c.expert_ff_dim, ne = c.n_experts;
  if (r.file().find_tensor(b + "ffn_gate_exps.weight") == nullptr &&
      r.file().find_tensor(b + "ffn_gate.0.weight") != nullptr)
    r.fail("tensor '" + b + "ffn_gate.0.weight': experts stored one tensor per expert (an old "
           "conversion) are not supported; re-convert the model (ffn_gate_exps.weight)");
  r.tensor(b + "ffn_gate_inp.weight", {dim, ne});
  r.tensor(b + "ffn_gate_exps.weight", {dim, ff, ne});
  r.tensor(b + "ffn_up_exps.weight", {dim, ff, ne});
  r.tensor(b + "ffn_down_exps.weight", {ff, dim, ne});
  if (c.shared_expert_ff_dim > 0) {
    const int64_t sff = c.shared_expert_ff_dim;
    r.tensor(b + "ffn_gate_inp_shexp.weight", {dim});
    r.tensor(b + "ffn_gate_shexp.weight", {dim, sff});
    r.tensor(b + "ffn_up_shexp.weight", {dim, sff});
    r.tensor(b + "ffn_down_shexp.weight", {sff, dim});
  }
}

// rope_freqs.weight: optional, but required by "llama3" scaling. Read here, once, so that a bad
// value fails at load time naming the element rather than rotating by inf or NaN.
void read_rope_freqs(const Reader& r, ModelConfig& c, bool llama3_scaling) {
  // phi3 LongRoPE: both sets or neither (then plain RoPE).
  if (c.arch == Arch::Phi3 && r.file().find_tensor("rope_factors_long.weight") != nullptr) {
    read_pair_factors(r, c, "rope_factors_long.weight", c.rope_factors_long);
    read_pair_factors(r, c, "rope_factors_short.weight", c.rope_factors_short);
  }
  if (r.file().find_tensor("rope_freqs.weight") != nullptr)
    read_pair_factors(r, c, "rope_freqs.weight", c.rope_freq_factors);
  else if (llama3_scaling)
    r.fail("rope scaling type 'llama3' needs the tensor 'rope_freqs.weight', which is missing");
}

void check_tensors(const Reader& r, ModelConfig& c) {
  const int64_t dim = c.dim, ff = c.ff_dim;
  const int64_t q_dim = int64_t(c.n_heads) * c.head_dim;
  const int64_t kv_dim = int64_t(c.n_kv_heads) * c.head_dim;

  // The vocabulary size is the row count of the embedding table.
  const TensorInfo* embd = r.file().find_tensor("token_embd.weight");
  if (embd == nullptr) r.fail("missing tensor 'token_embd.weight'");
  if (embd->dims.size() != 2 || embd->dims[0] != dim || embd->dims[1] > std::numeric_limits<int32_t>::max())
    r.fail("tensor 'token_embd.weight' has shape " + shape_str(embd->dims) + ", expected {" +
           std::to_string(dim) + ", vocab_size}");
  c.vocab_size = int(embd->dims[1]);
  r.tensor("token_embd.weight", {dim, c.vocab_size});  // type check
  const std::string prefix = std::string(arch_name(c.arch)) + ".";
  if (std::optional<int64_t> v = r.opt_int(prefix + "vocab_size"); v && *v != c.vocab_size)
    r.fail("metadata key '" + prefix + "vocab_size' is " + std::to_string(*v) +
           " but token_embd.weight has " + std::to_string(c.vocab_size) + " rows");

  r.tensor("output_norm.weight", {dim}, true, true);
  c.tied_embeddings = r.tensor("output.weight", {dim, c.vocab_size}, false) == nullptr;

  // QKV biases: always present in qwen2; allowed (all layers or none) in llama.
  c.qkv_bias = c.arch == Arch::Qwen2 || c.arch == Arch::Qwen2Moe ||
               (c.arch == Arch::Llama && r.file().find_tensor("blk.0.attn_q.bias") != nullptr);
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    r.tensor(b + "attn_norm.weight", {dim}, true, true);
    if (c.fused_qkv) {
      r.tensor(b + "attn_qkv.weight", {dim, q_dim + 2 * kv_dim});
    } else {
      r.tensor(b + "attn_q.weight", {dim, q_dim});
      r.tensor(b + "attn_k.weight", {dim, kv_dim});
      r.tensor(b + "attn_v.weight", {dim, kv_dim});
    }
    r.tensor(b + "attn_output.weight", {q_dim, dim});
    if (c.qkv_bias) {
      r.tensor(b + "attn_q.bias", {q_dim}, true, true);
      r.tensor(b + "attn_k.bias", {kv_dim}, true, true);
      r.tensor(b + "attn_v.bias", {kv_dim}, true, true);
    }
    if (c.qk_norm) {
      r.tensor(b + "attn_q_norm.weight", {c.head_dim}, true, true);
      r.tensor(b + "attn_k_norm.weight", {c.head_dim}, true, true);
    }
    if (c.post_norms) {
      r.tensor(b + "post_attention_norm.weight", {dim}, true, true);
      r.tensor(b + "post_ffw_norm.weight", {dim}, true, true);
    }
    r.tensor(b + "ffn_norm.weight", {dim}, true, true);
    if (c.n_experts > 0) {
      check_expert_tensors(r, c, b);
      continue;
    }
    if (r.file().find_tensor(b + "ffn_gate_exps.weight") != nullptr)
      r.fail("tensor '" + b + "ffn_gate_exps.weight' holds experts, but the metadata key '" +
             std::string(arch_name(c.arch)) + ".expert_count' is missing");
    if (c.fused_gate_up) {
      r.tensor(b + "ffn_up.weight", {dim, 2 * ff});
    } else {
      r.tensor(b + "ffn_gate.weight", {dim, ff});
      r.tensor(b + "ffn_up.weight", {dim, ff});
    }
    r.tensor(b + "ffn_down.weight", {ff, dim});
  }
}

}  // namespace

ModelConfig ModelConfig::from_gguf(const gguf::GgufFile& file) {
  ModelConfig c;
  c.arch = parse_arch(Reader(file, ""));
  Reader r(file, std::string(arch_name(c.arch)) + ".");
  c.name = r.opt_string("general.name").value_or(std::filesystem::path(file.path()).filename().string());
  const bool llama3_scaling = read_hparams(r, c);
  set_arch_traits(c);
  read_attention_extras(r, c);
  const int64_t pooling = r.opt_int(std::string(arch_name(c.arch)) + ".pooling_type").value_or(0);
  c.pooling_type = pooling >= 1 && pooling <= 3 ? static_cast<int>(pooling) : 0;
  read_experts(r, c);
  check_tensors(r, c);
  read_rope_freqs(r, c, llama3_scaling);
  return c;
}

}  // namespace pagoda
