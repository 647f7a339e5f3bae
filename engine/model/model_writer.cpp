// make-model: presets, spec validation, metadata and seeded random weights generated row by row
// (in parallel, each row from its own seed so the bytes never depend on the thread count).
#include "engine/model/model_writer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <memory>
#include <thread>

#include "kernels/cpu/quants.h"

namespace pagoda {

namespace {

using gguf::GgufWriter;
using gguf::Value;

// ---- deterministic random numbers -------------------------------------------------------------

uint64_t mix64(uint64_t z) {  // splitmix64 finaliser
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// splitmix64 stream; each draw yields one approximately normal value: the sum of four 16-bit
// uniforms (Irwin-Hall), standardised. Bounded (|x| < 3.5), cheap, and plenty for test weights.
class RowRng {
 public:
  explicit RowRng(uint64_t seed) : state_(seed) {}
  float normal() {
    state_ += 0x9e3779b97f4a7c15ull;
    uint64_t r = mix64(state_);
    uint32_t sum = uint32_t(r & 0xffff) + uint32_t((r >> 16) & 0xffff) +
                   uint32_t((r >> 32) & 0xffff) + uint32_t(r >> 48);
    constexpr float kScale = 1.7320508f / 65536.0f;  // sqrt(12 / 4) per unit of sum
    return (float(sum) - 2.0f * 65535.0f) * kScale;
  }

 private:
  uint64_t state_;
};

// What a tensor's values look like: mean + std * normal().
struct Init {
  float mean;
  float std;
};

// A Filler that generates `rows` rows of `cols` values with `init`, converts each to `type` and
// reports progress. Row r of tensor `index` is seeded from (seed, index, r) alone.
GgufWriter::Filler make_filler(uint64_t seed, uint64_t index, int64_t cols, int64_t rows,
                               GgmlType type, Init init, int threads,
                               std::shared_ptr<uint64_t> done, uint64_t total,
                               ProgressFn progress) {
  return [=](uint8_t* dst, size_t nbytes) {
    const size_t row_bytes = ggml_row_size(type, cols);
    auto work = [&](int64_t r0, int64_t r1) {
      std::vector<float> buf(static_cast<size_t>(cols));
      for (int64_t r = r0; r < r1; ++r) {
        RowRng rng(mix64(seed ^ mix64(index * 0x100000001b3ull + uint64_t(r) + 1)));
        for (float& x : buf) x = init.mean + init.std * rng.normal();
        cpu::quantize_row(type, buf.data(), dst + size_t(r) * row_bytes, cols);
      }
    };
    // Small tensors are not worth a thread.
    int n = int(std::min<int64_t>(threads, std::max<int64_t>(1, int64_t(nbytes >> 20))));
    n = int(std::min<int64_t>(n, rows));
    std::vector<std::thread> pool;
    for (int t = 1; t < n; ++t) pool.emplace_back(work, rows * t / n, rows * (t + 1) / n);
    work(0, rows / n);
    for (auto& th : pool) th.join();
    *done += nbytes;
    if (progress) progress(*done, total);
  };
}

// ---- own vocabulary ---------------------------------------------------------------------------

void append_utf8(std::string& s, uint32_t cp) {
  if (cp < 0x80) {
    s += char(cp);
  } else if (cp < 0x800) {
    s += char(0xc0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3f));
  } else {
    s += char(0xe0 | (cp >> 12));
    s += char(0x80 | ((cp >> 6) & 0x3f));
    s += char(0x80 | (cp & 0x3f));
  }
}

// GPT-2's byte-to-unicode table: printable bytes stand for themselves, the others are moved to
// U+0100 and up in byte order, so every byte is one visible character of a token string.
std::vector<std::string> gpt2_byte_tokens() {
  std::vector<std::string> out(256);
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    bool printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae);
    append_utf8(out[b], printable ? b : next++);
  }
  return out;
}

const char* const kSpecialTokens[] = {"<|bos|>", "<|eos|>", "<|im_start|>", "<|im_end|>"};
constexpr int kBos = 256, kEos = 257, kImEnd = 259;
constexpr int kTokenNormal = 1, kTokenControl = 3;

