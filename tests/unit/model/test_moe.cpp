// Mixture of experts: the routing kernel, the MoE forward (Mixtral-style llama, qwen2moe, qwen3moe) on
// CpuBackend against the scalar reference (reference_moe.cpp), batch invariance bit for bit,
// make-model's MoE files, and clear load errors for inconsistent expert metadata and tensors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/cpu/backend_cpu.h"
#include "engine/gguf/gguf.h"
#include "engine/model/model.h"
#include "engine/model/model_writer.h"
#include "kernels/cpu/moe.h"
#include "tests/unit/model/forward_test_util.h"
#include "tests/unit/model/reference_model.h"

using namespace pagoda;
using test::TinyModelSpec;

namespace {

using test::kBlock;
using test::Part;
using test::plan_of;
using test::some_tokens;

std::unique_ptr<Model> load(const gguf::GgufFile& f, int threads = 2, DecodePack pack = DecodePack::Auto) {
  auto m = std::make_unique<Model>(f, std::make_unique<CpuBackend>(threads, pack), 64);
  m->init_kv_cache(48, kBlock, GgmlType::F32);
  return m;
}

// The model's logits for every position of `ids`, prefilled in two chunks on a scrambled block
// table, against the reference: max |got - want| / max |want|.
double error_vs_reference(const gguf::GgufFile& f, int n_tokens, int vocab) {
  auto m = load(f);
  const auto ids = some_tokens(n_tokens, vocab, 1);
  const std::vector<int32_t> table = {9, 3, 17, 0, 5, 30, 2, 8};
  const int first = n_tokens / 2 + 1;
  std::vector<float> got, part;
  m->forward(plan_of({Part{&ids, 0, first, table}}), got);
  m->forward(plan_of({Part{&ids, first, n_tokens, table}}), part);
  got.insert(got.end(), part.begin(), part.end());
  const auto want = test::ReferenceModel(f).forward(ids);
  REQUIRE(got.size() == want.size());
  return test::rel_err(got, want);
}

gguf::GgufFile tiny(const TinyModelSpec& s) { return gguf::GgufFile::from_bytes(test::make_tiny_model(s)); }

TinyModelSpec moe_spec(const char* arch, int experts, int used, uint64_t seed) {
  TinyModelSpec s;
  s.arch = arch;
  s.experts = experts;
  s.experts_used = used;
  s.seed = seed;
  return s;
}

}  // namespace

TEST_CASE("moe_route_row: softmax, top-k in descending order, lower id on ties, renormalization", "[moe]") {
  const float logits[] = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f};
  int32_t ids[3];
  float w[3];
  cpu::moe_route_row(logits, 5, 3, false, ids, w);
  CHECK(ids[0] == 1);
  CHECK(ids[1] == 3);  // equal to expert 1: the lower id comes first
  CHECK(ids[2] == 4);
  double sum = 0;
  for (float l : logits) sum += std::exp(double(l) - 2.0);
  CHECK(w[0] == Approx(1.0 / sum).epsilon(1e-6));
  CHECK(w[2] == Approx(std::exp(-1.0) / sum).epsilon(1e-6));
  cpu::moe_route_row(logits, 5, 3, true, ids, w);
  CHECK(w[0] + w[1] + w[2] == Approx(1.0).epsilon(1e-6));
  CHECK(w[2] / w[0] == Approx(std::exp(-1.0)).epsilon(1e-6));
  CHECK_THROWS(cpu::moe_route_row(logits, 5, 6, true, ids, w));
  // More than 64 experts: the selection bitmap's second part.
  std::vector<float> many(100, 0.0f);
  many[99] = 3.0f;
  many[70] = 2.0f;
  cpu::moe_route_row(many.data(), 100, 2, true, ids, w);
  CHECK(ids[0] == 99);
  CHECK(ids[1] == 70);
}

TEST_CASE("moe_group: entries grouped by expert in token order", "[moe]") {
  const int32_t ids[] = {2, 0, 1, 2, 2, 1};  // 3 tokens x k = 2
  cpu::MoeGroups g;
  cpu::moe_group(ids, 3, 2, 4, g);
  CHECK(g.offsets == std::vector<int32_t>{0, 1, 3, 6, 6});
  CHECK(g.entries == std::vector<int32_t>{1, 2, 5, 0, 3, 4});
  for (int32_t e = 0; e < 6; ++e) CHECK(g.entries[size_t(g.place[size_t(e)])] == e);
  const int32_t bad[] = {0, 4};
  CHECK_THROWS(cpu::moe_group(bad, 1, 2, 4, g));
}

