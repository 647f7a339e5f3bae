// Feeds the GGUF reader thousands of corrupted variants of a small valid file: every
// truncation, seeded random byte flips, and absurd lengths/counts patched over every header
// field. Each must either parse (and then describe only bytes inside the file) or throw
// GgufError; anything else (a crash, another exception, a huge allocation) fails the test.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <string>

#include "engine/gguf/gguf.h"

using namespace pagoda;
using namespace pagoda::gguf;

namespace {

std::vector<uint8_t> make_valid_file() {
  GgufWriter w(64);
  w.set("general.architecture", Value::from_string("llama"));
  w.set("general.name", Value::from_string("corruption test"));
  w.set("llama.block_count", Value::from_u32(2));
  w.set("llama.rope.freq_base", Value::from_f32(10000.0f));
  w.set("tokenizer.ggml.tokens", Value::string_array({"<s>", "</s>", "a", "bc", ""}));
  w.set("tokenizer.ggml.scores", Value::f32_array({0.0, -1.0, -2.5}));
  w.set("tokenizer.ggml.token_type", Value::i32_array({3, 3, 1, 1, 1}));
  w.set("flag", Value::from_bool(true));
  w.set("big", Value::from_u64(1ull << 40));
  Value nested;
  nested.type = ValueType::ARRAY;
  nested.elem_type = ValueType::ARRAY;
  nested.arr_nested = {Value::i32_array({1, 2}), Value::string_array({"x", "yz"})};
  w.set("nested", nested);
  auto fill = [](uint8_t* dst, size_t n) {
    for (size_t k = 0; k < n; ++k) dst[k] = uint8_t(k);
  };
  w.add_tensor("token_embd.weight", {32, 3}, GgmlType::Q8_0, fill);
  w.add_tensor("output_norm.weight", {32}, GgmlType::F32, fill);
  w.add_tensor("blk.0.attn_q.weight", {32, 2, 1, 1}, GgmlType::F16, fill);
  return w.to_bytes();
}

struct Outcome {
  int parsed = 0;
  int rejected = 0;
};

// Parses `bytes`; on success checks that every tensor lies inside the image and reads it all.
void try_parse(const std::vector<uint8_t>& bytes, Outcome& out) {
  const size_t size = bytes.size();
  try {
    GgufFile f = GgufFile::from_bytes(bytes, "corrupt.gguf");
    unsigned sum = 0;
    for (const TensorInfo& t : f.tensors()) {
      REQUIRE(t.nbytes <= size);
      REQUIRE(t.offset <= size - t.nbytes);
      const uint8_t* p = f.tensor_data(t);
      for (uint64_t k = 0; k < t.nbytes; ++k) sum += p[k];
    }
    for (const auto& kv : f.metadata()) sum += unsigned(kv.first.size());
    (void)sum;
    ++out.parsed;
  } catch (const GgufError& e) {
    const std::string msg = e.what();
    REQUIRE(msg.rfind("corrupt.gguf: ", 0) == 0);  // names the file ...
    ++out.rejected;
  }
  // ... and any other exception type propagates and fails the test.
}

}  // namespace

TEST_CASE("the valid base file parses") {
  auto good = make_valid_file();
  GgufFile f = GgufFile::from_bytes(good);
  CHECK(f.tensors().size() == 3);
  CHECK(f.alignment() == 64);
  CHECK(f.metadata().size() == 11);
}

TEST_CASE("every truncation is refused with a GgufError") {
  const auto good = make_valid_file();
  Outcome out;
  for (size_t len = 0; len < good.size(); ++len) {
    std::vector<uint8_t> b(good.begin(), good.begin() + long(len));
    try_parse(b, out);
  }
  // The last tensor ends at the end of the file, so no strict prefix is a complete file.
  CHECK(out.parsed == 0);
  CHECK(out.rejected == int(good.size()));
}

TEST_CASE("random byte flips parse or throw GgufError") {
  const auto good = make_valid_file();
  std::mt19937 rng(12345);
  Outcome out;
  for (int variant = 0; variant < 3000; ++variant) {
    auto b = good;
    int flips = 1 + int(rng() % 4);
    for (int k = 0; k < flips; ++k) {
      // Mostly in the header, where the structure lives.
      size_t at = rng() % (variant % 4 == 0 ? b.size() : std::min<size_t>(b.size(), 512));
      b[at] ^= uint8_t(1u << (rng() % 8));
    }
    try_parse(b, out);
  }
  CHECK(out.rejected > 100);
  CHECK(out.parsed + out.rejected == 3000);
}

TEST_CASE("absurd lengths and counts at every header offset parse or throw GgufError") {
  const auto good = make_valid_file();
  const uint64_t absurd64[] = {~0ull, 1ull << 63, 1ull << 62, 1ull << 32, good.size(),
                               good.size() + 1, 0};
  const uint32_t absurd32[] = {~0u, 1u << 31, 13, 9, 5, 0};
  Outcome out;
  for (size_t at = 0; at + 8 <= good.size(); ++at) {
    for (uint64_t v : absurd64) {
      auto b = good;
      std::memcpy(b.data() + at, &v, 8);
      try_parse(b, out);
    }
    for (uint32_t v : absurd32) {
      auto b = good;
      std::memcpy(b.data() + at, &v, 4);
      try_parse(b, out);
    }
  }
  CHECK(out.rejected > 1000);
}
