// LoRA in the forward pass: a sequence under an adapter gets the merged model's logits (base
// W + scale * B A, written by make-model's writer) within float tolerance on f32 and q8_0
// bases at ranks 8 and 64, greedy tokens included; a step mixing the base model and three
// adapters gives every row the bits it gets alone; the per-row kernel against a double
// reference; a slot that holds no adapter is refused.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/cpu/backend_cpu.h"
#include "engine/gguf/gguf.h"
#include "engine/lora/lora_adapter.h"
#include "engine/lora/lora_writer.h"
#include "engine/model/model.h"
#include "engine/model/model_writer.h"
#include "kernels/cpu/lora.h"

using namespace pagoda;

namespace {

constexpr int kBlock = 16;

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("pagoda_test_lora_" + name)).string();
}

// A tiny base model written to a file (the adapter writer reads a file), its adapters and their
// merged models.
struct Fixture {
  std::string base_path;
  gguf::GgufFile base;
  std::vector<std::string> adapters, merged;

  Fixture(GgmlType type, std::vector<int> ranks, const std::string& tag) : base_path(temp_path(tag + "_base.gguf")),
                                                                           base(make_base(type, base_path)) {
    for (size_t i = 0; i < ranks.size(); ++i) {
      LoraSpec spec;
      spec.rank = ranks[i];
      spec.alpha = 2.0f * float(ranks[i]);
      spec.seed = 11 + i;
      spec.projections = parse_lora_projections("q,k,v,o,gate,up,down,output");
      adapters.push_back(temp_path(tag + "_ad" + std::to_string(i) + ".gguf"));
      merged.push_back(temp_path(tag + "_merged" + std::to_string(i) + ".gguf"));
      write_random_lora(base, spec, adapters.back(), merged.back());
    }
  }
  ~Fixture() {
    std::error_code ec;
    std::filesystem::remove(base_path, ec);
    for (const auto& p : adapters) std::filesystem::remove(p, ec);
    for (const auto& p : merged) std::filesystem::remove(p, ec);
  }
  static gguf::GgufFile make_base(GgmlType type, const std::string& path) {
    ModelSpec s;
    s.n_layers = 2;
    s.dim = 64;
    s.ff_dim = 128;
    s.n_heads = 4;
    s.n_kv_heads = 2;
    s.type = type;
    s.seed = 5;
    write_model(s, path, {}, 1);
    return gguf::GgufFile::open(path);
  }
};

std::unique_ptr<Model> load(const gguf::GgufFile& f) {
  auto m = std::make_unique<Model>(f, std::make_unique<CpuBackend>(2), 256);
  m->init_kv_cache(64, kBlock, GgmlType::F32);
  return m;
}

std::shared_ptr<const LoraAdapter> adapter(const Model& m, const std::string& path) {
  return LoraAdapter::load(path, "llama", m.lora_targets(), 64);
}

std::vector<int32_t> tokens(int n, int salt) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back((i * 37 + salt * 11 + 3) % 250);
  return t;
}

// One sequence's part of a step: tokens [begin, end) of `ids` on blocks first_block, +1, ...;
// every token a logit row.
struct Part {
  const std::vector<int32_t>* ids;
  int begin, end;
  int first_block;
  int lora;
};

StepPlan plan_of(const std::vector<Part>& parts) {
  StepPlan p;
  for (size_t s = 0; s < parts.size(); ++s) {
    const Part& pt = parts[s];
    SeqInStep q;
    q.seq_id = s + 1;
    q.first_token = p.n_tokens();
    q.n_tokens = pt.end - pt.begin;
    q.n_past = pt.begin;
    q.block_table_offset = int32_t(p.block_tables.size());
    q.n_blocks = (pt.end + kBlock - 1) / kBlock;
    q.lora = pt.lora;
    p.seqs.push_back(q);
    for (int b = 0; b < q.n_blocks; ++b) p.block_tables.push_back(pt.first_block + b);
    for (int i = pt.begin; i < pt.end; ++i) {
      p.logit_rows.push_back(p.n_tokens());
      p.tokens.push_back((*pt.ids)[size_t(i)]);
      p.positions.push_back(i);
      p.slots.push_back((pt.first_block + i / kBlock) * kBlock + i % kBlock);
      p.token_seq.push_back(int32_t(s));
    }
  }
  return p;
}