// Padding token k (k >= 0) of a vocabulary larger than the built-in one: a space-prefixed
// pseudo-word ("Ġ" is the byte-level form of a space) made of k's digits in bijective base 100,
// one consonant-vowel syllable per digit. Every k gives a distinct word, and the tokens decode to
// readable text, so a random model with a large vocabulary still prints words (placeholder
// "<unused_N>" tokens would decode to nothing, and they would be most of what it samples).
std::string padding_word(int k) {
  static const char kConsonants[] = "bcdfghjklmnprstvwxyz";  // 20
  static const char kVowels[] = "aeiou";                     // 5
  std::string word;
  for (int64_t n = int64_t(k) + 1; n > 0; n = (n - 1) / 100) {
    int digit = int((n - 1) % 100);
    word.insert(word.begin(), {kConsonants[digit / 5], kVowels[digit % 5]});
  }
  return "\xc4\xa0" + word;
}

const char* const kChatTemplate =
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

constexpr Arch kArchs[] = {Arch::Llama, Arch::Qwen2, Arch::Qwen3, Arch::Gemma2, Arch::Gemma3, Arch::Phi3, Arch::Qwen2Moe,
                           Arch::Qwen3Moe};

bool is_gemma(Arch a) { return a == Arch::Gemma2 || a == Arch::Gemma3; }
// qwen3 attention: per-head Q/K RMSNorm, no QKV bias.
bool is_qwen3(Arch a) { return a == Arch::Qwen3 || a == Arch::Qwen3Moe; }
// The attention head width: --head-dim where given (Qwen3-30B-A3B: 32 heads of 128 over dim
// 2048), else dim / heads.
int spec_head_dim(const ModelSpec& s) { return s.head_dim > 0 ? s.head_dim : s.dim / s.n_heads; }

// ---- spec -------------------------------------------------------------------------------------

struct Preset {
  const char* name;
  ModelSpec spec;
};

std::vector<Preset> presets() {
  ModelSpec demo;  // the ModelSpec defaults are the demo shape
  demo.name = "pagoda-demo";
  demo.type = GgmlType::Q8_0;

  ModelSpec tiny;
  tiny.name = "tinyllama-1.1b-random";
  tiny.n_layers = 22, tiny.dim = 2048, tiny.ff_dim = 5632, tiny.n_heads = 32, tiny.n_kv_heads = 4;
  tiny.ctx = 2048, tiny.vocab_size = 32000, tiny.type = GgmlType::Q8_0;

  ModelSpec l3;
  l3.name = "llama3-8b-random";
  l3.n_layers = 32, l3.dim = 4096, l3.ff_dim = 14336, l3.n_heads = 32, l3.n_kv_heads = 8;
  l3.ctx = 8192, l3.vocab_size = 128256, l3.rope_freq_base = 500000.0f, l3.type = GgmlType::Q8_0;

  ModelSpec l31 = l3;  // Llama 3.1 8B: same shape, 128k context through "llama3" rope scaling
  l31.name = "llama3.1-8b-random";
  l31.ctx = 131072, l31.rope_freqs = RopeFreqs::Llama3;

  ModelSpec l70 = l31;  // Llama 3.1 70B: about 42 GB in the q4_k_m mix
  l70.name = "llama3-70b-random";
  l70.n_layers = 80, l70.dim = 8192, l70.ff_dim = 28672, l70.n_heads = 64, l70.n_kv_heads = 8;
  l70.type = GgmlType::Q4_K, l70.mix = WeightMix::Q4_K_M;

  ModelSpec q3;  // Qwen3-8B: 36 layers, 32 heads of 128 over dim 4096, 8 KV heads
  q3.name = "qwen3-8b-random";
  q3.arch = Arch::Qwen3;
  q3.n_layers = 36, q3.dim = 4096, q3.ff_dim = 12288, q3.n_heads = 32, q3.n_kv_heads = 8;
  q3.ctx = 40960, q3.vocab_size = 151936, q3.rope_freq_base = 1000000.0f, q3.type = GgmlType::Q8_0;
  return {{"demo", demo}, {"tinyllama-1.1b", tiny}, {"llama3-8b", l3}, {"llama3.1-8b", l31},
          {"llama3-70b", l70}, {"qwen3-8b", q3}};
}

