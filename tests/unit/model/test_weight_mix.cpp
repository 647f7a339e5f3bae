// Weight-type mixes (engine/model/weight_mix): which matrix gets which type under q4_k_m, as
// llama.cpp's Q4_K_M assigns them; make-model and quantize giving the same types for the same
// model; the presets' file sizes against published Q4_K_M files of those shapes.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <unistd.h>

#include "engine/gguf/gguf.h"
#include "engine/model/model_quantize.h"
#include "engine/model/model_writer.h"
#include "engine/model/weight_mix.h"

using namespace pagoda;

namespace {

const WeightChoice kQ4KM{GgmlType::Q4_K, WeightMix::Q4_K_M};

WeightMixModel dense(const char* arch, int layers, int heads = 32, int kv_heads = 8) {
  WeightMixModel m;
  m.arch = arch;
  m.n_layers = layers, m.n_heads = heads, m.n_kv_heads = kv_heads;
  return m;
}

GgmlType type_of(const std::string& name, const WeightMixModel& m, int64_t cols = 4096) {
  return weight_type_for(kQ4KM, name, cols, m);
}

std::string blk(int layer, const char* what) { return "blk." + std::to_string(layer) + "." + what; }

// Name -> type of every tensor a writer holds.
std::map<std::string, GgmlType> types_of(const gguf::GgufWriter& w) {
  std::map<std::string, GgmlType> out;
  for (const auto& t : w.tensors()) out[t.name] = t.type;
  return out;
}

// Bytes of tensor data a writer will write.
double data_gb(const gguf::GgufWriter& w) {
  double bytes = 0;
  for (const auto& t : w.tensors()) {
    uint64_t rows = 1;
    for (size_t d = 1; d < t.dims.size(); ++d) rows *= uint64_t(t.dims[d]);
    bytes += double(ggml_row_size(t.type, t.dims[0]) * rows);
  }
  return bytes / 1e9;
}

}  // namespace

TEST_CASE("q4_k_m: Q6_K for the LM head, Q4_K for the embeddings and the other matrices") {
  const WeightMixModel m = dense("llama", 32);
  CHECK(type_of("output.weight", m) == GgmlType::Q6_K);
  CHECK(type_of("token_embd.weight", m) == GgmlType::Q4_K);
  for (const char* what : {"attn_q.weight", "attn_k.weight", "attn_output.weight", "ffn_gate.weight", "ffn_up.weight"})
    for (int layer : {0, 5, 31}) CHECK(type_of(blk(layer, what), m) == GgmlType::Q4_K);
  // Tied embeddings (gemma: no output.weight): the embedding table is the LM head.
  WeightMixModel tied = m;
  tied.has_output = false;
  CHECK(type_of("token_embd.weight", tied) == GgmlType::Q6_K);
  // An LM head whose rows do not fit Q4_K's 256-element block: Q8_0, as llama.cpp does.
  CHECK(type_of("output.weight", m, 2880) == GgmlType::Q8_0);
}

TEST_CASE("q4_k_m: V and FFN-down get Q6_K in the first and last eighth and every third layer between") {
  // 32 layers: 0-3 and 28-31, and (i - 4) % 3 == 2 between: 6, 9, ..., 27.
  const WeightMixModel m = dense("llama", 32);
  std::string q6;
  for (int layer = 0; layer < 32; ++layer) {
    const GgmlType v = type_of(blk(layer, "attn_v.weight"), m), down = type_of(blk(layer, "ffn_down.weight"), m, 14336);
    CHECK(v == down);
    CHECK((v == GgmlType::Q6_K || v == GgmlType::Q4_K));
    if (v == GgmlType::Q6_K) q6 += std::to_string(layer) + " ";
  }
  CHECK(q6 == "0 1 2 3 6 9 12 15 18 21 24 27 28 29 30 31 ");
  // 36 layers (Qwen3-8B): 0-3, 31-35, and 6, 9, ..., 30.
  const WeightMixModel q = dense("qwen3", 36);
  CHECK(type_of(blk(4, "attn_v.weight"), q) == GgmlType::Q4_K);
  CHECK(type_of(blk(30, "attn_v.weight"), q) == GgmlType::Q6_K);
  CHECK(type_of(blk(31, "ffn_down.weight"), q) == GgmlType::Q6_K);
  CHECK(type_of(blk(29, "ffn_down.weight"), q) == GgmlType::Q4_K);
}

