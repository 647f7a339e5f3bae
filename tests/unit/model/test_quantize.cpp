// pagoda quantize (engine/model/model_quantize): the per-tensor plan (fallbacks for rows that do
// not fit a block), metadata kept, every target type loadable; and on the real stories260K model
// (testdata) F16/BF16/Q8_0 re-encodings keep llama.cpp's greedy continuation.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include "engine/backend/cpu/backend_cpu.h"
#include "engine/gguf/gguf.h"
#include "engine/model/model.h"
#include "engine/model/model_quantize.h"
#include "engine/model/model_writer.h"
#include "tests/support/testdata.h"

using namespace pagoda;
namespace fs = std::filesystem;

namespace {

const GgmlType kAllTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0,
                              GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q2_K, GgmlType::Q3_K,
                              GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS};

fs::path temp_file(const std::string& name) {
  return fs::temp_directory_path() / ("pagoda_test_quantize_" + std::to_string(::getpid()) + "_" + name);
}

struct TempFile {
  fs::path path;
  explicit TempFile(const std::string& name) : path(temp_file(name)) {}
  ~TempFile() {
    std::error_code ec;
    fs::remove(path, ec);
  }
};

// Greedy continuation of `prompt` for n tokens, one sequence, f32 KV cache.
std::vector<int32_t> greedy(const gguf::GgufFile& file, const std::vector<int32_t>& prompt, int n) {
  constexpr int kBlock = 16;
  const int total = static_cast<int>(prompt.size()) + n;
  Model model(file, std::make_unique<CpuBackend>(2), 128);
  const int blocks = (total + kBlock - 1) / kBlock;
  model.init_kv_cache(blocks, kBlock, GgmlType::F32);
  std::vector<int32_t> seq = prompt, out, table;
  for (int b = 0; b < blocks; ++b) table.push_back(b);
  std::vector<float> logits;
  int past = 0;
  while (static_cast<int>(out.size()) < n) {
    StepPlan p;
    const int count = static_cast<int>(seq.size()) - past;
    p.seqs.push_back(SeqInStep{0, 0, count, past, 0, blocks});
    p.block_tables = table;
    for (int i = past; i < static_cast<int>(seq.size()); ++i) {
      p.tokens.push_back(seq[size_t(i)]);
      p.positions.push_back(i);
      p.slots.push_back(i);  // blocks are 0, 1, ... in order: slot == position
      p.token_seq.push_back(0);
    }
    p.logit_rows.push_back(count - 1);
    model.forward(p, logits);
    past = static_cast<int>(seq.size());
    const int32_t next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(next);
    seq.push_back(next);
  }
  return out;
}

}  // namespace

TEST_CASE("quantize falls back to a type whose block fits the row, as llama.cpp does") {
  CHECK(quantize_fallback_type(GgmlType::Q4_K, 4096) == GgmlType::Q4_K);
  CHECK(quantize_fallback_type(GgmlType::Q4_K, 96) == GgmlType::Q5_0);
  CHECK(quantize_fallback_type(GgmlType::Q5_K, 96) == GgmlType::Q5_1);
  CHECK(quantize_fallback_type(GgmlType::Q6_K, 96) == GgmlType::Q8_0);
  CHECK(quantize_fallback_type(GgmlType::Q2_K, 96) == GgmlType::IQ4_NL);
  CHECK(quantize_fallback_type(GgmlType::Q3_K, 96) == GgmlType::IQ4_NL);
  CHECK(quantize_fallback_type(GgmlType::IQ4_XS, 96) == GgmlType::IQ4_NL);
  CHECK(quantize_fallback_type(GgmlType::Q4_K, 172) == GgmlType::F16);
  CHECK(quantize_fallback_type(GgmlType::Q8_0, 172) == GgmlType::F16);
  CHECK(quantize_fallback_type(GgmlType::BF16, 172) == GgmlType::BF16);
}

