// The architectures beyond llama/qwen2 (qwen3, gemma2, gemma3, phi3) through engine/model on
// the CPU backend against the independent scalar reference (reference_model.cpp): whole
// prefills (chunked, scrambled block tables, sequences longer than the sliding window), 64
// greedy decode steps, a quantized type, and the load-time errors of their keys and tensors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "tests/unit/model/forward_test_util.h"

using namespace pagoda;
using namespace pagoda::test;

namespace {

struct ArchCase {
  TinyModelSpec spec;
  const char* what;
};

// Every new architecture with its distinguishing features switched on; windows of 8 so that
// the 23-token prefills and the 64-step decodes run well past them.
std::vector<ArchCase> arch_cases() {
  std::vector<ArchCase> out;
  { TinyModelSpec s; s.arch = "qwen3"; s.seed = 31; out.push_back({s, "qwen3 (per-head Q/K norms)"}); }
  { TinyModelSpec s; s.arch = "gemma2"; s.layers = 3; s.seed = 32; out.push_back({s, "gemma2 (window 8, caps 3/4)"}); }
  { TinyModelSpec s; s.arch = "gemma3"; s.layers = 7; s.local_rope_base = 500; s.rope_base = 1e6f; s.seed = 33;
    out.push_back({s, "gemma3 (5 local : 1 global, local base 500)"}); }
  { TinyModelSpec s; s.arch = "phi3"; s.seed = 34; out.push_back({s, "phi3 (fused, window 8)"}); }
  { TinyModelSpec s; s.arch = "phi3"; s.longrope = true; s.window = 4095; s.seed = 35;
    out.push_back({s, "phi3 LongRoPE (long factors: context 4096 > 1024)"}); }
  { TinyModelSpec s; s.arch = "qwen3moe"; s.experts = 6; s.experts_used = 2; s.expert_ff = 32; s.seed = 36;
    out.push_back({s, "qwen3moe (Q/K norms, 2 of 6 experts renormalized)"}); }
  return out;
}

double check_against_reference(const TinyModelSpec& spec, GgmlType kv_type, int n_tokens) {
  Loaded l = load(spec, kv_type);
  const auto ids = some_tokens(n_tokens, spec.vocab, 1);
  const int first = n_tokens / 2 + 1;
  const auto got = prefill(*l.model, ids, {first, n_tokens - first}, blocks({9, 3, 17, 0, 5, 30, 2, 8}));
  return rel_err(got, ReferenceModel(l.file).forward(ids));
}

int argmax(const double* v, int n) { return int(std::max_element(v, v + n) - v); }
int argmax(const float* v, int n) { return int(std::max_element(v, v + n) - v); }

}  // namespace

TEST_CASE("new architectures: f32 forward matches the scalar reference", "[model][arch]") {
  for (const ArchCase& c : arch_cases()) {
    const double err = check_against_reference(c.spec, GgmlType::F32, 23);
    INFO(c.what << ": max relative logit error " << err);
    CHECK(err < 1e-4);
  }
}

TEST_CASE("new architectures: the features are not no-ops", "[model][arch]") {
  // The reference with the window removed (or the caps) differs: the tests above would notice a
  // kernel that ignored them.
  TinyModelSpec s;
  s.arch = "gemma2";
  s.layers = 3;
  s.seed = 32;
  Loaded l = load(s, GgmlType::F32);
  const auto ids = some_tokens(23, s.vocab, 1);
  const auto got = prefill(*l.model, ids, {23}, blocks({0, 1, 2, 3, 4, 5}));
  TinyModelSpec wide = s;
  wide.window = 4096;
  CHECK(rel_err(got, ReferenceModel(gguf::GgufFile::from_bytes(make_tiny_model(wide))).forward(ids)) > 1e-3);
  TinyModelSpec uncapped = s;
  uncapped.attn_softcap = 1000;
  uncapped.final_softcap = 1000;
  CHECK(rel_err(got, ReferenceModel(gguf::GgufFile::from_bytes(make_tiny_model(uncapped))).forward(ids)) > 1e-3);
  // phi3 LongRoPE: a context within the original one picks the short factors.
  TinyModelSpec p;
  p.arch = "phi3";
  p.longrope = true;
  p.window = 4095;
  p.seed = 35;
  Loaded lp = load(p, GgmlType::F32);
  lp.model->set_context_length(1024);
  const auto short_got = prefill(*lp.model, ids, {23}, blocks({0, 1, 2, 3, 4, 5}));
  CHECK(rel_err(short_got, ReferenceModel(lp.file, 1024).forward(ids)) < 1e-4);
  CHECK(rel_err(short_got, ReferenceModel(lp.file, 4096).forward(ids)) > 1e-3);
}