TEST_CASE("q4_k_m: a 70B-class model's other V matrices get Q5_K; phi3's fused QKV Q5_K; 8 experts") {
  const WeightMixModel l70 = dense("llama", 80, 64, 8);
  CHECK(type_of(blk(9, "attn_v.weight"), l70, 8192) == GgmlType::Q6_K);   // first eighth (< 10)
  CHECK(type_of(blk(10, "attn_v.weight"), l70, 8192) == GgmlType::Q5_K);  // (10 - 10) % 3 == 0
  CHECK(type_of(blk(12, "attn_v.weight"), l70, 8192) == GgmlType::Q6_K);  // (12 - 10) % 3 == 2
  CHECK(type_of(blk(10, "ffn_down.weight"), l70, 28672) == GgmlType::Q4_K);
  CHECK(type_of(blk(70, "ffn_down.weight"), l70, 28672) == GgmlType::Q6_K);  // last eighth (>= 70)
  // Without grouped KV heads (llama.cpp's 65B class) or another architecture: no Q5_K.
  CHECK(type_of(blk(10, "attn_v.weight"), dense("llama", 80, 64, 64), 8192) == GgmlType::Q4_K);
  CHECK(type_of(blk(10, "attn_v.weight"), dense("qwen3", 80, 64, 8), 8192) == GgmlType::Q4_K);

  CHECK(type_of(blk(0, "attn_qkv.weight"), dense("phi3", 32, 32, 32), 3072) == GgmlType::Q5_K);
  CHECK(type_of(blk(1, "attn_qkv.weight"), dense("phi3", 32, 32, 32), 3072) == GgmlType::Q5_K);

  WeightMixModel moe = dense("llama", 32);
  moe.n_experts = 8;
  CHECK(type_of(blk(5, "attn_v.weight"), moe) == GgmlType::Q8_0);
  CHECK(type_of(blk(0, "attn_v.weight"), moe) == GgmlType::Q8_0);
  CHECK(type_of(blk(5, "attn_k.weight"), moe) == GgmlType::Q8_0);
  CHECK(type_of(blk(5, "attn_output.weight"), moe) == GgmlType::Q5_K);
  CHECK(type_of(blk(0, "ffn_down_exps.weight"), moe, 14336) == GgmlType::Q6_K);
  CHECK(type_of(blk(5, "ffn_down_exps.weight"), moe, 14336) == GgmlType::Q4_K);
  CHECK(type_of(blk(0, "ffn_gate_exps.weight"), moe) == GgmlType::Q4_K);
  moe.n_experts = 128;  // not 8: the dense rule
  CHECK(type_of(blk(5, "attn_k.weight"), moe) == GgmlType::Q4_K);
  CHECK(type_of(blk(0, "ffn_down_exps.weight"), moe, 768) == GgmlType::Q6_K);
}

TEST_CASE("a plain type is every matrix's, a block that does not fit falls back, names parse") {
  const WeightMixModel m = dense("llama", 32);
  for (const char* name : {"output.weight", "blk.0.attn_v.weight", "blk.0.ffn_down.weight", "token_embd.weight"})
    CHECK(weight_type_for({GgmlType::IQ4_XS, WeightMix::None}, name, 4096, m) == GgmlType::IQ4_XS);
  CHECK(weight_type_for({GgmlType::IQ4_XS, WeightMix::None}, "output.weight", 96, m) == GgmlType::IQ4_NL);
  CHECK(type_of("blk.0.ffn_down.weight", m, 96) == GgmlType::Q8_0);   // Q6_K -> Q8_0
  CHECK(type_of("blk.4.ffn_down.weight", m, 96) == GgmlType::Q5_0);   // Q4_K -> Q5_0
  CHECK(weight_type_wanted(kQ4KM, "blk.4.ffn_down.weight", 96, m) == GgmlType::Q4_K);
  CHECK(parse_weight_choice("q4_k_m").type == GgmlType::Q4_K);
  CHECK(parse_weight_choice("q4_k_m").mix == WeightMix::Q4_K_M);
  CHECK(parse_weight_choice("q4_k").mix == WeightMix::None);
  CHECK(parse_weight_choice("iq4_xs").type == GgmlType::IQ4_XS);
  CHECK_THROWS_AS(parse_weight_choice("q4_k_s"), ModelSpecError);
  CHECK(weight_choice_names().find("q4_k_m") != std::string::npos);
}