bool is_qwen(Arch a) { return a == Arch::Qwen2 || a == Arch::Qwen2Moe; }

// The spec with the expert defaults filled in (see ModelSpec), checked.
ModelSpec with_expert_defaults(ModelSpec s) {
  if (s.arch == Arch::Qwen2Moe) {
    if (s.n_experts == 0) s.n_experts = kQwen2MoeExperts;
    if (s.shared_expert_ff_dim == 0) s.shared_expert_ff_dim = s.ff_dim;
  } else if (s.arch == Arch::Qwen3Moe && s.n_experts == 0) {
    s.n_experts = kQwen2MoeExperts;
  }
  if (s.arch != Arch::Qwen2Moe && s.shared_expert_ff_dim != 0) {
    throw ModelSpecError("a shared expert (shared-expert-ff) needs --arch qwen2moe");
  }
  if (s.n_experts < 0 || s.n_experts_used < 0 || s.expert_ff_dim < 0 || s.shared_expert_ff_dim < 0)
    throw ModelSpecError("expert counts and sizes must not be negative");
  if (s.n_experts == 0) {
    if (s.n_experts_used != 0 || s.expert_ff_dim != 0)
      throw ModelSpecError("experts-used and expert-ff need experts (--experts N)");
    return s;
  }
  if (s.arch == Arch::Qwen2) throw ModelSpecError("qwen2 has no experts: use --arch qwen2moe");
  if (s.arch == Arch::Qwen3) throw ModelSpecError("qwen3 has no experts: use --arch qwen3moe");
  if (s.n_experts_used == 0) s.n_experts_used = std::min(kDefaultExpertsUsed, s.n_experts);
  if (s.expert_ff_dim == 0) s.expert_ff_dim = s.ff_dim;
  // A Mixtral-style llama states its experts' width as feed_forward_length (llama.cpp reads
  // nothing else for llama), so that is what it gets.
  if (s.arch == Arch::Llama) s.ff_dim = s.expert_ff_dim;
  if (s.n_experts_used > s.n_experts)
    throw ModelSpecError("experts-used " + std::to_string(s.n_experts_used) + " exceeds experts " +
                         std::to_string(s.n_experts));
  return s;
}

void validate(const ModelSpec& s) {
  auto positive = [](const char* what, int v) {
    if (v <= 0) throw ModelSpecError(std::string(what) + " must be positive (got " + std::to_string(v) + ")");
  };
  positive("layers", s.n_layers);
  positive("dim", s.dim);
  positive("ff", s.ff_dim);
  positive("heads", s.n_heads);
  positive("kv-heads", s.n_kv_heads);
  positive("ctx", s.ctx);
  if (s.vocab_size < 0) throw ModelSpecError("vocab-size must not be negative");
  if (s.head_dim < 0) throw ModelSpecError("head-dim must not be negative");
  if (s.head_dim == 0 && s.dim % s.n_heads != 0)
    throw ModelSpecError("dim " + std::to_string(s.dim) + " is not a multiple of heads " + std::to_string(s.n_heads) +
                         " (or give --head-dim)");
  if (s.n_heads % s.n_kv_heads != 0)
    throw ModelSpecError("heads " + std::to_string(s.n_heads) + " is not a multiple of kv-heads " +
                         std::to_string(s.n_kv_heads));
  if (spec_head_dim(s) % 2 != 0)
    throw ModelSpecError("head dimension " + std::to_string(spec_head_dim(s)) + " must be even");
  if (s.rope_freqs == RopeFreqs::LongRope && s.arch != Arch::Phi3)
    throw ModelSpecError("--rope-freqs longrope is phi3's (got arch " + std::string(arch_name(s.arch)) + ")");
  if (s.sliding_window == 0 && is_gemma(s.arch))
    throw ModelSpecError("sliding-window must be positive for " + std::string(arch_name(s.arch)));
  if (s.sliding_window > 0 && !is_gemma(s.arch) && s.arch != Arch::Phi3)
    throw ModelSpecError("sliding-window applies to gemma2, gemma3 and phi3 only");
  const GgmlTypeInfo& info = ggml_type_info(s.type);
  if (!info.supported) throw ModelSpecError(std::string("weight type ") + info.name + " is not supported");
  for (auto [what, v] : {std::pair{"dim", s.dim}, std::pair{"ff", s.ff_dim},
                         std::pair{"expert-ff", s.expert_ff_dim},
                         std::pair{"shared-expert-ff", s.shared_expert_ff_dim}})
    if (v % info.block_size != 0)
      throw ModelSpecError(std::string(what) + " " + std::to_string(v) + " must be a multiple of " +
                           std::to_string(info.block_size) + " for type " + info.name);
}

