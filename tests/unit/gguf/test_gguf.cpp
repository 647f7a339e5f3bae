// GGUF reader/writer: round trip of every value type, tensor layout, validation errors, and
// the real vocabulary files in testdata.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include "engine/gguf/gguf.h"
#include "tests/support/testdata.h"

using namespace pagoda;
using namespace pagoda::gguf;

namespace {

Value scalar(ValueType t, int64_t i, double f = 0) {
  Value v;
  v.type = t;
  v.i = i;
  v.f = f;
  return v;
}

Value int_array(ValueType elem, std::vector<int64_t> xs) {
  Value v;
  v.type = ValueType::ARRAY;
  v.elem_type = elem;
  v.arr_int = std::move(xs);
  return v;
}

Value float_array(ValueType elem, std::vector<double> xs) {
  Value v;
  v.type = ValueType::ARRAY;
  v.elem_type = elem;
  v.arr_float = std::move(xs);
  return v;
}

std::vector<uint8_t> bytes_of(size_t n, uint8_t seed) {
  std::vector<uint8_t> b(n);
  for (size_t k = 0; k < n; ++k) b[k] = uint8_t(seed + k * 7);
  return b;
}

void require_same(const Value& a, const Value& b) {
  REQUIRE(a.type == b.type);
  if (a.type == ValueType::ARRAY) {
    REQUIRE(a.elem_type == b.elem_type);
    REQUIRE(a.arr_int == b.arr_int);
    REQUIRE(a.arr_float == b.arr_float);
    REQUIRE(a.arr_str == b.arr_str);
    REQUIRE(a.arr_nested.size() == b.arr_nested.size());
    for (size_t k = 0; k < a.arr_nested.size(); ++k) require_same(a.arr_nested[k], b.arr_nested[k]);
  } else {
    REQUIRE(a.i == b.i);
    REQUIRE(a.f == b.f);
    REQUIRE(a.s == b.s);
  }
}

std::string error_of(std::vector<uint8_t> bytes) {
  try {
    GgufFile::from_bytes(std::move(bytes), "t.gguf");
  } catch (const GgufError& e) {
    return e.what();
  }
  return "";
}

template <typename T>
void patch(std::vector<uint8_t>& b, size_t at, T v) {
  std::memcpy(b.data() + at, &v, sizeof(T));
}

}  // namespace

TEST_CASE("every scalar and array value type round-trips") {
  std::vector<std::pair<std::string, Value>> kv = {
      {"u8", scalar(ValueType::UINT8, 250)},
      {"i8", scalar(ValueType::INT8, -120)},
      {"u16", scalar(ValueType::UINT16, 65000)},
      {"i16", scalar(ValueType::INT16, -32000)},
      {"u32", Value::from_u32(4000000000u)},
      {"i32", Value::from_i32(-2000000000)},
      {"u64", Value::from_u64(18000000000000000000ull)},
      {"i64", scalar(ValueType::INT64, -9000000000000000000ll)},
      {"f32", Value::from_f32(1.5f)},
      {"f64", scalar(ValueType::FLOAT64, 0, 3.141592653589793)},
      {"bool_t", Value::from_bool(true)},
      {"bool_f", Value::from_bool(false)},
      {"str", Value::from_string("héllo\nworld")},
      {"empty_str", Value::from_string("")},
      {"a_u8", int_array(ValueType::UINT8, {0, 1, 255})},
      {"a_i8", int_array(ValueType::INT8, {-128, 0, 127})},
      {"a_u16", int_array(ValueType::UINT16, {0, 65535})},
      {"a_i16", int_array(ValueType::INT16, {-32768, 32767})},
      {"a_u32", int_array(ValueType::UINT32, {0, 4294967295ll})},
      {"a_i32", Value::i32_array({-5, 6, 7})},
      {"a_u64", int_array(ValueType::UINT64, {0, -1})},
      {"a_i64", int_array(ValueType::INT64, {-1, 1ll << 62})},
      {"a_bool", int_array(ValueType::BOOL, {1, 0, 1})},
      {"a_f32", Value::f32_array({0.5, -2.25})},
      {"a_f64", float_array(ValueType::FLOAT64, {1e300, -1e-300})},
      {"a_str", Value::string_array({"a", "", "ccc"})},
      {"a_empty", Value::string_array({})},
  };
  Value nested;
  nested.type = ValueType::ARRAY;
  nested.elem_type = ValueType::ARRAY;
  nested.arr_nested = {Value::i32_array({1, 2}), Value::string_array({"x"})};
  kv.emplace_back("a_nested", nested);

  GgufWriter w;
  for (const auto& [k, v] : kv) w.set(k, v);
  GgufFile f = GgufFile::from_bytes(w.to_bytes());
  REQUIRE(f.version() == 3);
  REQUIRE(f.alignment() == 32);
  REQUIRE(f.metadata().size() == kv.size());
  for (size_t k = 0; k < kv.size(); ++k) {
    INFO(kv[k].first);
    REQUIRE(f.metadata()[k].first == kv[k].first);
    require_same(f.metadata()[k].second, kv[k].second);
  }
  CHECK(f.get_int("u64") == int64_t(18000000000000000000ull));
  CHECK(f.get_string("str") == "héllo\nworld");
  CHECK(f.get_float("u8") == 250.0);
  CHECK(f.get_bool("bool_t") == true);
  CHECK(*f.get_string_array("a_str") == std::vector<std::string>{"a", "", "ccc"});
  CHECK(f.get_int_array("a_bool")->size() == 3);
  CHECK(f.get_float_array("a_f32")->at(1) == -2.25);
  CHECK_FALSE(f.get_int("missing").has_value());
  CHECK(f.get_string_array("missing") == nullptr);
  CHECK_THROWS_AS(f.get_string("u8"), GgufError);
  CHECK_THROWS_AS(f.get_int("str"), GgufError);
  CHECK_THROWS_AS(f.get_bool("u8"), GgufError);
  CHECK_THROWS_AS(f.get_int_array("a_str"), GgufError);
  CHECK_THROWS_WITH(f.get_string_array("a_f32"), Catch::Contains("a_f32"));
}