TEST_CASE("make-model and quantize give the same q4_k_m types for the same model") {
  for (Arch arch : {Arch::Llama, Arch::Gemma2, Arch::Phi3, Arch::Qwen2Moe}) {
    ModelSpec spec;
    spec.arch = arch;
    spec.n_layers = 9, spec.dim = 256, spec.ff_dim = 512, spec.n_heads = 4, spec.n_kv_heads = 2, spec.ctx = 64;
    spec.seed = 5;
    spec.type = GgmlType::F32;
    const auto f32_bytes = build_model(spec).to_bytes();
    spec.type = GgmlType::Q4_K, spec.mix = WeightMix::Q4_K_M;
    const auto made = types_of(build_model(spec));
    INFO(arch_name(arch));
    const auto dir = std::filesystem::temp_directory_path();
    const std::string in = (dir / ("pagoda_test_mix_in_" + std::to_string(::getpid()) + ".gguf")).string();
    const std::string out = (dir / ("pagoda_test_mix_out_" + std::to_string(::getpid()) + ".gguf")).string();
    std::ofstream(in, std::ios::binary).write(reinterpret_cast<const char*>(f32_bytes.data()),
                                              static_cast<std::streamsize>(f32_bytes.size()));
    quantize_model(in, out, QuantizeOptions{GgmlType::Q4_K, 2, WeightMix::Q4_K_M});
    const gguf::GgufFile q = gguf::GgufFile::open(out);
    int q6 = 0;
    for (const auto& t : q.tensors()) {
      INFO(t.name);
      REQUIRE(made.count(t.name) == 1);
      CHECK(made.at(t.name) == t.type);
      q6 += t.type == GgmlType::Q6_K;
    }
    // The LM head (tied for gemma2) and V / FFN-down of layers 0 (i < 9/8), 7, 8 (i >= 63/8)
    // and 3, 6 ((i - 1) % 3 == 2); qwen2moe (8 experts): its V is Q8_0, its shared expert's
    // down matrix counts instead; phi3 has no separate V.
    const int more_bits_layers = 5;
    const int per_layer = arch == Arch::Phi3 ? 1 : 2;
    CHECK(q6 == 1 + more_bits_layers * per_layer);
    std::filesystem::remove(in);
    std::filesystem::remove(out);
  }
}

// Published llama.cpp Q4_K_M files of these shapes: Llama-3.1-8B 4.92 GB, Qwen3-8B 5.03 GB,
// Llama-3.1-70B 42.5 GB (tensor data, from the writers' plans; nothing is generated).
TEST_CASE("presets in q4_k_m: about the sizes of llama.cpp's Q4_K_M files of those shapes") {
  ModelSpec l8 = model_preset("llama3-8b");
  l8.type = GgmlType::Q4_K, l8.mix = WeightMix::Q4_K_M;
  CHECK(data_gb(build_model(l8)) == Approx(4.92).epsilon(0.02));
  ModelSpec q8 = model_preset("qwen3-8b");
  q8.type = GgmlType::Q4_K, q8.mix = WeightMix::Q4_K_M;
  CHECK(data_gb(build_model(q8)) == Approx(5.03).epsilon(0.02));
  const ModelSpec l70 = model_preset("llama3-70b");
  CHECK(l70.n_layers == 80);
  CHECK(l70.dim == 8192);
  CHECK(l70.n_heads == 64);
  CHECK(l70.n_kv_heads == 8);
  CHECK(l70.ff_dim == 28672);
  CHECK(l70.vocab_size == 128256);
  CHECK(l70.rope_freqs == RopeFreqs::Llama3);
  CHECK(l70.mix == WeightMix::Q4_K_M);
  const gguf::GgufWriter w70 = build_model(l70);
  CHECK(data_gb(w70) == Approx(42.5).epsilon(0.02));
  const auto t70 = types_of(w70);
  CHECK(t70.at("blk.10.attn_v.weight") == GgmlType::Q5_K);
  CHECK(t70.at("output.weight") == GgmlType::Q6_K);
  const ModelSpec q3 = model_preset("qwen3-8b");
  CHECK(q3.arch == Arch::Qwen3);
  CHECK(q3.n_layers == 36);
  CHECK(q3.ff_dim == 12288);
  CHECK(q3.vocab_size == 151936);
}