TEST_CASE("f32 MoE forward matches the scalar reference (Mixtral-style llama, qwen2moe, qwen3moe)", "[moe]") {
  struct Case {
    TinyModelSpec spec;
    const char* what;
  };
  std::vector<Case> cases;
  cases.push_back({moe_spec("llama", 4, 2, 31), "llama, 2 of 4 experts"});
  cases.push_back({moe_spec("llama", 3, 1, 32), "llama, 1 of 3 experts"});
  cases.push_back({moe_spec("llama", 4, 4, 33), "llama, all 4 experts"});
  { TinyModelSpec s = moe_spec("llama", 6, 2, 34); s.expert_ff = 40; cases.push_back({s, "llama, expert ff 40"}); }
  cases.push_back({moe_spec("qwen2moe", 6, 2, 35), "qwen2moe, 2 of 6 + shared"});
  { TinyModelSpec s = moe_spec("qwen2moe", 4, 3, 36); s.expert_ff = 32; s.shared_ff = 80;
    cases.push_back({s, "qwen2moe, expert ff 32, shared ff 80"}); }
  cases.push_back({moe_spec("qwen3moe", 6, 2, 37), "qwen3moe, 2 of 6, Q/K norms, renormalized"});
  { TinyModelSpec s = moe_spec("qwen3moe", 8, 3, 38); s.expert_ff = 24;
    cases.push_back({s, "qwen3moe, 3 of 8, expert ff 24"}); }
  for (const Case& c : cases) {
    const double err = error_vs_reference(tiny(c.spec), 23, c.spec.vocab);
    INFO(c.what << ": max relative logit error " << err);
    CHECK(err < 1e-4);
  }
}

TEST_CASE("quantized MoE forward stays close to the reference on the same weights", "[moe]") {
  // As for the dense models (test_model_forward.cpp): quantized matmuls quantize activations to
  // int8 blocks, about 1-2% max relative logit error through 2 layers; 5% is the same bound.
  // A routing decision flipped by that noise would show as an error of order 1.
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_K}) {
    for (const char* arch : {"llama", "qwen2moe", "qwen3moe"}) {
      TinyModelSpec s = moe_spec(arch, 4, 2, 41);
      s.dim = 256, s.ff = 256, s.type = t;
      const double err = error_vs_reference(tiny(s), 19, s.vocab);
      INFO(ggml_type_info(t).name << " " << arch << ": max relative logit error " << err);
      CHECK(err < 5e-2);
    }
  }
}

TEST_CASE("MoE experts read from their decode-layout copies give the GGML layout's logits, bit for bit", "[moe]") {
  // On AVX2 hosts (every type here, groups of 8) and AVX-512 hosts (Q8_0 and Q4_K here, groups of
  // 16) each expert's rows of a packed stacked matrix serve as a packed matrix of their own (ff and
  // dim multiples of the group); elsewhere nothing is packed and the two runs are the same.
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q3_K}) {
    for (const char* arch : {"llama", "qwen2moe"}) {
      INFO(ggml_type_info(t).name << " " << arch);
      TinyModelSpec s = moe_spec(arch, 4, 2, 43);
      s.dim = 256, s.ff = 256, s.type = t;
      const gguf::GgufFile f = tiny(s);
      const auto ids = some_tokens(21, s.vocab, 4);
      // A 17-token prefill (the prefill tile), then 4 one-token steps (the decode kernels).
      std::vector<float> packed, ggml, step;
      for (auto [pack, out] : {std::pair{DecodePack::On, &packed}, std::pair{DecodePack::Off, &ggml}}) {
        auto m = load(f, 2, pack);
        m->forward(plan_of({Part{&ids, 0, 17, {9, 3, 17, 0, 5, 30, 2, 8}}}), *out);
        for (int i = 17; i < 21; ++i) {
          m->forward(plan_of({Part{&ids, i, i + 1, {9, 3, 17, 0, 5, 30, 2, 8}}}), step);
          out->insert(out->end(), step.begin(), step.end());
        }
      }
      CHECK(packed == ggml);
    }
  }
}