TEST_CASE("new architectures: 64 greedy decode steps equal the reference's", "[model][arch]") {
  for (const ArchCase& c : arch_cases()) {
    INFO(c.what);
    Loaded l = load(c.spec, GgmlType::F32, 2, 64);
    std::vector<int32_t> ids = some_tokens(5, c.spec.vocab, 2);
    const std::vector<int32_t> table = blocks({7, 1, 12, 3, 20, 5, 9, 30, 2, 14, 25, 0, 11, 19, 4, 28, 6, 22, 8, 31});
    std::vector<float> logits;
    l.model->forward(plan_of({Part{&ids, 0, 5, table}}), logits);
    const int V = c.spec.vocab;
    std::vector<int32_t> engine_ids = ids;
    for (int step = 0; step < 64; ++step) {
      const int n = static_cast<int>(engine_ids.size());
      engine_ids.push_back(argmax(logits.data() + size_t(logits.size() / V - 1) * V, V));
      l.model->forward(plan_of({Part{&engine_ids, n, n + 1, table}}), logits);
    }
    // The reference, greedy on its own logits over the whole sequence each step.
    const ReferenceModel ref(l.file);
    std::vector<int32_t> ref_ids = ids;
    for (int step = 0; step < 64; ++step) {
      const auto all = ref.forward(ref_ids);
      ref_ids.push_back(argmax(all.data() + (ref_ids.size() - 1) * V, V));
    }
    CHECK(engine_ids == ref_ids);
  }
}

TEST_CASE("new architectures: quantized weights stay close to the reference", "[model][arch]") {
  // As in test_model_forward.cpp: Q8_0 matmuls quantize activations to int8 blocks (about 0.5%
  // of a row's RMS per element) and the F16 cache rounds K/V; measured 0.5-2.5% here through
  // the extra norms and caps. Bound 6%: a wrong layout or scale gives errors of order 1.
  for (ArchCase c : arch_cases()) {
    c.spec.dim = 128;
    c.spec.ff = 256;
    c.spec.type = GgmlType::Q8_0;
    const double err = check_against_reference(c.spec, GgmlType::F16, 19);
    INFO(c.what << " Q8_0: max relative logit error " << err);
    CHECK(err < 6e-2);
  }
}

TEST_CASE("new architectures: missing keys and tensors fail at load, naming them", "[model][arch]") {
  using Catch::Matchers::Contains;
  const auto fails_with = [](const TinyModelSpec& s, const std::string& drop_tensor, const std::string& want) {
    gguf::GgufFile f = gguf::GgufFile::from_bytes(make_tiny_model(s));
    gguf::GgufWriter w;
    for (const auto& [key, value] : f.metadata())
      if (key != drop_tensor) w.set(key, value);
    for (const auto& t : f.tensors())
      if (t.name != drop_tensor)
        w.add_tensor(t.name, t.dims, t.type, std::vector<uint8_t>(f.tensor_data(t), f.tensor_data(t) + t.nbytes));
    gguf::GgufFile g = gguf::GgufFile::from_bytes(w.to_bytes());
    CHECK_THROWS_WITH(Model(g, std::make_unique<CpuBackend>(1), 8), Contains(want));
  };
  struct Drop {
    const char* arch;
    bool longrope;
    const char* what;  // a tensor or key, named in the error
  };
  for (const Drop& d : {Drop{"qwen3", false, "blk.1.attn_k_norm.weight"}, Drop{"gemma2", false, "blk.0.post_ffw_norm.weight"},
                        Drop{"gemma3", false, "gemma3.attention.sliding_window"}, Drop{"phi3", false, "blk.0.attn_qkv.weight"},
                        Drop{"phi3", true, "rope_factors_short.weight"}}) {
    TinyModelSpec s;
    s.arch = d.arch;
    s.longrope = d.longrope;
    fails_with(s, d.what, d.what);
  }
}