TEST_CASE("set replaces an existing key in place") {
  GgufWriter w;
  w.set("a", Value::from_u32(1));
  w.set("b", Value::from_u32(2));
  w.set("a", Value::from_string("x"));
  GgufFile f = GgufFile::from_bytes(w.to_bytes());
  REQUIRE(f.metadata().size() == 2);
  CHECK(f.metadata()[0].first == "a");
  CHECK(f.get_string("a") == "x");
}

TEST_CASE("tensors round-trip with both add_tensor forms, aligned") {
  for (uint32_t alignment : {32u, 64u, 1u}) {
    GgufWriter w(alignment);
    w.set("general.architecture", Value::from_string("llama"));
    auto a = bytes_of(3 * 5 * 4, 1);
    w.add_tensor("a", {5, 3}, GgmlType::F32, a);
    w.add_tensor("b", {64, 2}, GgmlType::Q8_0, [](uint8_t* dst, size_t n) {
      for (size_t k = 0; k < n; ++k) dst[k] = uint8_t(k * 3);
    });
    auto c = bytes_of(7 * 2, 9);
    w.add_tensor("c", {7}, GgmlType::F16, c);
    auto bytes = w.to_bytes();
    GgufFile f = GgufFile::from_bytes(bytes);
    REQUIRE(f.alignment() == alignment);
    REQUIRE(f.tensors().size() == 3);
    const TensorInfo* ta = f.find_tensor("a");
    REQUIRE(ta != nullptr);
    CHECK(ta->dims == std::vector<int64_t>{5, 3});
    CHECK(ta->type == GgmlType::F32);
    CHECK(ta->nbytes == 60);
    CHECK(ta->n_elements() == 15);
    CHECK(std::memcmp(f.tensor_data(*ta), a.data(), a.size()) == 0);
    const TensorInfo* tb = f.find_tensor("b");
    REQUIRE(tb->nbytes == 2 * 2 * 34);
    for (size_t k = 0; k < tb->nbytes; ++k) REQUIRE(f.tensor_data(*tb)[k] == uint8_t(k * 3));
    const TensorInfo* tc = f.find_tensor("c");
    CHECK(std::memcmp(f.tensor_data(*tc), c.data(), c.size()) == 0);
    for (const auto& t : f.tensors()) CHECK(t.offset % alignment == 0);
    CHECK(f.find_tensor("nope") == nullptr);
  }
}