float rope_base(const ModelSpec& s) {
  if (s.rope_freq_base > 0) return s.rope_freq_base;
  return is_qwen(s.arch) || is_qwen3(s.arch) || s.arch == Arch::Gemma3 ? 1e6f : 1e4f;
}

int sliding_window(const ModelSpec& s) {
  if (s.sliding_window >= 0) return s.sliding_window;
  return s.arch == Arch::Gemma2 ? 4096 : s.arch == Arch::Gemma3 ? 512 : s.arch == Arch::Phi3 ? s.ctx - 1 : 0;
}

void add_hparams(GgufWriter& w, const ModelSpec& s, int vocab_size) {
  const std::string a = arch_name(s.arch);
  const bool small_eps = s.arch != Arch::Llama && s.arch != Arch::Phi3;
  w.set("general.architecture", Value::from_string(a));
  w.set("general.name", Value::from_string(s.name));
  w.set("general.alignment", Value::from_u32(32));
  w.set("general.file_type", Value::from_u32(gguf_file_type(s.type)));  // Q4_K: Q4_K_M
  w.set("general.quantization_version", Value::from_u32(2));
  w.set(a + ".vocab_size", Value::from_u32(uint32_t(vocab_size)));
  w.set(a + ".context_length", Value::from_u32(uint32_t(s.ctx)));
  if (s.pooling_type > 0) w.set(a + ".pooling_type", Value::from_u32(uint32_t(s.pooling_type)));
  w.set(a + ".embedding_length", Value::from_u32(uint32_t(s.dim)));
  w.set(a + ".block_count", Value::from_u32(uint32_t(s.n_layers)));
  w.set(a + ".feed_forward_length", Value::from_u32(uint32_t(s.ff_dim)));
  w.set(a + ".attention.head_count", Value::from_u32(uint32_t(s.n_heads)));
  w.set(a + ".attention.head_count_kv", Value::from_u32(uint32_t(s.n_kv_heads)));
  const int head_dim = spec_head_dim(s);
  w.set(a + ".rope.dimension_count", Value::from_u32(uint32_t(head_dim)));
  float base = rope_base(s);
  float eps = s.rms_eps > 0 ? s.rms_eps : (small_eps ? 1e-6f : 1e-5f);
  w.set(a + ".rope.freq_base", Value::from_f32(base));
  w.set(a + ".attention.layer_norm_rms_epsilon", Value::from_f32(eps));
  if (is_gemma(s.arch) || head_dim != s.dim / s.n_heads) {  // as llama.cpp's converter writes them
    w.set(a + ".attention.key_length", Value::from_u32(uint32_t(head_dim)));
    w.set(a + ".attention.value_length", Value::from_u32(uint32_t(head_dim)));
  }
  if (s.arch == Arch::Gemma2) {
    w.set(a + ".attn_logit_softcapping", Value::from_f32(50.0f));
    w.set(a + ".final_logit_softcapping", Value::from_f32(30.0f));
  }
  if (is_gemma(s.arch) || s.arch == Arch::Phi3)
    w.set(a + ".attention.sliding_window", Value::from_u32(uint32_t(sliding_window(s))));
  if (s.rope_freqs == RopeFreqs::LongRope) {
    const int orig = std::max(1, s.ctx / 4);
    const double scale = double(s.ctx) / orig;
    w.set(a + ".rope.scaling.original_context_length", Value::from_u32(uint32_t(orig)));
    w.set(a + ".rope.scaling.attn_factor",
          Value::from_f32(float(scale > 1 ? std::sqrt(1 + std::log(scale) / std::log(double(orig))) : 1.0)));
  }
  if (s.n_experts > 0) {
    w.set(a + ".expert_count", Value::from_u32(uint32_t(s.n_experts)));
    w.set(a + ".expert_used_count", Value::from_u32(uint32_t(s.n_experts_used)));
  }
  if (s.arch == Arch::Qwen2Moe || s.arch == Arch::Qwen3Moe)
    w.set(a + ".expert_feed_forward_length", Value::from_u32(uint32_t(s.expert_ff_dim)));
  if (s.arch == Arch::Qwen2Moe)
    w.set(a + ".expert_shared_feed_forward_length", Value::from_u32(uint32_t(s.shared_expert_ff_dim)));
}

}  // namespace