// Prefill then `decode` steps of one sequence; the logits of every position and the argmax of
// each step. The steps feed back the argmax, or `forced`'s tokens when given (so that a near tie
// under quantization noise cannot send two runs down different paths).
struct Run {
  std::vector<float> logits;
  std::vector<int32_t> greedy;
};

Run run(Model& m, std::vector<int32_t> ids, int lora, int decode, const std::vector<int32_t>* forced = nullptr) {
  Run r;
  std::vector<float> out;
  m.forward(plan_of({{&ids, 0, int(ids.size()), 0, lora}}), out);
  r.logits = out;
  const int64_t vocab = m.config().vocab_size;
  for (int d = 0; d < decode; ++d) {
    const float* last = out.data() + out.size() - size_t(vocab);
    const int32_t t = int32_t(std::max_element(last, last + vocab) - last);
    r.greedy.push_back(t);
    ids.push_back(forced ? (*forced)[size_t(d)] : t);
    m.forward(plan_of({{&ids, int(ids.size()) - 1, int(ids.size()), 0, lora}}), out);
    r.logits.insert(r.logits.end(), out.begin(), out.end());
  }
  return r;
}

// max |got - want| / max |want|.
double rel_err(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  double mx = 0, err = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    mx = std::max(mx, double(std::fabs(want[i])));
    err = std::max(err, double(std::fabs(got[i] - want[i])));
  }
  return err / mx;
}

}  // namespace

TEST_CASE("lora_add_row against a double reference") {
  const int rank = 5, in = 37, out = 11;
  std::vector<float> a(rank * in), b(out * rank), x(in), y(out, 0.5f), scratch(rank);
  for (size_t i = 0; i < a.size(); ++i) a[i] = std::sin(float(i));
  for (size_t i = 0; i < b.size(); ++i) b[i] = std::cos(float(i) * 0.7f);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i % 7) - 3;
  cpu::lora_add_row(a.data(), b.data(), rank, in, out, 0.25f, x.data(), y.data(), scratch.data());
  for (int j = 0; j < out; ++j) {
    double want = 0.5;
    for (int k = 0; k < rank; ++k) {
      double t = 0;
      for (int i = 0; i < in; ++i) t += double(a[k * in + i]) * x[i];
      want += 0.25 * double(b[j * rank + k]) * t;
    }
    CHECK(y[j] == Approx(want).margin(1e-5));
  }
}

TEST_CASE("under an adapter a sequence gets the merged model's logits and greedy tokens") {
  // f32 base: only float rounding separates the two (B (A x) vs (W + s B A) x). q8_0 base: the
  // base matmul quantizes its input row to 8 bits, the merged f32 model does not, hence the
  // tolerance the q8_0 forward tests use against a scalar reference (measured here: 0.028).
  const auto [type, tol] = GENERATE(std::make_pair(GgmlType::F32, 1e-4), std::make_pair(GgmlType::Q8_0, 5e-2));
  Fixture fx(type, {8, 64}, std::string("merge_") + ggml_type_info(type).name);
  auto base = load(fx.base);
  const std::vector<int32_t> prompt = tokens(40, 1);
  for (size_t i = 0; i < fx.adapters.size(); ++i) {
    INFO("adapter " << i);
    base->set_lora(int(i) + 1, adapter(*base, fx.adapters[i]));
    const gguf::GgufFile mf = gguf::GgufFile::open(fx.merged[i]);
    auto merged = load(mf);
    const Run want = run(*merged, prompt, 0, 8);
    const Run got = run(*base, prompt, int(i) + 1, 8, &want.greedy);
    const double err = rel_err(got.logits, want.logits);
    INFO("relative logit error " << err);
    CHECK(err < tol);
    if (type == GgmlType::F32) CHECK(got.greedy == want.greedy);  // so the free-running paths agree
    // The adapter matters: the base model's logits are far from the merged ones.
    const Run base_run = run(*base, prompt, 0, 8, &want.greedy);
    CHECK(rel_err(base_run.logits, want.logits) > 0.2);
  }
}