TEST_CASE("write() to a file and open() through mmap give the same bytes as to_bytes()") {
  GgufWriter w;
  w.set("general.name", Value::from_string("file test"));
  w.add_tensor("t", {32, 4}, GgmlType::F32, bytes_of(32 * 4 * 4, 5));
  auto path = (std::filesystem::temp_directory_path() / "pagoda_test_gguf_write.gguf").string();
  w.write(path);
  {
    GgufFile f = GgufFile::open(path);
    CHECK(f.path() == path);
    CHECK(f.get_string("general.name") == "file test");
    const TensorInfo* t = f.find_tensor("t");
    REQUIRE(t != nullptr);
    auto expect = bytes_of(32 * 4 * 4, 5);
    CHECK(std::memcmp(f.tensor_data(*t), expect.data(), expect.size()) == 0);
    GgufFile moved = std::move(f);
    CHECK(moved.tensors().size() == 1);
  }
  std::FILE* fp = std::fopen(path.c_str(), "rb");
  std::vector<uint8_t> disk(1 << 16);
  disk.resize(std::fread(disk.data(), 1, disk.size(), fp));
  std::fclose(fp);
  CHECK(disk == w.to_bytes());
  std::filesystem::remove(path);
  CHECK_THROWS_WITH(GgufFile::open(path), Catch::Contains("cannot open"));

  // A filler that fails leaves neither the file nor the temporary behind.
  GgufWriter bad;
  bad.add_tensor("t", {4}, GgmlType::F32, [](uint8_t*, size_t) { throw std::runtime_error("boom"); });
  CHECK_THROWS_WITH(bad.write(path), "boom");
  CHECK_FALSE(std::filesystem::exists(path));
  CHECK_FALSE(std::filesystem::exists(path + ".partial"));
  CHECK_THROWS_WITH(w.write("/nonexistent-dir/x.gguf"), Catch::Contains("cannot create"));
}

TEST_CASE("writer refuses inconsistent tensors") {
  GgufWriter w;
  CHECK_THROWS_AS(w.add_tensor("x", {33}, GgmlType::Q8_0, std::vector<uint8_t>(34)), GgufError);
  CHECK_THROWS_AS(w.add_tensor("x", {4}, GgmlType::F32, std::vector<uint8_t>(15)), GgufError);
  CHECK_THROWS_AS(w.add_tensor("x", {0}, GgmlType::F32, std::vector<uint8_t>()), GgufError);
  CHECK_THROWS_AS(w.add_tensor("x", {1, 1, 1, 1, 1}, GgmlType::F32, std::vector<uint8_t>(4)), GgufError);
  w.add_tensor("x", {4}, GgmlType::F32, std::vector<uint8_t>(16));
  CHECK_THROWS_AS(w.add_tensor("x", {4}, GgmlType::F32, std::vector<uint8_t>(16)), GgufError);
  CHECK_THROWS_AS(w.set("general.alignment", Value::from_u32(64)), GgufError);
  CHECK_THROWS_AS(GgufWriter(48), GgufError);
}

TEST_CASE("reader errors name the problem and the offset") {
  GgufWriter w;
  w.set("k", Value::from_u32(7));
  w.add_tensor("t", {32}, GgmlType::F32, bytes_of(128, 0));
  const auto good = w.to_bytes();
  REQUIRE_NOTHROW(GgufFile::from_bytes(good));
  // Layout: magic 0, version 4, n_tensors 8, n_kv 16, key len 24, key 32, type 33, value 37,
  // tensor name len 41, name 49, n_dims 50, dim 54, type 62, offset 66, end 74.
  auto b = good;
  b[0] = 'X';
  CHECK_THAT(error_of(b), Catch::Contains("bad magic") && Catch::Contains("at offset 0"));
  b = good;
  patch<uint32_t>(b, 4, 7);
  CHECK_THAT(error_of(b), Catch::Contains("unsupported GGUF version 7"));
  b = good;
  patch<uint32_t>(b, 4, 2);
  CHECK(error_of(b).empty());  // v2 has the same layout
  b = good;
  patch<uint64_t>(b, 16, 1ull << 60);
  CHECK_THAT(error_of(b), Catch::Contains("metadata count"));
  b = good;
  patch<uint64_t>(b, 8, 1ull << 40);
  CHECK_THAT(error_of(b), Catch::Contains("tensor count"));
  b = good;
  patch<uint64_t>(b, 24, 1ull << 62);
  CHECK_THAT(error_of(b), Catch::Contains("key length") && Catch::Contains("at offset 24"));
  b = good;
  patch<uint32_t>(b, 33, 13);
  CHECK_THAT(error_of(b), Catch::Contains("unknown value type 13") && Catch::Contains("at offset 33"));
  b = good;
  patch<uint32_t>(b, 50, 5);
  CHECK_THAT(error_of(b), Catch::Contains("5 dimensions"));
  b = good;
  patch<uint64_t>(b, 54, 0);
  CHECK_THAT(error_of(b), Catch::Contains("must be positive"));
  b = good;
  patch<uint32_t>(b, 62, 4);
  CHECK_THAT(error_of(b), Catch::Contains("unknown type id 4") && Catch::Contains("at offset 62"));
  b = good;
  patch<uint32_t>(b, 62, uint32_t(GgmlType::Q4_K));
  CHECK_THAT(error_of(b), Catch::Contains("not a multiple of the q4_k block size"));
  b = good;
  patch<uint64_t>(b, 66, 8);
  CHECK_THAT(error_of(b), Catch::Contains("not a multiple of the alignment"));
  b = good;
  patch<uint64_t>(b, 66, 32);
  CHECK_THAT(error_of(b), Catch::Contains("past the end of the file"));
  b = good;
  patch<uint64_t>(b, 54, 1ull << 62);
  CHECK_THAT(error_of(b), Catch::Contains("byte size overflows"));
  b = good;
  b.resize(b.size() - 1);
  CHECK_THAT(error_of(b), Catch::Contains("past the end of the file"));
  CHECK_THAT(error_of({}), Catch::Contains("truncated"));
}