TEST_CASE("windowed layers over a shared prefix match the reference", "[model][arch][window]") {
  // Sequence B reuses the first three blocks A wrote (prefix sharing) and continues on its own
  // blocks past the window; its logits must be those of B computed alone.
  for (const ArchCase& c : arch_cases()) {
    INFO(c.what);
    Loaded l = load(c.spec, GgmlType::F32);
    const auto a = some_tokens(16, c.spec.vocab, 3);
    std::vector<int32_t> b(a.begin(), a.begin() + 12);
    for (int32_t t : some_tokens(12, c.spec.vocab, 4)) b.push_back(t);
    std::vector<float> ignored, got;
    l.model->forward(plan_of({Part{&a, 0, 16, blocks({4, 9, 2, 6})}}), ignored);
    l.model->forward(plan_of({Part{&b, 12, 24, blocks({4, 9, 2, 11, 15, 1})}}), got);
    const auto want = ReferenceModel(l.file).forward(b);
    const std::vector<double> tail(want.end() - 12 * c.spec.vocab, want.end());
    CHECK(rel_err(got, tail) < 1e-4);
  }
}

TEST_CASE("a K shift rotates each layer with its own RoPE (gemma3 local layers)", "[model][arch][window]") {
  TinyModelSpec s;
  s.arch = "gemma3";
  s.layers = 7;
  s.local_rope_base = 500;
  s.rope_base = 1e6f;
  Loaded l = load(s, GgmlType::F32);
  const auto ids = some_tokens(8, s.vocab, 5);
  std::vector<float> logits;
  l.model->forward(plan_of({Part{&ids, 0, 8, blocks({3, 5})}}), logits);
  const ModelConfig& c = l.model->config();
  const size_t n = size_t(kBlock) * c.n_kv_heads * c.head_dim;
  const auto read_k = [&](int layer) {
    std::vector<float> k(n), v(n);
    l.model->backend().read_kv_block(layer, 5, k.data(), v.data());
    return k;
  };
  std::vector<std::vector<float>> before;
  for (int layer = 0; layer < c.n_layers; ++layer) before.push_back(read_k(layer));
  StepPlan shift;
  shift.k_shifts.push_back(KShift{5, -3});
  l.model->forward(shift, logits);
  const int hd = c.head_dim, half = hd / 2;
  for (int layer = 0; layer < c.n_layers; ++layer) {
    const double base = layer % 6 == 5 ? 1e6 : 500.0;  // layer 5 is the global one
    const std::vector<float> now = read_k(layer);
    double err = 0;
    for (size_t row = 0; row < n / size_t(hd); ++row)
      for (int i = 0; i < half; ++i) {  // NeoX halves (i, i + hd/2)
        const double th = -3.0 * std::pow(base, -2.0 * i / hd);
        const double a = before[size_t(layer)][row * hd + i], b = before[size_t(layer)][row * hd + i + half];
        err = std::max(err, std::fabs(now[row * hd + i] - (a * std::cos(th) - b * std::sin(th))));
        err = std::max(err, std::fabs(now[row * hd + i + half] - (a * std::sin(th) + b * std::cos(th))));
      }
    INFO("layer " << layer << ": max K error " << err);
    CHECK(err < 2e-5);
  }
}

TEST_CASE("windowed models: chunked prefill and batch mates change no bit", "[model][arch][window]") {
  // phi3 (window 8, no caps): rows within the window take the vectorised kernel, rows past it the
  // windowed one, each by its own context, so how the tokens are chunked or batched is invisible.
  for (const char* arch : {"phi3", "gemma3"}) {
    INFO(arch);
    TinyModelSpec s;
    s.arch = arch;
    s.layers = arch == std::string("gemma3") ? 6 : 2;
    s.type = GgmlType::Q8_0;
    s.dim = 128;
    s.ff = 256;
    Loaded l = load(s, GgmlType::F16);
    const auto ids = some_tokens(21, s.vocab, 6);
    const auto one = prefill(*l.model, ids, {21}, blocks({0, 1, 2, 3, 4, 5}));
    CHECK(one == prefill(*l.model, ids, {5, 3, 13}, blocks({6, 7, 8, 9, 10, 11})));
    CHECK(one == prefill(*l.model, ids, {1, 7, 1, 12}, blocks({12, 13, 14, 15, 16, 17})));
    const auto other = some_tokens(30, s.vocab, 7);
    std::vector<float> both;
    l.model->forward(plan_of({Part{&other, 0, 30, blocks({18, 19, 20, 21, 22, 23, 24, 25})},
                              Part{&ids, 0, 21, blocks({26, 27, 28, 29, 30, 31})}}),
                     both);
    CHECK(std::vector<float>(both.end() - one.size(), both.end()) == one);
  }
}
