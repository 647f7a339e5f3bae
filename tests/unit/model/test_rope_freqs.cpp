// RoPE frequency factors (GGUF rope_freqs.weight, Llama 3.1+ "llama3" scaling): validation in
// ModelConfig::from_gguf, loading into the Model, the llama3 factors make-model writes (formula
// values, `--rope-freqs llama3`, the llama3.1-8b preset).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include "engine/backend/cpu/backend_cpu.h"
#include "engine/gguf/gguf.h"
#include "engine/model/model.h"
#include "engine/model/model_config.h"
#include "engine/model/model_writer.h"
#include "server/cli/commands.h"
#include "tests/unit/model/reference_model.h"

using namespace pagoda;
using gguf::GgufFile;
using gguf::GgufWriter;
using gguf::Value;

namespace {

// The tiny llama model (head_dim 16: 8 pairs) with `factors` as rope_freqs.weight.
test::TinyModelSpec tiny(std::vector<float> factors = {1, 2, 4, 8, 0.5f, 1, 1, 3}) {
  test::TinyModelSpec s;
  s.rope_freqs = std::move(factors);
  return s;
}

// Copies every key and tensor of `src`, letting `edit_kv` / `edit_tensor` change them first:
// edit_kv(key, value) returns false to drop the key; edit_tensor(name, dims, type, bytes)
// likewise. `extra_kv` is appended.
std::vector<uint8_t> rewrite(
    const std::vector<uint8_t>& src, const std::vector<std::pair<std::string, Value>>& extra_kv,
    const std::function<bool(const std::string&, std::vector<int64_t>&, GgmlType&, std::vector<uint8_t>&)>&
        edit_tensor = {}) {
  const GgufFile f = GgufFile::from_bytes(src);
  GgufWriter w;
  for (const auto& [k, v] : f.metadata()) w.set(k, v);
  for (const auto& [k, v] : extra_kv) w.set(k, v);
  for (const gguf::TensorInfo& t : f.tensors()) {
    std::vector<int64_t> dims = t.dims;
    GgmlType type = t.type;
    std::vector<uint8_t> bytes(f.tensor_data(t), f.tensor_data(t) + t.nbytes);
    if (edit_tensor && !edit_tensor(t.name, dims, type, bytes)) continue;
    w.add_tensor(t.name, dims, type, std::move(bytes));
  }
  return w.to_bytes();
}

ModelConfig config_of(const std::vector<uint8_t>& bytes) {
  return ModelConfig::from_gguf(GgufFile::from_bytes(bytes));
}

// Replaces rope_freqs.weight's values (same shape and type).
std::vector<uint8_t> with_factor_values(const std::vector<float>& values) {
  return rewrite(test::make_tiny_model(tiny()), {},
                 [&](const std::string& name, std::vector<int64_t>&, GgmlType&, std::vector<uint8_t>& b) {
                   if (name == "rope_freqs.weight") std::memcpy(b.data(), values.data(), b.size());
                   return true;
                 });
}

}  // namespace

TEST_CASE("rope_freqs.weight is read into the config; absent means none", "[rope_freqs]") {
  const std::vector<float> f = {1, 2, 4, 8, 0.5f, 1, 1, 3};
  const ModelConfig c = config_of(test::make_tiny_model(tiny(f)));
  CHECK(c.rope_freq_factors == f);
  CHECK(c.rope_freq_scale == 1.0f);
  CHECK(config_of(test::make_tiny_model(test::TinyModelSpec{})).rope_freq_factors.empty());
}