TEST_CASE("MoE forward is batch invariant: a mixed step equals each sequence alone, bit for bit", "[moe]") {
  for (const char* arch : {"llama", "qwen2moe", "qwen3moe"}) {
    INFO(arch);
    TinyModelSpec s = moe_spec(arch, 5, 2, 51);
    s.type = GgmlType::Q8_0;
    s.dim = 64;
    const gguf::GgufFile f = tiny(s);
    const auto a = some_tokens(13, s.vocab, 1), b = some_tokens(9, s.vocab, 2), c = some_tokens(6, s.vocab, 3);
    const std::vector<Part> parts = {Part{&a, 0, 13, {0, 1, 2, 3}}, Part{&b, 0, 9, {10, 11, 12}},
                                     Part{&c, 0, 6, {20, 21}}};
    std::vector<std::vector<float>> alone(3);
    for (size_t i = 0; i < 3; ++i) load(f, 1)->forward(plan_of({parts[i]}), alone[i]);
    std::vector<float> together;
    load(f, 2)->forward(plan_of(parts), together);
    std::vector<float> joined;
    for (const auto& v : alone) joined.insert(joined.end(), v.begin(), v.end());
    CHECK(together == joined);
  }
}

TEST_CASE("make-model writes MoE files the engine and the reference read alike", "[moe]") {
  for (Arch arch : {Arch::Llama, Arch::Qwen2Moe, Arch::Qwen3Moe}) {
    ModelSpec spec;
    spec.arch = arch;
    spec.n_layers = 2, spec.dim = 64, spec.ff_dim = 96, spec.n_heads = 4, spec.n_kv_heads = 2;
    spec.type = GgmlType::F32;
    spec.seed = 7;
    spec.expert_ff_dim = 64;
    if (arch == Arch::Llama) spec.n_experts = 4, spec.n_experts_used = 2;  // qwen*moe: 8, 2 used
    const gguf::GgufFile f = gguf::GgufFile::from_bytes(build_model(spec, {}, 1).to_bytes(), "moe.gguf");
    const ModelConfig c = ModelConfig::from_gguf(f);
    INFO(arch_name(arch));
    CHECK(c.n_experts == (arch == Arch::Llama ? 4 : kQwen2MoeExperts));
    CHECK(c.n_experts_used == kDefaultExpertsUsed);
    CHECK(c.expert_ff_dim == 64);
    CHECK(c.ff_dim == (arch == Arch::Llama ? 64 : 96));  // llama: the experts' width, as in Mixtral
    CHECK(c.shared_expert_ff_dim == (arch == Arch::Qwen2Moe ? 96 : 0));
    CHECK(c.expert_weights_norm == (arch != Arch::Qwen2Moe));
    CHECK(c.qk_norm == (arch == Arch::Qwen3Moe));
    CHECK(c.qkv_bias == (arch == Arch::Qwen2Moe));
    CHECK(f.find_tensor("blk.1.ffn_gate_exps.weight")->dims == std::vector<int64_t>{64, c.expert_ff_dim, c.n_experts});
    CHECK(f.find_tensor("blk.0.ffn_gate_inp.weight")->type == GgmlType::F32);
    CHECK(error_vs_reference(f, 17, c.vocab_size) < 1e-4);
  }
  ModelSpec bad;
  bad.n_experts = 2, bad.n_experts_used = 3;
  CHECK_THROWS_WITH(build_model(bad), Catch::Contains("exceeds experts"));
  ModelSpec dense_used;
  dense_used.n_experts_used = 2;
  CHECK_THROWS_WITH(build_model(dense_used), Catch::Contains("need experts"));
  ModelSpec shared_llama;
  shared_llama.n_experts = 4, shared_llama.shared_expert_ff_dim = 64;
  CHECK_THROWS_WITH(build_model(shared_llama), Catch::Contains("qwen2moe"));
  ModelSpec shared_qwen3;
  shared_qwen3.arch = Arch::Qwen3Moe, shared_qwen3.shared_expert_ff_dim = 64;
  CHECK_THROWS_WITH(build_model(shared_qwen3), Catch::Contains("qwen2moe"));
  ModelSpec dense_qwen3;
  dense_qwen3.arch = Arch::Qwen3, dense_qwen3.n_experts = 4;
  CHECK_THROWS_WITH(build_model(dense_qwen3), Catch::Contains("use --arch qwen3moe"));
}