TEST_CASE("quantize re-encodes matrices, keeps 1-D tensors and metadata, and says what fell back") {
  ModelSpec spec;
  spec.n_layers = 1, spec.dim = 256, spec.ff_dim = 96, spec.n_heads = 4, spec.n_kv_heads = 2, spec.ctx = 64;
  spec.type = GgmlType::F32;
  TempFile in("in.gguf");
  write_model(spec, in.path.string());
  const gguf::GgufFile src = gguf::GgufFile::open(in.path.string());
  for (GgmlType t : kAllTypes) {
    INFO(ggml_type_info(t).name);
    TempFile out(std::string(ggml_type_info(t).name) + ".gguf");
    std::map<std::string, TensorPlan> plans;
    uint64_t last_done = 0, last_total = 1;
    quantize_model(in.path.string(), out.path.string(), QuantizeOptions{t, 2},
                   [&](const TensorPlan& p) { plans[p.name] = p; },
                   [&](uint64_t done, uint64_t total) { last_done = done, last_total = total; });
    CHECK(last_done == last_total);
    const gguf::GgufFile q = gguf::GgufFile::open(out.path.string());
    REQUIRE(q.tensors().size() == src.tensors().size());
    for (const auto& ti : q.tensors()) {
      INFO(ti.name);
      const gguf::TensorInfo* orig = src.find_tensor(ti.name);
      REQUIRE(orig != nullptr);
      CHECK(ti.dims == orig->dims);
      const TensorPlan& p = plans.at(ti.name);
      CHECK(p.to == ti.type);
      if (ti.dims.size() == 1) {
        CHECK(ti.type == GgmlType::F32);
        CHECK(std::equal(q.tensor_data(ti), q.tensor_data(ti) + ti.nbytes, src.tensor_data(*orig)));
      } else {
        // ffn_down's rows are ff_dim = 96 long: too short for the 256-element types.
        CHECK(ti.type == quantize_fallback_type(t, ti.dims[0]));
        CHECK(p.note.empty() == (ti.type == t));
      }
    }
    // Every key kept, in order, with general.file_type describing the new type.
    REQUIRE(q.metadata().size() == src.metadata().size());
    for (size_t i = 0; i < q.metadata().size(); ++i) CHECK(q.metadata()[i].first == src.metadata()[i].first);
    CHECK(q.get_int("general.file_type") == static_cast<int64_t>(gguf_file_type(t)));
    CHECK(q.get_string("general.name") == src.get_string("general.name"));
    CHECK(*q.get_string_array("tokenizer.ggml.tokens") == *src.get_string_array("tokenizer.ggml.tokens"));
    // The result loads and runs.
    CHECK(greedy(q, {1, 2, 3}, 2).size() == 2);
  }
}

TEST_CASE("quantize refuses unreadable input without writing anything") {
  TempFile in("garbage.gguf"), out("never.gguf");
  std::ofstream(in.path) << "not a gguf file";
  CHECK_THROWS_AS(quantize_model(in.path.string(), out.path.string(), QuantizeOptions{}), gguf::GgufError);
  CHECK_THROWS_AS(quantize_model((in.path.string() + ".missing"), out.path.string(), QuantizeOptions{}), gguf::GgufError);
  CHECK_FALSE(fs::exists(out.path));
  CHECK_THROWS_AS(quantize_model(in.path.string(), out.path.string(), QuantizeOptions{GgmlType::Q8_1, 1}), ModelSpecError);
}

// Logits after every prefix of `ids` (teacher forcing): [ids.size() x vocab].
std::vector<float> logits_along(const gguf::GgufFile& file, const std::vector<int32_t>& ids) {
  const int n = static_cast<int>(ids.size());
  Model model(file, std::make_unique<CpuBackend>(2), n);
  model.init_kv_cache(1, n, GgmlType::F32);
  StepPlan p;
  p.seqs.push_back(SeqInStep{0, 0, n, 0, 0, 1});
  p.block_tables = {0};
  for (int i = 0; i < n; ++i) {
    p.tokens.push_back(ids[size_t(i)]);
    p.positions.push_back(i);
    p.slots.push_back(i);
    p.token_seq.push_back(0);
    p.logit_rows.push_back(i);
  }
  std::vector<float> logits;
  model.forward(p, logits);
  return logits;
}

// Along llama.cpp's greedy continuation (prompt + first 32 ids), the re-encoded model must pick
// llama.cpp's token at every step. For Q8_0 (which also quantizes activations to int8 in the
// matmul) a step may differ only at a genuine near-tie: where the original F32 model's top-2 gap
// is below twice the largest logit change the re-encoding causes on this text (a flip needs
// gap < change of top-1 + change of top-2); that change itself must stay below 0.5 logit for
// Q8_0 (measured 0.30-0.42 over the 512 logits of these 8 texts) and 0.1 for F16/BF16, which must
// match at every step.
TEST_CASE("stories260K re-encoded to F16, BF16, Q8_0 keeps llama.cpp's first 32 greedy tokens", "[testdata]") {
  if (!testing::testdata_available("models/stories260K.expected.json")) return;
  const std::string model = testing::testdata_path("models/stories260K.gguf").string();
  const auto expected = nlohmann::json::parse(std::ifstream(testing::testdata_path("models/stories260K.expected.json")));
  const gguf::GgufFile f32 = gguf::GgufFile::open(model);
  const int64_t vocab = 512;
  for (GgmlType t : {GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0}) {
    TempFile out(std::string("stories_") + ggml_type_info(t).name + ".gguf");
    quantize_model(model, out.path.string(), QuantizeOptions{t, 2});
    const gguf::GgufFile q = gguf::GgufFile::open(out.path.string());
    for (const auto& c : expected["cases"]) {
      INFO(ggml_type_info(t).name << ": " << c["prompt"].get<std::string>());
      const auto prompt = c["prompt_ids"].get<std::vector<int32_t>>();
      const auto want = c["greedy_ids"].get<std::vector<int32_t>>();
      std::vector<int32_t> ids = prompt;
      ids.insert(ids.end(), want.begin(), want.begin() + 32);
      const auto ref = logits_along(f32, ids), got = logits_along(q, ids);
      REQUIRE(got.size() == ids.size() * vocab);
      double max_change = 0;
      for (size_t i = 0; i < got.size(); ++i) max_change = std::max(max_change, double(std::fabs(got[i] - ref[i])));
      CHECK(max_change < (t == GgmlType::Q8_0 ? 0.5 : 0.1));
      for (int s = 0; s < 32; ++s) {
        const size_t row = (prompt.size() - 1 + size_t(s)) * vocab;
        const auto pick = [&](const std::vector<float>& l) {
          return static_cast<int32_t>(std::max_element(l.begin() + row, l.begin() + row + vocab) - (l.begin() + row));
        };
        REQUIRE(pick(ref) == want[size_t(s)]);  // pagoda's F32 forward agrees with llama.cpp
        if (pick(got) == want[size_t(s)]) continue;
        std::vector<float> top(ref.begin() + row, ref.begin() + row + vocab);
        std::partial_sort(top.begin(), top.begin() + 2, top.end(), std::greater<float>());
        INFO("step " << s << ": F32 top-2 gap " << top[0] - top[1] << ", largest logit change " << max_change);
        CHECK(t == GgmlType::Q8_0);
        CHECK(top[0] - top[1] < 2 * max_change);
      }
    }
  }
}