TEST_CASE("duplicate keys, duplicate tensors, bad alignment and deep nesting are refused") {
  GgufWriter w;
  w.set("aa", Value::from_u32(1));
  w.set("bb", Value::from_u32(2));
  auto b = w.to_bytes();
  // Rename "bb" to "aa": key 2 starts after key 1 (8 + 2 + 4 + 4 = 18 bytes from 24).
  b[24 + 18 + 8] = 'a';
  b[24 + 18 + 9] = 'a';
  CHECK_THAT(error_of(b), Catch::Contains("duplicate metadata key 'aa'"));

  GgufWriter wt;
  wt.add_tensor("ta", {1}, GgmlType::F32, std::vector<uint8_t>(4));
  wt.add_tensor("tb", {1}, GgmlType::F32, std::vector<uint8_t>(4));
  b = wt.to_bytes();
  // Second tensor info starts at 24 + (8 + 2 + 4 + 8 + 4 + 8) = 58; its name at 66.
  b[67] = 'a';
  CHECK_THAT(error_of(b), Catch::Contains("duplicate tensor name 'ta'"));

  for (uint32_t bad : {0u, 3u, 48u}) {
    // GgufWriter(64) writes general.alignment first: key at 32, type at 49, value at 53.
    b = GgufWriter(64).to_bytes();
    patch<uint32_t>(b, 24 + 8 + 17 + 4, bad);
    CHECK_THAT(error_of(b), Catch::Contains("general.alignment") && Catch::Contains("power of two"));
  }

  // 2^16 + 1 nested (empty) arrays fit in the file but exceed the cap on decoded arrays.
  {
    Value many;
    many.type = ValueType::ARRAY;
    many.elem_type = ValueType::ARRAY;
    many.arr_nested.assign((1u << 16) + 1, Value::i32_array({}));
    GgufWriter wa;
    wa.set("many", many);
    CHECK_THAT(error_of(wa.to_bytes()), Catch::Contains("more than 65536 nested arrays"));
  }

  Value v = Value::i32_array({1});
  for (int d = 0; d < 20; ++d) {
    Value outer;
    outer.type = ValueType::ARRAY;
    outer.elem_type = ValueType::ARRAY;
    outer.arr_nested = {v};
    v = outer;
  }
  GgufWriter wn;
  wn.set("deep", v);
  CHECK_THAT(error_of(wn.to_bytes()), Catch::Contains("nested deeper"));
}

TEST_CASE("real vocabulary files from testdata parse", "[testdata]") {
  if (!pagoda::testing::testdata_available("vocab")) return;
  std::filesystem::path dir = std::filesystem::path(PAGODA_TESTDATA_DIR) / "vocab";
  if (!std::filesystem::exists(dir)) {
    WARN("no testdata at " << dir);
    return;
  }
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".gguf") continue;
    INFO(e.path());
    GgufFile f = GgufFile::open(e.path().string());
    CHECK(f.get_string("tokenizer.ggml.model").has_value());
    CHECK(f.get_string_array("tokenizer.ggml.tokens")->size() > 1000);
    ++n;
  }
  CHECK(n > 0);
}