TEST_CASE("bad rope_freqs.weight fails with a message naming the tensor", "[rope_freqs]") {
  using Catch::Matchers::Contains;
  const auto base = test::make_tiny_model(tiny());
  SECTION("wrong length") {
    const auto bytes = rewrite(base, {}, [](const std::string& n, std::vector<int64_t>& d, GgmlType&,
                                            std::vector<uint8_t>& b) {
      if (n == "rope_freqs.weight") {
        d = {7};
        b.resize(7 * sizeof(float));
      }
      return true;
    });
    CHECK_THROWS_WITH(config_of(bytes), Contains("rope_freqs.weight") && Contains("expected {8}"));
  }
  SECTION("not f32") {
    const auto bytes = rewrite(base, {}, [](const std::string& n, std::vector<int64_t>&, GgmlType& t,
                                            std::vector<uint8_t>& b) {
      if (n == "rope_freqs.weight") {
        t = GgmlType::F16;
        b.resize(8 * 2);
      }
      return true;
    });
    CHECK_THROWS_WITH(config_of(bytes), Contains("rope_freqs.weight") && Contains("expected f32"));
  }
  SECTION("zero, negative, infinite or NaN values") {
    for (float bad : {0.0f, -2.0f, std::numeric_limits<float>::infinity(), std::nanf("")}) {
      INFO("value " << bad);
      std::vector<float> v = {1, 2, 4, 8, 0.5f, 1, 1, 3};
      v[5] = bad;
      CHECK_THROWS_WITH(config_of(with_factor_values(v)),
                        Contains("rope_freqs.weight") && Contains("element 5") && Contains("finite and positive"));
    }
  }
  SECTION("the model refuses it too (no silent fallback)") {
    std::vector<float> v(8, 1.0f);
    v[0] = -1;
    const GgufFile f = GgufFile::from_bytes(with_factor_values(v));
    CHECK_THROWS_AS(Model(f, std::make_unique<CpuBackend>(1), 8), ModelConfigError);
  }
}

TEST_CASE("rope scaling types: llama3 needs rope_freqs, unknown types still fail", "[rope_freqs]") {
  using Catch::Matchers::Contains;
  const std::string key = "llama.rope.scaling.type";
  // llama3 with its factors: accepted; its scaling.factor does not also scale positions.
  const ModelConfig c = config_of(rewrite(test::make_tiny_model(tiny()),
                                          {{key, Value::from_string("llama3")},
                                           {"llama.rope.scaling.factor", Value::from_f32(8.0f)}}));
  CHECK(c.rope_freq_factors.size() == 8);
  CHECK(c.rope_freq_scale == 1.0f);
  // llama3 without them: refused, naming the missing tensor.
  CHECK_THROWS_WITH(config_of(rewrite(test::make_tiny_model(test::TinyModelSpec{}),
                                      {{key, Value::from_string("llama3")}})),
                    Contains("llama3") && Contains("rope_freqs.weight"));
  // Types pagoda does not implement keep failing, factors or not.
  for (const char* t : {"yarn", "longrope"}) {
    CHECK_THROWS_WITH(config_of(rewrite(test::make_tiny_model(tiny()), {{key, Value::from_string(t)}})),
                      Contains(std::string("'") + t + "'") && Contains("none, linear, llama3"));
  }
  // Linear scaling and factors combine (llama.cpp applies both).
  const ModelConfig lin = config_of(rewrite(test::make_tiny_model(tiny()),
                                            {{key, Value::from_string("linear")},
                                             {"llama.rope.scaling.factor", Value::from_f32(4.0f)}}));
  CHECK(lin.rope_freq_scale == 0.25f);
  CHECK(lin.rope_freq_factors.size() == 8);
}