TEST_CASE("inconsistent expert metadata or tensors fail at load, naming the key or tensor", "[moe]") {
  // A valid MoE model rewritten with keys dropped or set, a tensor dropped, or
  // blk.1.ffn_up_exps.weight given other dimensions.
  struct Edit {  // (every member has an initializer: the cases below list only their leading ones)
    std::vector<std::string> drop_keys = {};
    std::string set_key = {};
    uint32_t value = 0;
    std::string drop_tensor = {};
    std::vector<int64_t> up_exps_dims = {};
  };
  const auto variant = [](const TinyModelSpec& s, const Edit& e) {
    const gguf::GgufFile src = tiny(s);
    gguf::GgufWriter w;
    for (const auto& [k, v] : src.metadata())
      if (std::find(e.drop_keys.begin(), e.drop_keys.end(), k) == e.drop_keys.end() && k != e.set_key) w.set(k, v);
    if (!e.set_key.empty()) w.set(e.set_key, gguf::Value::from_u32(e.value));
    for (const auto& t : src.tensors()) {
      if (t.name == e.drop_tensor) continue;
      const uint8_t* d = src.tensor_data(t);
      std::vector<uint8_t> bytes(d, d + ggml_row_size(t.type, t.dims[0]) * size_t(t.n_elements() / t.dims[0]));
      const bool reshaped = !e.up_exps_dims.empty() && t.name == "blk.1.ffn_up_exps.weight";
      w.add_tensor(t.name, reshaped ? e.up_exps_dims : t.dims, t.type, std::move(bytes));
    }
    std::string error = "no error";
    try {
      ModelConfig::from_gguf(gguf::GgufFile::from_bytes(w.to_bytes(), "bad.gguf"));
    } catch (const ModelConfigError& ex) {
      error = ex.what();
    }
    return error;
  };
  const TinyModelSpec llama = moe_spec("llama", 4, 2, 61), qwen = moe_spec("qwen2moe", 4, 2, 62);
  CHECK(variant(llama, {}) == "no error");
  CHECK(variant(qwen, {}) == "no error");
  CHECK_THAT(variant(llama, {{}, "llama.expert_used_count", 5}),
             Catch::Contains("'llama.expert_used_count' is 5, more than expert_count 4"));
  CHECK_THAT(variant(llama, {{"llama.expert_used_count"}}),
             Catch::Contains("missing metadata key 'llama.expert_used_count'"));
  CHECK_THAT(variant(llama, {{"llama.expert_count"}}), Catch::Contains("but the model has no experts"));
  CHECK_THAT(variant(llama, {{}, "llama.expert_count", 0}), Catch::Contains("but the model has no experts"));
  CHECK_THAT(variant(llama, {{"llama.expert_count", "llama.expert_used_count"}}),
             Catch::Contains("holds experts, but the metadata key 'llama.expert_count' is missing"));
  CHECK_THAT(variant(qwen, {{"qwen2moe.expert_count"}}),
             Catch::Contains("missing metadata key 'qwen2moe.expert_count'"));
  const TinyModelSpec qwen3 = moe_spec("qwen3moe", 4, 2, 63);
  CHECK(variant(qwen3, {}) == "no error");
  CHECK_THAT(variant(qwen3, {{"qwen3moe.expert_count"}}),
             Catch::Contains("missing metadata key 'qwen3moe.expert_count'"));
  CHECK_THAT(variant(qwen3, {{}, "", 0, "blk.1.attn_q_norm.weight"}),
             Catch::Contains("missing tensor 'blk.1.attn_q_norm.weight'"));
  CHECK_THAT(variant(llama, {{}, "", 0, "blk.1.ffn_gate_inp.weight"}),
             Catch::Contains("missing tensor 'blk.1.ffn_gate_inp.weight'"));
  CHECK_THAT(variant(qwen, {{}, "", 0, "blk.0.ffn_down_shexp.weight"}),
             Catch::Contains("missing tensor 'blk.0.ffn_down_shexp.weight'"));
  CHECK_THAT(variant(llama, {{}, "", 0, "", {64, 96, 2, 2}}),
             Catch::Contains("tensor 'blk.1.ffn_up_exps.weight' has shape {64, 96, 2, 2}, expected {64, 96, 4}"));
  CHECK_THAT(variant(llama, {{}, "llama.expert_count", 8}),
             Catch::Contains("tensor 'blk.0.ffn_gate_inp.weight' has shape {64, 4}, expected {64, 8}"));
}
