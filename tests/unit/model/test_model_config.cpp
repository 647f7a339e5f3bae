// ModelConfig::from_gguf: hyper-parameters, defaults, and every validation error naming the key
// or tensor at fault. Files are built in memory from editable key/tensor lists.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "engine/gguf/gguf.h"
#include "engine/model/model_config.h"

using namespace pagoda;
using namespace pagoda::gguf;

namespace {

struct Tensor {
  std::string name;
  std::vector<int64_t> dims;
  GgmlType type = GgmlType::F32;
};

// A complete, valid small model description whose lists tests edit before building.
struct Draft {
  std::string arch = "llama";
  int layers = 2, dim = 64, ff = 256, heads = 4, kv_heads = 2, vocab = 16;
  std::vector<std::pair<std::string, Value>> kv;
  std::vector<Tensor> tensors;

  explicit Draft(std::string a = "llama") : arch(std::move(a)) {
    const std::string p = arch + ".";
    kv = {{"general.architecture", Value::from_string(arch)},
          {"general.name", Value::from_string("draft")},
          {p + "block_count", Value::from_u32(layers)},
          {p + "context_length", Value::from_u32(512)},
          {p + "embedding_length", Value::from_u32(dim)},
          {p + "feed_forward_length", Value::from_u32(ff)},
          {p + "attention.head_count", Value::from_u32(heads)},
          {p + "attention.head_count_kv", Value::from_u32(kv_heads)},
          {p + "attention.layer_norm_rms_epsilon", Value::from_f32(1e-6f)},
          {p + "rope.freq_base", Value::from_f32(500000.0f)}};
    const int64_t hd = dim / heads, q = heads * hd, kvd = kv_heads * hd;
    tensors = {{"token_embd.weight", {dim, vocab}, GgmlType::F16},
               {"output_norm.weight", {dim}},
               {"output.weight", {dim, vocab}, GgmlType::F16}};
    for (int l = 0; l < layers; ++l) {
      const std::string b = "blk." + std::to_string(l) + ".";
      tensors.push_back({b + "attn_norm.weight", {dim}});
      tensors.push_back({b + "attn_q.weight", {dim, q}});
      tensors.push_back({b + "attn_k.weight", {dim, kvd}});
      tensors.push_back({b + "attn_v.weight", {dim, kvd}});
      if (arch == "qwen2") {
        tensors.push_back({b + "attn_q.bias", {q}});
        tensors.push_back({b + "attn_k.bias", {kvd}});
        tensors.push_back({b + "attn_v.bias", {kvd}});
      }
      tensors.push_back({b + "attn_output.weight", {q, dim}});
      tensors.push_back({b + "ffn_norm.weight", {dim}});
      tensors.push_back({b + "ffn_gate.weight", {dim, ff}, GgmlType::Q8_0});
      tensors.push_back({b + "ffn_up.weight", {dim, ff}, GgmlType::Q8_0});
      tensors.push_back({b + "ffn_down.weight", {ff, dim}, GgmlType::Q4_K});
    }
  }
  void set(const std::string& key, Value v) {
    for (auto& e : kv)
      if (e.first == key) {
        e.second = std::move(v);
        return;
      }
    kv.emplace_back(key, std::move(v));
  }
  void erase_key(const std::string& key) {
    std::erase_if(kv, [&](const auto& e) { return e.first == key; });
  }
  void erase_tensor(const std::string& name) {
    std::erase_if(tensors, [&](const Tensor& t) { return t.name == name; });
  }
  Tensor& tensor(const std::string& name) {
    for (auto& t : tensors)
      if (t.name == name) return t;
    FAIL("no tensor " << name);
    throw;
  }
  GgufFile build() const {
    GgufWriter w;
    for (const auto& [k, v] : kv) w.set(k, v);
    for (const auto& t : tensors) {
      int64_t rows = 1;
      for (size_t d = 1; d < t.dims.size(); ++d) rows *= t.dims[d];
      w.add_tensor(t.name, t.dims, t.type, std::vector<uint8_t>(ggml_row_size(t.type, t.dims[0]) * rows));
    }
    return GgufFile::from_bytes(w.to_bytes(), "draft.gguf");
  }
};

std::string error_of(const Draft& d) {
  GgufFile f = d.build();
  try {
    ModelConfig::from_gguf(f);
  } catch (const ModelConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("llama hyper-parameters are read") {
  Draft d;
  GgufFile f = d.build();
  ModelConfig c = ModelConfig::from_gguf(f);
  CHECK(c.arch == Arch::Llama);
  CHECK(std::string(arch_name(c.arch)) == "llama");
  CHECK(c.name == "draft");
  CHECK(c.n_layers == 2);
  CHECK(c.dim == 64);
  CHECK(c.ff_dim == 256);
  CHECK(c.n_heads == 4);
  CHECK(c.n_kv_heads == 2);
  CHECK(c.head_dim == 16);
  CHECK(c.n_rot == 16);
  CHECK(c.vocab_size == 16);
  CHECK(c.ctx_train == 512);
  CHECK(c.rms_eps == 1e-6f);
  CHECK(c.rope_freq_base == 500000.0f);
  CHECK(c.rope_freq_scale == 1.0f);
  CHECK_FALSE(c.rope_neox);
  CHECK_FALSE(c.qkv_bias);
  CHECK_FALSE(c.tied_embeddings);
}

TEST_CASE("qwen2 uses NeoX rope and QKV biases") {
  Draft d("qwen2");
  GgufFile f = d.build();
  ModelConfig c = ModelConfig::from_gguf(f);
  CHECK(c.arch == Arch::Qwen2);
  CHECK(std::string(arch_name(c.arch)) == "qwen2");
  CHECK(c.rope_neox);
  CHECK(c.qkv_bias);
  d.erase_tensor("blk.1.attn_k.bias");
  CHECK_THAT(error_of(d), Catch::Contains("missing tensor 'blk.1.attn_k.bias'"));
}

TEST_CASE("defaults: kv heads, eps, rope base, tied embeddings, name from the file") {
  Draft d;
  d.erase_key("llama.attention.head_count_kv");
  d.erase_key("llama.attention.layer_norm_rms_epsilon");
  d.erase_key("llama.rope.freq_base");
  d.erase_key("general.name");
  d.erase_tensor("output.weight");
  // With kv heads = heads, K and V are as wide as Q.
  for (int l = 0; l < 2; ++l) {
    d.tensor("blk." + std::to_string(l) + ".attn_k.weight").dims = {64, 64};
    d.tensor("blk." + std::to_string(l) + ".attn_v.weight").dims = {64, 64};
  }
  GgufFile f = d.build();
  ModelConfig c = ModelConfig::from_gguf(f);
  CHECK(c.n_kv_heads == 4);
  CHECK(c.rms_eps == 1e-5f);
  CHECK(c.rope_freq_base == 10000.0f);
  CHECK(c.tied_embeddings);
  CHECK(c.name == "draft.gguf");
}

TEST_CASE("rope scaling and explicit key length") {
  Draft d;
  d.set("llama.rope.scaling.type", Value::from_string("linear"));
  d.set("llama.rope.scaling.factor", Value::from_f32(4.0f));
  d.set("llama.rope.dimension_count", Value::from_u32(8));
  GgufFile f = d.build();
  ModelConfig c = ModelConfig::from_gguf(f);
  CHECK(c.rope_freq_scale == 0.25f);
  CHECK(c.n_rot == 8);

  Draft legacy;
  legacy.set("llama.rope.scale_linear", Value::from_f32(2.0f));
  GgufFile g = legacy.build();
  CHECK(ModelConfig::from_gguf(g).rope_freq_scale == 0.5f);

  Draft yarn;
  yarn.set("llama.rope.scaling.type", Value::from_string("yarn"));
  CHECK_THAT(error_of(yarn), Catch::Contains("rope scaling type 'yarn'"));

  Draft kl;  // head_dim 32 from key_length while dim/heads is 16
  kl.set("llama.attention.key_length", Value::from_u32(32));
  for (int l = 0; l < 2; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    kl.tensor(b + "attn_q.weight").dims = {64, 128};
    kl.tensor(b + "attn_k.weight").dims = {64, 64};
    kl.tensor(b + "attn_v.weight").dims = {64, 64};
    kl.tensor(b + "attn_output.weight").dims = {128, 64};
  }
  GgufFile h = kl.build();
  CHECK(ModelConfig::from_gguf(h).head_dim == 32);
}

TEST_CASE("missing or bad metadata is named") {
  Draft d;
  d.erase_key("general.architecture");
  CHECK_THAT(error_of(d), Catch::Contains("general.architecture"));

  d = Draft();
  d.set("general.architecture", Value::from_string("gpt2"));
  CHECK_THAT(error_of(d), Catch::Contains("unsupported architecture 'gpt2'") &&
                              Catch::Contains("draft.gguf"));

  d = Draft();
  d.erase_key("llama.block_count");
  CHECK_THAT(error_of(d), Catch::Contains("missing metadata key 'llama.block_count'"));

  // A corrupt layer count is refused before anything is sized by it (2^31 - 1 used to size
  // per-layer tables of gigabytes before the first missing layer tensor was noticed).
  d = Draft();
  d.set("llama.block_count", Value::from_u32(0x7fffffff));
  CHECK_THAT(error_of(d), Catch::Contains("'llama.block_count' is 2147483647, more layers than the file has tensors"));

  d = Draft();
  d.set("llama.embedding_length", Value::from_string("64"));
  CHECK_THAT(error_of(d), Catch::Contains("llama.embedding_length") && Catch::Contains("string"));

  d = Draft();
  d.set("llama.feed_forward_length", Value::from_i32(-5));
  CHECK_THAT(error_of(d), Catch::Contains("llama.feed_forward_length") && Catch::Contains("positive"));

  d = Draft();
  d.set("llama.attention.head_count", Value::from_u32(3));
  CHECK_THAT(error_of(d), Catch::Contains("not a multiple of"));

  d = Draft();
  d.set("llama.attention.head_count_kv", Value::from_u32(3));
  CHECK_THAT(error_of(d), Catch::Contains("head_count_kv"));

  d = Draft();
  d.set("llama.attention.layer_norm_rms_epsilon", Value::from_f32(-1.0f));
  CHECK_THAT(error_of(d), Catch::Contains("layer_norm_rms_epsilon"));

  d = Draft();
  d.set("llama.rope.dimension_count", Value::from_u32(18));
  CHECK_THAT(error_of(d), Catch::Contains("rope.dimension_count"));

  d = Draft();
  d.set("llama.vocab_size", Value::from_u32(17));
  CHECK_THAT(error_of(d), Catch::Contains("llama.vocab_size"));
}

TEST_CASE("missing tensors, bad shapes and unsupported types are named") {
  Draft d;
  d.erase_tensor("blk.1.ffn_up.weight");
  CHECK_THAT(error_of(d), Catch::Contains("missing tensor 'blk.1.ffn_up.weight'"));

  d = Draft();
  d.erase_tensor("token_embd.weight");
  CHECK_THAT(error_of(d), Catch::Contains("missing tensor 'token_embd.weight'"));

  d = Draft();
  d.tensor("token_embd.weight").dims = {32, 16};
  CHECK_THAT(error_of(d), Catch::Contains("token_embd.weight") && Catch::Contains("{32, 16}"));

  d = Draft();
  d.tensor("blk.0.attn_k.weight").dims = {64, 64};  // as if kv heads were 4
  CHECK_THAT(error_of(d), Catch::Contains("tensor 'blk.0.attn_k.weight' has shape {64, 64}, expected {64, 32}"));

  d = Draft();
  d.tensor("output.weight").dims = {64, 15};
  CHECK_THAT(error_of(d), Catch::Contains("output.weight"));

  d = Draft();
  d.tensor("blk.0.ffn_down.weight").type = GgmlType::Q8_K;
  CHECK_THAT(error_of(d), Catch::Contains("'blk.0.ffn_down.weight' has type q8_k") &&
                              Catch::Contains("does not support") && Catch::Contains("q6_k"));

  d = Draft();
  d.tensor("blk.1.ffn_norm.weight").type = GgmlType::F16;
  CHECK_THAT(error_of(d), Catch::Contains("blk.1.ffn_norm.weight") && Catch::Contains("expected f32"));

  d = Draft();  // llama with biases on layer 0 only
  d.tensors.push_back({"blk.0.attn_q.bias", {64}});
  d.tensors.push_back({"blk.0.attn_k.bias", {32}});
  d.tensors.push_back({"blk.0.attn_v.bias", {32}});
  CHECK_THAT(error_of(d), Catch::Contains("missing tensor 'blk.1.attn_q.bias'"));
}
