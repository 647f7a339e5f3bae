// LoraAdapter: reads llama.cpp's adapter layout (orientation, alpha/rank scale, type
// conversion, skipped norm tensors), its content key, and refuses each kind of bad file with the
// key or tensor named.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "engine/gguf/gguf.h"
#include "engine/lora/lora_adapter.h"
#include "kernels/cpu/quants.h"

using namespace pagoda;

namespace {

const std::vector<LoraTarget> kTargets = {{"blk.0.attn_q.weight", 8, 16}, {"output.weight", 32, 16}};

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

std::vector<float> ramp(size_t n, float step) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = step * static_cast<float>(static_cast<int>(i % 13) - 6);
  return v;
}

struct Builder {
  gguf::GgufWriter w;
  Builder(const std::string& type = "adapter", const std::string& adapter_type = "lora", const std::string& arch = "llama",
          float alpha = 8.0f) {
    w.set("general.architecture", gguf::Value::from_string(arch));
    if (!type.empty()) w.set("general.type", gguf::Value::from_string(type));
    if (!adapter_type.empty()) w.set("adapter.type", gguf::Value::from_string(adapter_type));
    w.set("adapter.lora.alpha", gguf::Value::from_f32(alpha));
  }
  // A pair for a [rows x cols] target at `rank`: lora_a dims {cols, rank}, lora_b {rank, rows}.
  Builder& pair(const std::string& target, int64_t rows, int64_t cols, int64_t rank, float step = 0.01f) {
    w.add_tensor(target + ".lora_a", {cols, rank}, GgmlType::F32, f32_bytes(ramp(size_t(cols * rank), step)));
    w.add_tensor(target + ".lora_b", {rank, rows}, GgmlType::F32, f32_bytes(ramp(size_t(rank * rows), step * 2)));
    return *this;
  }
  std::shared_ptr<const LoraAdapter> load(int max_rank = 64) {
    const gguf::GgufFile f = gguf::GgufFile::from_bytes(w.to_bytes(), "ad.gguf");
    return LoraAdapter::from_file(f, "llama", kTargets, max_rank);
  }
};

// The refusal's message, which must name `what`.
std::string refusal(Builder& b, int max_rank = 64) {
  try {
    b.load(max_rank);
  } catch (const LoraError& e) {
    return e.what();
  }
  FAIL("the adapter was accepted");
  return "";
}

}  // namespace

TEST_CASE("an adapter in llama.cpp's layout: pairs in target order, orientation, scale alpha/rank") {
  Builder b;
  b.pair("output.weight", 32, 16, 4).pair("blk.0.attn_q.weight", 8, 16, 2);
  b.w.add_tensor("blk.0.attn_norm.weight", {16}, GgmlType::F32, f32_bytes(std::vector<float>(16, 1.0f)));  // skipped
  auto a = b.load();
  REQUIRE(a->pairs().size() == 2);
  const LoraPair& q = a->pairs()[0];
  CHECK(q.target == "blk.0.attn_q.weight");
  CHECK(q.rank == 2);
  CHECK(q.rows == 8);
  CHECK(q.cols == 16);
  CHECK(q.scale == Approx(8.0f / 2));
  CHECK(q.a.size() == 2 * 16);  // A: [rank x in], GGUF row k = ggml's ne0 run of `in` values
  CHECK(q.b.size() == 8 * 2);   // B: [out x rank]
  CHECK(q.a[17] == Approx(0.01f * float(17 % 13 - 6)));
  CHECK(a->find("output.weight")->scale == Approx(2.0f));
  CHECK(a->max_rank() == 4);
  CHECK(a->alpha() == 8.0f);
}

TEST_CASE("alpha 0 means scale 1; f16 tensors are read through their type") {
  Builder b("adapter", "lora", "llama", 0.0f);
  std::vector<float> av = ramp(16 * 2, 0.25f), bv = ramp(2 * 8, 0.5f);
  std::vector<uint8_t> a16(av.size() * 2), b16(bv.size() * 2);
  cpu::quantize_row(GgmlType::F16, av.data(), a16.data(), int64_t(av.size()));
  cpu::quantize_row(GgmlType::F16, bv.data(), b16.data(), int64_t(bv.size()));
  b.w.add_tensor("blk.0.attn_q.weight.lora_a", {16, 2}, GgmlType::F16, a16);
  b.w.add_tensor("blk.0.attn_q.weight.lora_b", {2, 8}, GgmlType::F16, b16);
  auto a = b.load();
  CHECK(a->pairs()[0].scale == 1.0f);
  CHECK(a->pairs()[0].a == av);  // quarter steps are exact in f16
  CHECK(a->pairs()[0].b == bv);
}