TEST_CASE("a batch of the base model and three adapters gives each row its bits alone") {
  Fixture fx(GgmlType::F32, {8, 16, 32}, "mixed");
  auto m = load(fx.base);
  for (int i = 0; i < 3; ++i) m->set_lora(i + 1, adapter(*m, fx.adapters[size_t(i)]));
  std::vector<std::vector<int32_t>> ids;
  for (int s = 0; s < 4; ++s) ids.push_back(tokens(20 + 3 * s, s));
  const int64_t vocab = m->config().vocab_size;
  // Alone: each sequence's prefill on its own blocks (4 per sequence).
  std::vector<std::vector<float>> alone(4);
  for (int s = 0; s < 4; ++s) m->forward(plan_of({{&ids[size_t(s)], 0, int(ids[size_t(s)].size()), 4 * s, s}}), alone[size_t(s)]);
  // Together, in another order: adapter 2, base, adapter 3, adapter 1.
  const int order[4] = {2, 0, 3, 1};
  std::vector<Part> parts;
  for (int s : order) parts.push_back({&ids[size_t(s)], 0, int(ids[size_t(s)].size()), 4 * s, s});
  std::vector<float> together;
  m->forward(plan_of(parts), together);
  size_t at = 0;
  for (int s : order) {
    const size_t n = ids[size_t(s)].size() * size_t(vocab);
    INFO("sequence " << s);
    CHECK(std::equal(alone[size_t(s)].begin(), alone[size_t(s)].end(), together.begin() + std::ptrdiff_t(at)));
    at += n;
  }
  // And a decode step of all four together against each alone.
  for (auto& v : ids) v.push_back(7);
  std::vector<float> step_alone, step_all;
  parts.clear();
  for (int s : order) parts.push_back({&ids[size_t(s)], int(ids[size_t(s)].size()) - 1, int(ids[size_t(s)].size()), 4 * s, s});
  m->forward(plan_of(parts), step_all);
  for (size_t k = 0; k < 4; ++k) {
    m->forward(plan_of({parts[k]}), step_alone);
    CHECK(std::equal(step_alone.begin(), step_alone.end(), step_all.begin() + std::ptrdiff_t(k * size_t(vocab))));
  }
}

TEST_CASE("a step naming an empty slot is refused; a cleared slot is empty") {
  Fixture fx(GgmlType::F32, {8}, "slots");
  auto m = load(fx.base);
  const std::vector<int32_t> ids = tokens(5, 0);
  std::vector<float> out;
  CHECK_THROWS_WITH(m->forward(plan_of({{&ids, 0, 5, 0, 1}}), out), Catch::Contains("LoRA slot 1"));
  m->set_lora(1, adapter(*m, fx.adapters[0]));
  CHECK_NOTHROW(m->forward(plan_of({{&ids, 0, 5, 0, 1}}), out));
  m->clear_lora(1);
  CHECK_THROWS_WITH(m->forward(plan_of({{&ids, 0, 5, 0, 1}}), out), Catch::Contains("LoRA slot 1"));
}

TEST_CASE("the targets are the separate dense matrices and the untied output") {
  Fixture fx(GgmlType::F32, {}, "targets");
  auto m = load(fx.base);
  const auto& t = m->lora_targets();
  REQUIRE(t.size() == 2 * 7 + 1);
  CHECK(t[0].name == "blk.0.attn_q.weight");
  CHECK(t[0].rows == 64);
  CHECK(t[0].cols == 64);
  CHECK(t[6].name == "blk.0.ffn_down.weight");
  CHECK(t[6].rows == 64);
  CHECK(t[6].cols == 128);
  CHECK(t.back().name == "output.weight");
}