ModelSpec model_preset(const std::string& name) {
  for (const auto& p : presets())
    if (name == p.name) return p.spec;
  std::string known;
  for (const auto& n : model_preset_names()) known += (known.empty() ? "" : ", ") + n;
  throw ModelSpecError("unknown preset '" + name + "' (known: " + known + ")");
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> out;
  for (const auto& p : presets()) out.push_back(p.name);
  return out;
}

RopeFreqs parse_rope_freqs(const std::string& name) {
  if (name == "none") return RopeFreqs::None;
  if (name == "llama3") return RopeFreqs::Llama3;
  if (name == "longrope") return RopeFreqs::LongRope;
  throw ModelSpecError("unknown rope frequency factors '" + name + "' (none, llama3, longrope)");
}

Arch parse_arch_name(const std::string& name) {
  std::string known;
  for (Arch a : kArchs) {
    if (name == arch_name(a)) return a;
    known += (known.empty() ? "" : ", ") + std::string(arch_name(a));
  }
  throw ModelSpecError("unsupported architecture '" + name + "' (" + known + ")");
}

std::vector<float> longrope_factors(int n_rot, bool long_factors) {
  std::vector<float> out;
  const int n = n_rot / 2;
  for (int i = 0; i < n; ++i) {
    const double t = n > 1 ? double(i) / (n - 1) : 0.0;
    out.push_back(float(long_factors ? std::pow(16.0, t) : 1.0 + 0.5 * t));
  }
  return out;
}