TEST_CASE("the content key follows the values and alpha, not the file") {
  auto key = [](float step, float alpha) {
    Builder b("adapter", "lora", "llama", alpha);
    b.pair("blk.0.attn_q.weight", 8, 16, 2, step);
    return b.load()->content_key();
  };
  CHECK(key(0.01f, 8) == key(0.01f, 8));
  CHECK(key(0.01f, 8) != key(0.02f, 8));
  CHECK(key(0.01f, 8) != key(0.01f, 4));
  CHECK(key(0.01f, 8) != 0);
}

TEST_CASE("a bad adapter is refused with the key or tensor named") {
  SECTION("a model, not an adapter") {
    Builder b("", "lora");
    b.pair("blk.0.attn_q.weight", 8, 16, 2);
    CHECK_THAT(refusal(b), Catch::Contains("general.type"));
  }
  SECTION("another adapter type") {
    Builder b("adapter", "control_vector");
    b.pair("blk.0.attn_q.weight", 8, 16, 2);
    CHECK_THAT(refusal(b), Catch::Contains("adapter.type"));
  }
  SECTION("another architecture") {
    Builder b("adapter", "lora", "qwen2");
    b.pair("blk.0.attn_q.weight", 8, 16, 2);
    CHECK_THAT(refusal(b), Catch::Contains("general.architecture") && Catch::Contains("qwen2"));
  }
  SECTION("a negative alpha") {
    Builder b("adapter", "lora", "llama", -1.0f);
    b.pair("blk.0.attn_q.weight", 8, 16, 2);
    CHECK_THAT(refusal(b), Catch::Contains("adapter.lora.alpha"));
  }
  SECTION("a lora_a without its lora_b") {
    Builder b;
    b.w.add_tensor("blk.0.attn_q.weight.lora_a", {16, 2}, GgmlType::F32, f32_bytes(ramp(32, 0.1f)));
    CHECK_THAT(refusal(b), Catch::Contains("blk.0.attn_q.weight.lora_b"));
  }
  SECTION("a tensor of another kind") {
    Builder b;
    b.pair("blk.0.attn_q.weight", 8, 16, 2);
    b.w.add_tensor("blk.0.attn_q.weight", {16, 8}, GgmlType::F32, f32_bytes(ramp(128, 0.1f)));
    CHECK_THAT(refusal(b), Catch::Contains("'blk.0.attn_q.weight'"));
  }
  SECTION("a matrix the base model does not have (or cannot adapt)") {
    Builder b;
    b.pair("blk.7.attn_q.weight", 8, 16, 2);
    CHECK_THAT(refusal(b), Catch::Contains("blk.7.attn_q.weight"));
  }
  SECTION("a shape that does not fit the base matrix") {
    Builder b;
    b.pair("blk.0.attn_q.weight", 8, 12, 2);
    CHECK_THAT(refusal(b), Catch::Contains("blk.0.attn_q.weight.lora_a") && Catch::Contains("{12, 2}"));
  }
  SECTION("ranks that disagree (a transposed lora_a)") {
    Builder b;
    b.w.add_tensor("blk.0.attn_q.weight.lora_a", {16, 2}, GgmlType::F32, f32_bytes(ramp(32, 0.1f)));
    b.w.add_tensor("blk.0.attn_q.weight.lora_b", {3, 8}, GgmlType::F32, f32_bytes(ramp(24, 0.1f)));
    CHECK_THAT(refusal(b), Catch::Contains("blk.0.attn_q.weight.lora_b") && Catch::Contains("rank"));
  }
  SECTION("a rank above the limit") {
    Builder b;
    b.pair("blk.0.attn_q.weight", 8, 16, 4);
    CHECK_THAT(refusal(b, 2), Catch::Contains("blk.0.attn_q.weight.lora_a") && Catch::Contains("--max-lora-rank 2"));
  }
  SECTION("a non-finite value") {
    Builder b;
    std::vector<float> av = ramp(32, 0.1f);
    av[5] = std::numeric_limits<float>::quiet_NaN();
    b.w.add_tensor("blk.0.attn_q.weight.lora_a", {16, 2}, GgmlType::F32, f32_bytes(av));
    b.w.add_tensor("blk.0.attn_q.weight.lora_b", {2, 8}, GgmlType::F32, f32_bytes(ramp(16, 0.1f)));
    CHECK_THAT(refusal(b), Catch::Contains("blk.0.attn_q.weight.lora_a") && Catch::Contains("non-finite"));
  }
  SECTION("no pairs at all") {
    Builder b;
    CHECK_THAT(refusal(b), Catch::Contains("no .lora_a"));
  }
}

TEST_CASE("a missing or malformed file is a LoraError naming the path") {
  try {
    LoraAdapter::load("/nonexistent/ad.gguf", "llama", kTargets, 64);
    FAIL("loaded");
  } catch (const LoraError& e) {
    CHECK_THAT(std::string(e.what()), Catch::Contains("/nonexistent/ad.gguf"));
  }
}