// Free-running greedy (no teacher forcing), f32 KV cache. F16 and BF16 keep all 64 of llama.cpp's
// ids. Q8_0 keeps >= 32 on 7 of the 8 prompts; on "Mom said" it parts at step 16, where the F32
// model's top-2 gap is 0.032 logit: the Q8_0 matmul rounds the activations to int8 per block of
// 32 (as llama.cpp's Q8_0 x Q8_0 dot does, with f16 scales where pagoda keeps f32 ones), and the
// same Q8_0 weights run with f32 activations (re-encoded to F32) keep all 8 prompts. So a step
// where Q8_0 parts early must be such a near-tie, and must not part with f32 activations. Q4_0
// (state only, not a bar): printed.
TEST_CASE("stories260K re-encoded: free-running greedy ids against llama.cpp's", "[testdata]") {
  if (!testing::testdata_available("models/stories260K.expected.json")) return;
  const std::string model = testing::testdata_path("models/stories260K.gguf").string();
  const auto expected = nlohmann::json::parse(std::ifstream(testing::testdata_path("models/stories260K.expected.json")));
  const gguf::GgufFile f32 = gguf::GgufFile::open(model);
  const auto common_prefix = [](const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
    size_t n = 0;
    while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
    return static_cast<int>(n);
  };
  for (GgmlType t : {GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0}) {
    TempFile out(std::string("free_") + ggml_type_info(t).name + ".gguf");
    quantize_model(model, out.path.string(), QuantizeOptions{t, 2});
    const gguf::GgufFile q = gguf::GgufFile::open(out.path.string());
    std::string kept;
    int at_least_32 = 0;
    for (const auto& c : expected["cases"]) {
      INFO(ggml_type_info(t).name << ": " << c["prompt"].get<std::string>());
      const auto prompt = c["prompt_ids"].get<std::vector<int32_t>>();
      const auto want = c["greedy_ids"].get<std::vector<int32_t>>();
      const int n = common_prefix(greedy(q, prompt, 64), want);
      kept += std::to_string(n) + " ";
      at_least_32 += n >= 32;
      if (t == GgmlType::F16 || t == GgmlType::BF16) CHECK(n == 64);
      if (t != GgmlType::Q8_0 || n >= 32) continue;
      // The early parting: a near-tie of the F32 model, and gone with f32 activations.
      std::vector<int32_t> ids = prompt;
      ids.insert(ids.end(), want.begin(), want.begin() + n);  // the last row predicts step n
      const auto ref = logits_along(f32, ids);
      std::vector<float> top(ref.end() - 512, ref.end());
      std::partial_sort(top.begin(), top.begin() + 2, top.end(), std::greater<float>());
      INFO("step " << n << ": F32 top-2 gap " << top[0] - top[1]);
      CHECK(top[0] - top[1] < 0.05f);
      TempFile deq("free_q8_0_as_f32.gguf");
      quantize_model(out.path.string(), deq.path.string(), QuantizeOptions{GgmlType::F32, 2});
      CHECK(common_prefix(greedy(gguf::GgufFile::open(deq.path.string()), prompt, 32), want) == 32);
    }
    WARN(ggml_type_info(t).name << ": greedy ids equal to llama.cpp's before the first difference, per prompt: "
                                << kept);
    if (t == GgmlType::Q8_0) CHECK(at_least_32 >= 7);
  }
}