TEST_CASE("llama3 rope factors follow Llama 3.1's published scaling", "[rope_freqs]") {
  // Llama 3.1 8B: head_dim 128, base 500000, factor 8, low/high frequency factors 1/4, original
  // context 8192. Wavelengths below 2048 keep their frequency, above 8192 are divided by 8,
  // and in between the divisor moves smoothly from 1 to 8.
  const std::vector<float> f = llama3_rope_freq_factors(128, 500000.0f);
  REQUIRE(f.size() == 64);
  const double pi = 3.14159265358979323846;
  int kept = 0, scaled = 0, smooth = 0;
  for (int i = 0; i < 64; ++i) {
    const double wavelen = 2 * pi * std::pow(500000.0, 2.0 * i / 128);
    INFO("pair " << i << " wavelength " << wavelen << " factor " << f[size_t(i)]);
    if (wavelen < 2048) {
      CHECK(f[size_t(i)] == 1.0f);
      ++kept;
    } else if (wavelen > 8192) {
      CHECK(f[size_t(i)] == 8.0f);
      ++scaled;
    } else {
      // new_freq = (1 - s) freq / 8 + s freq with s = (8192 / wavelen - 1) / 3.
      const double s = (8192 / wavelen - 1) / 3;
      CHECK(f[size_t(i)] == Approx(1.0 / ((1 - s) / 8 + s)).epsilon(1e-6));
      CHECK(f[size_t(i)] > 1.0f);
      CHECK(f[size_t(i)] < 8.0f);
      ++smooth;
    }
    if (i > 0) CHECK(f[size_t(i)] >= f[size_t(i - 1)]);
  }
  // The split of the 64 pairs for these parameters (wavelength 2 pi 500000^(i/64)).
  CHECK(kept == 29);
  CHECK(smooth == 6);
  CHECK(scaled == 29);
  CHECK_THROWS_AS(llama3_rope_freq_factors(7, 10000.0f), ModelSpecError);
}

TEST_CASE("make-model writes rope_freqs: --rope-freqs llama3 and the llama3.1-8b preset", "[rope_freqs]") {
  const auto dir = std::filesystem::temp_directory_path() / ("pagoda-rope-freqs-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string with = (dir / "with.gguf").string(), without = (dir / "without.gguf").string();
  auto run = [](std::vector<std::string> args) {
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    return cli::make_model(static_cast<int>(argv.size()), argv.data());
  };
  const std::vector<std::string> common = {"make-model", "--quiet", "--type", "f32", "--dim", "128",
                                           "--heads", "4", "--kv-heads", "2", "--rope-base", "500000"};
  auto args = common;
  args.insert(args.end(), {"--rope-freqs", "llama3", "--output", with});
  REQUIRE(run(args) == 0);
  args = common;
  args.insert(args.end(), {"--output", without});
  REQUIRE(run(args) == 0);
  args = common;
  args.insert(args.end(), {"--rope-freqs", "yarn", "--output", without});
  CHECK(run(args) == 2);

  const GgufFile a = GgufFile::open(with), b = GgufFile::open(without);
  const ModelConfig ca = ModelConfig::from_gguf(a), cb = ModelConfig::from_gguf(b);
  CHECK(ca.rope_freq_factors == llama3_rope_freq_factors(32, 500000.0f));
  CHECK(cb.rope_freq_factors.empty());
  // The factors are the only difference: every other tensor has the same bytes.
  CHECK(a.tensors().size() == b.tensors().size() + 1);
  for (const gguf::TensorInfo& t : b.tensors()) {
    const gguf::TensorInfo* u = a.find_tensor(t.name);
    REQUIRE(u != nullptr);
    CHECK(std::memcmp(a.tensor_data(*u), b.tensor_data(t), t.nbytes) == 0);
  }
  // The Model loads and runs it, and the scalar reference agrees on a few tokens.
  Model m(a, std::make_unique<CpuBackend>(1), 8);
  m.init_kv_cache(4, 4, GgmlType::F32);
  StepPlan p;
  p.seqs.push_back(SeqInStep{0, 0, 3, 0, 0, 1});
  p.block_tables = {0};
  for (int i = 0; i < 3; ++i) {
    p.tokens.push_back(40 + i);
    p.positions.push_back(i);
    p.slots.push_back(i);
    p.token_seq.push_back(0);
    p.logit_rows.push_back(i);
  }
  std::vector<float> logits;
  m.forward(p, logits);
  const std::vector<double> want = test::ReferenceModel(a).forward({40, 41, 42});
  double mx = 0, err = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    mx = std::max(mx, std::fabs(want[i]));
    err = std::max(err, std::fabs(logits[i] - want[i]));
  }
  CHECK(err / mx < 1e-4);

  const ModelSpec preset = model_preset("llama3.1-8b");
  CHECK(preset.rope_freqs == RopeFreqs::Llama3);
  CHECK(preset.ctx == 131072);
  CHECK(preset.dim == model_preset("llama3-8b").dim);
  std::filesystem::remove_all(dir);
}