std::vector<float> llama3_rope_freq_factors(int n_rot, float freq_base, double factor,
                                            double low_freq_factor, double high_freq_factor,
                                            int original_ctx) {
  if (n_rot <= 0 || n_rot % 2 != 0 || !(freq_base > 0) || !(factor >= 1) || !(low_freq_factor > 0) ||
      !(high_freq_factor > low_freq_factor) || original_ctx <= 0)
    throw ModelSpecError("llama3 rope factors: need an even n_rot, positive base, factor >= 1 and "
                         "0 < low_freq_factor < high_freq_factor");
  const double pi = 3.14159265358979323846;
  const double low_freq_wavelen = original_ctx / low_freq_factor;    // longer: fully scaled
  const double high_freq_wavelen = original_ctx / high_freq_factor;  // shorter: untouched
  std::vector<float> out;
  for (int i = 0; i < n_rot / 2; ++i) {
    const double wavelen = 2 * pi * std::pow(double(freq_base), 2.0 * i / n_rot);
    double f = 1.0;
    if (wavelen > low_freq_wavelen) {
      f = factor;
    } else if (wavelen >= high_freq_wavelen) {
      const double s = (original_ctx / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
      f = 1.0 / ((1.0 - s) / factor + s);
    }
    out.push_back(float(f));
  }
  return out;
}

uint32_t gguf_file_type(GgmlType t) {  // llama.cpp's LLAMA_FTYPE numbering
  switch (t) {
    case GgmlType::F32: return 0;
    case GgmlType::F16: return 1;
    case GgmlType::Q4_0: return 2;
    case GgmlType::Q4_1: return 3;
    case GgmlType::Q8_0: return 7;
    case GgmlType::Q5_0: return 8;
    case GgmlType::Q5_1: return 9;
    case GgmlType::Q2_K: return 10;
    case GgmlType::Q3_K: return 12;  // Q3_K_M
    case GgmlType::Q4_K: return 15;  // Q4_K_M
    case GgmlType::Q5_K: return 17;  // Q5_K_M
    case GgmlType::Q6_K: return 18;
    case GgmlType::IQ4_NL: return 25;
    case GgmlType::IQ4_XS: return 30;
    case GgmlType::BF16: return 32;
    default: return 0;
  }
}

std::string weight_type_names() {
  std::string s;
  for (uint32_t id = 0; id < 64; ++id)
    if (const GgmlTypeInfo* info = ggml_type_info(id); info && info->supported)
      s += (s.empty() ? "" : ", ") + std::string(info->name);
  return s;
}

GgmlType parse_weight_type(const std::string& name) {
  for (uint32_t id = 0; id < 64; ++id)
    if (const GgmlTypeInfo* info = ggml_type_info(id); info && info->supported && name == info->name) return info->type;
  throw ModelSpecError("unknown weight type '" + name + "' (" + weight_type_names() + ")");
}

WeightChoice parse_weight_choice(const std::string& name) {
  if (name == weight_mix_name(WeightMix::Q4_K_M)) return {GgmlType::Q4_K, WeightMix::Q4_K_M};
  try {
    return {parse_weight_type(name), WeightMix::None};
  } catch (const ModelSpecError&) {
    throw ModelSpecError("unknown weight type '" + name + "' (" + weight_choice_names() + ")");
  }
}

std::string weight_choice_names() { return weight_type_names() + ", " + weight_mix_name(WeightMix::Q4_K_M); }

int builtin_vocab_size() { return 256 + int(std::size(kSpecialTokens)); }

void add_builtin_vocab(GgufWriter& w, int vocab_size) {
  if (vocab_size < builtin_vocab_size())
    throw ModelSpecError("vocab size " + std::to_string(vocab_size) + " is smaller than the " +
                         std::to_string(builtin_vocab_size()) + " tokens of the built-in vocabulary");
  std::vector<std::string> tokens = gpt2_byte_tokens();
  std::vector<int64_t> types(256, kTokenNormal);
  for (const char* s : kSpecialTokens) {
    tokens.emplace_back(s);
    types.push_back(kTokenControl);
  }
  for (int id = builtin_vocab_size(); id < vocab_size; ++id) {
    tokens.push_back(padding_word(id - builtin_vocab_size()));
    types.push_back(kTokenNormal);
  }
  w.set("tokenizer.ggml.model", Value::from_string("gpt2"));
  w.set("tokenizer.ggml.pre", Value::from_string("default"));
  w.set("tokenizer.ggml.tokens", Value::string_array(std::move(tokens)));
  w.set("tokenizer.ggml.token_type", Value::i32_array(std::move(types)));
  w.set("tokenizer.ggml.merges", Value::string_array({}));
  w.set("tokenizer.ggml.bos_token_id", Value::from_u32(kBos));
  w.set("tokenizer.ggml.eos_token_id", Value::from_u32(kEos));
  w.set("tokenizer.ggml.eot_token_id", Value::from_u32(kImEnd));
  w.set("tokenizer.ggml.add_bos_token", Value::from_bool(true));
  w.set("tokenizer.ggml.add_eos_token", Value::from_bool(false));
  w.set("tokenizer.chat_template", Value::from_string(kChatTemplate));
}

int copy_vocab(const gguf::GgufFile& src, GgufWriter& w) {
  const std::vector<std::string>* tokens = nullptr;
  try {
    tokens = src.get_string_array("tokenizer.ggml.tokens");
  } catch (const gguf::GgufError& e) {
    throw ModelSpecError(e.what());
  }
  if (tokens == nullptr || tokens->empty())
    throw ModelSpecError(src.path() + ": no tokenizer.ggml.tokens to copy");
  for (const auto& [key, value] : src.metadata())
    if (key.rfind("tokenizer.", 0) == 0) w.set(key, value);
  return int(tokens->size());
}

GgufWriter build_model(const ModelSpec& asked, ProgressFn progress, int threads) {
  const ModelSpec spec = with_expert_defaults(asked);
  validate(spec);
  if (threads <= 0) threads = int(std::max(1u, std::thread::hardware_concurrency()));
  GgufWriter w;
  // Metadata order as in llama.cpp files: general.*, hyper-parameters, then tokenizer.*.
  int vocab = spec.vocab_size > 0 ? spec.vocab_size : builtin_vocab_size();
  add_hparams(w, spec, vocab);
  if (!spec.vocab_from.empty()) {
    gguf::GgufFile src = gguf::GgufFile::open(spec.vocab_from);
    const int copied = copy_vocab(src, w);
    if (spec.vocab_size != 0 && spec.vocab_size != copied)
      throw ModelSpecError("vocab size " + std::to_string(spec.vocab_size) + " differs from the " +
                           std::to_string(copied) + " tokens of " + spec.vocab_from);
    vocab = copied;
    w.set(std::string(arch_name(spec.arch)) + ".vocab_size", Value::from_u32(uint32_t(vocab)));
  } else {
    add_builtin_vocab(w, vocab);
  }

  const int64_t dim = spec.dim, ff = spec.ff_dim;
  const int64_t head_dim = spec_head_dim(spec);
  if (spec.rope_freqs == RopeFreqs::LongRope) {  // first, like rope_freqs below
    for (const bool is_long : {true, false}) {
      const char* name = is_long ? "rope_factors_long.weight" : "rope_factors_short.weight";
      const std::vector<float> f = longrope_factors(int(head_dim), is_long);
      std::vector<uint8_t> bytes(f.size() * sizeof(float));
      std::memcpy(bytes.data(), f.data(), bytes.size());
      w.add_tensor(name, {int64_t(f.size())}, GgmlType::F32, std::move(bytes));
    }
  }
  if (spec.rope_freqs == RopeFreqs::Llama3) {
    // First, as llama.cpp's converter writes it; outside `plan` so that every random tensor
    // keeps its seed (index) and the weights equal those of the same spec without factors.
    const std::vector<float> f = llama3_rope_freq_factors(int(head_dim), rope_base(spec));
    std::vector<uint8_t> bytes(f.size() * sizeof(float));
    std::memcpy(bytes.data(), f.data(), bytes.size());
    w.add_tensor("rope_freqs.weight", {int64_t(f.size())}, GgmlType::F32, std::move(bytes));
  }
  const int64_t q_dim = spec.n_heads * head_dim, kv_dim = spec.n_kv_heads * head_dim;
  struct Planned {
    std::string name;
    int64_t cols, rows;
    GgmlType type;
    Init init;
    int64_t experts = 0;  // > 0: a 3-D stack {cols, rows / experts, experts}
  };
  std::vector<Planned> plan;
  // Each matrix's type: spec.type, or the mix's choice for it.
  WeightMixModel mix_model;
  mix_model.arch = arch_name(spec.arch);
  mix_model.n_layers = spec.n_layers, mix_model.n_heads = spec.n_heads, mix_model.n_kv_heads = spec.n_kv_heads;
  mix_model.n_experts = spec.n_experts;
  mix_model.has_output = !is_gemma(spec.arch);
  const auto type_of = [&](const std::string& name, int64_t in) {
    return weight_type_for({spec.type, spec.mix}, name, in, mix_model);
  };
  auto matrix = [&](std::string name, int64_t in, int64_t out, float gain = 1.0f) {
    const GgmlType t = type_of(name, in);
    plan.push_back({std::move(name), in, out, t, {0.0f, gain / std::sqrt(float(in))}});
  };
  auto norm = [&](std::string name, int64_t n) {
    plan.push_back({std::move(name), n, 1, GgmlType::F32, {1.0f, 0.02f}});
  };
  // n_experts [out x in] matrices stacked as one 3-D tensor (each expert scaled as a matrix).
  auto experts = [&](std::string name, int64_t in, int64_t out) {
    const GgmlType t = type_of(name, in);
    plan.push_back({std::move(name), in, out * spec.n_experts, t, {0.0f, 1.0f / std::sqrt(float(in))},
                    spec.n_experts});
  };
  auto bias = [&](std::string name, int64_t n) {
    plan.push_back({std::move(name), n, 1, GgmlType::F32, {0.0f, 0.02f}});
  };
  matrix("token_embd.weight", dim, vocab);
  norm("output_norm.weight", dim);
  // Logits with a spread of a few units: varied but not uniform sampling. Gemma ties the LM
  // head to the embeddings (llama.cpp refuses an output.weight there).
  if (!is_gemma(spec.arch)) matrix("output.weight", dim, vocab, 2.0f);
  for (int l = 0; l < spec.n_layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    norm(b + "attn_norm.weight", dim);
    if (spec.arch == Arch::Phi3) {
      matrix(b + "attn_qkv.weight", dim, q_dim + 2 * kv_dim);
    } else {
      matrix(b + "attn_q.weight", dim, q_dim);
      matrix(b + "attn_k.weight", dim, kv_dim);
      matrix(b + "attn_v.weight", dim, kv_dim);
    }
    if (is_qwen3(spec.arch) || spec.arch == Arch::Gemma3) {
      norm(b + "attn_q_norm.weight", head_dim);
      norm(b + "attn_k_norm.weight", head_dim);
    }
    if (is_qwen(spec.arch)) {
      bias(b + "attn_q.bias", q_dim);
      bias(b + "attn_k.bias", kv_dim);
      bias(b + "attn_v.bias", kv_dim);
    }
    matrix(b + "attn_output.weight", q_dim, dim);
    if (is_gemma(spec.arch)) norm(b + "post_attention_norm.weight", dim);
    norm(b + "ffn_norm.weight", dim);
    if (spec.n_experts > 0) {
      // The router is F32 (llama.cpp's converter keeps it so); gain 2 spreads the experts'
      // probabilities so that the top-k is decisive.
      const int64_t eff = spec.expert_ff_dim, sff = spec.shared_expert_ff_dim;
      plan.push_back({b + "ffn_gate_inp.weight", dim, spec.n_experts, GgmlType::F32,
                      {0.0f, 2.0f / std::sqrt(float(dim))}});
      experts(b + "ffn_gate_exps.weight", dim, eff);
      experts(b + "ffn_up_exps.weight", dim, eff);
      experts(b + "ffn_down_exps.weight", eff, dim);
      if (sff > 0) {
        plan.push_back({b + "ffn_gate_inp_shexp.weight", dim, 1, GgmlType::F32,
                        {0.0f, 1.0f / std::sqrt(float(dim))}});
        matrix(b + "ffn_gate_shexp.weight", dim, sff);
        matrix(b + "ffn_up_shexp.weight", dim, sff);
        matrix(b + "ffn_down_shexp.weight", sff, dim);
      }
      continue;
    }
    if (spec.arch == Arch::Phi3) {  // gate rows, then up rows
      matrix(b + "ffn_up.weight", dim, 2 * ff);
    } else {
      matrix(b + "ffn_gate.weight", dim, ff);
      matrix(b + "ffn_up.weight", dim, ff);
    }
    matrix(b + "ffn_down.weight", ff, dim);
    if (is_gemma(spec.arch)) norm(b + "post_ffw_norm.weight", dim);
  }

  uint64_t total = 0;
  for (const auto& p : plan) total += ggml_row_size(p.type, p.cols) * uint64_t(p.rows);
  auto done = std::make_shared<uint64_t>(0);
  for (size_t k = 0; k < plan.size(); ++k) {
    const Planned& p = plan[k];
    std::vector<int64_t> dims = p.rows == 1 ? std::vector<int64_t>{p.cols} : std::vector<int64_t>{p.cols, p.rows};
    if (p.experts > 0) dims = {p.cols, p.rows / p.experts, p.experts};
    w.add_tensor(p.name, dims, p.type,
                 make_filler(spec.seed, k, p.cols, p.rows, p.type, p.init, threads, done, total, progress));
  }
  return w;
}

void write_model(const ModelSpec& spec, const std::string& path, ProgressFn progress, int threads) {
  build_model(spec, std::move(progress), threads).write(path);
}

}  // namespace pagoda
