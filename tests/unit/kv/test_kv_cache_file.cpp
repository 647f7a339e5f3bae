// The prefix cache's disk file (engine/kv/kv_cache_file.h): round trip; a file written for
// another model, block size, KV element type (of K or of V) or RoPE setting is refused with the
// reason; a version-1 file (one type for K and V) still reads as K = V = that type; an
// unfinished write leaves the old file; and a few hundred truncations and byte mutations of a
// good file are all refused, never crash and never yield a block.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <cstring>
#include <random>
#include <utility>

#include "engine/kv/kv_cache_file.h"

using namespace pagoda;

namespace {

std::string temp_dir() {
  static const std::string dir = [] {
    std::string d = std::filesystem::temp_directory_path().string() + "/pagoda-kvfile-" + std::to_string(::getpid());
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

KvCacheLayout layout() {
  KvCacheLayout l;
  l.model_id = "1234-00112233445566778899aabbccddeeff";
  l.block_size = 4;
  l.kv_type_k = 1;  // F16
  l.kv_type_v = 1;
  l.n_layers = 2;
  l.n_kv_heads = 2;
  l.head_dim = 8;
  l.block_bytes = 2ull * 2 * 4 * 2 * 8 * 2;
  l.rope_dims = 8;
  l.rope_freq_base = 10000;
  l.rope_freq_scale = 1;
  return l;
}

// Three blocks: a chain of two and a second first block.
std::vector<KvFileBlock> sample_blocks(const KvCacheLayout& l) {
  std::vector<KvFileBlock> v(3);
  for (int i = 0; i < 3; ++i) {
    v[i].parent = i == 1 ? 0 : -1;
    for (uint32_t t = 0; t < l.block_size; ++t) v[i].tokens.push_back(static_cast<int32_t>(10 * i + t));
    v[i].bytes.resize(l.block_bytes);
    for (size_t b = 0; b < v[i].bytes.size(); ++b) v[i].bytes[b] = static_cast<uint8_t>(b * 7 + i);
  }
  return v;
}

void write(const std::string& path, const KvCacheLayout& l, const std::vector<KvFileBlock>& blocks) {
  KvCacheFileWriter w(path, l, blocks.size());
  for (const auto& b : blocks) w.add(b.parent, b.tokens.data(), b.bytes.data());
  w.commit();
}

std::vector<uint8_t> slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void spit(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// A file of the current format (2) rewritten as format 1, from before K and V could differ:
// version 1 and no V type in the header (re-checksummed); the blocks are laid out alike.
std::vector<uint8_t> as_version1(const std::vector<uint8_t>& v2) {
  uint32_t len = 0, id_len = 0;
  std::memcpy(&len, v2.data() + 8, 4);
  std::vector<uint8_t> body(v2.begin() + 12, v2.begin() + 12 + len);
  std::memcpy(&id_len, body.data() + 4, 4);
  const uint32_t version = 1;
  std::memcpy(body.data(), &version, 4);
  const size_t v_type_at = 8 + id_len + 8;  // version, id length, id, block size, K type
  body.erase(body.begin() + static_cast<std::ptrdiff_t>(v_type_at), body.begin() + static_cast<std::ptrdiff_t>(v_type_at + 4));
  const auto new_len = static_cast<uint32_t>(body.size());
  uint64_t sum = kv_checksum(v2.data(), 8);  // the magic
  sum = kv_checksum(&new_len, 4, sum);
  sum = kv_checksum(body.data(), body.size(), sum);
  std::vector<uint8_t> out(v2.begin(), v2.begin() + 8);
  const auto put = [&out](const void* p, size_t n) {
    out.insert(out.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n);
  };
  put(&new_len, 4);
  put(body.data(), body.size());
  put(&sum, 8);
  out.insert(out.end(), v2.begin() + 12 + len + 8, v2.end());  // the blocks and the trailer
  return out;
}

}  // namespace

TEST_CASE("a written file reads back block for block") {
  const std::string path = temp_dir() + "/round.pgkv";
  const auto blocks = sample_blocks(layout());
  write(path, layout(), blocks);
  CHECK(verify_kv_cache_file(path, layout()).empty());
  KvCacheFileReader r;
  REQUIRE(r.open(path, layout()).empty());
  REQUIRE(r.blocks() == 3);
  KvFileBlock b;
  for (const auto& want : blocks) {
    REQUIRE(r.next(b));
    CHECK(b.parent == want.parent);
    CHECK(b.tokens == want.tokens);
    CHECK(b.bytes == want.bytes);
  }
  CHECK_FALSE(r.next(b));
  CHECK(r.error().empty());
}

TEST_CASE("a file written for another model, block size, KV type or RoPE is refused, saying why") {
  const std::string path = temp_dir() + "/other.pgkv";
  write(path, layout(), sample_blocks(layout()));
  struct Case {
    const char* why;
    void (*change)(KvCacheLayout&);
  };
  const Case cases[] = {
      {"another model file", [](KvCacheLayout& l) { l.model_id = "1234-ffffffffffffffffffffffffffffffff"; }},
      {"block size 4 (this server: 8)", [](KvCacheLayout& l) { l.block_size = 8; }},
      {"KV element types K f16, V f16 (this server: K f32, V f16)", [](KvCacheLayout& l) { l.kv_type_k = 0; }},
      {"KV element types K f16, V f16 (this server: K f16, V q8_0)", [](KvCacheLayout& l) { l.kv_type_v = 8; }},
      {"KV element types K f16, V f16 (this server: K q8_0, V q8_0)",
       [](KvCacheLayout& l) { l.kv_type_k = l.kv_type_v = 8; }},
      {"(this server: K type 77, V f16)", [](KvCacheLayout& l) { l.kv_type_k = 77; }},
      {"RoPE dims", [](KvCacheLayout& l) { l.rope_freq_base = 500000; }},
      {"other frequency factors", [](KvCacheLayout& l) { l.rope_factors_hash = 42; }},
      {"layers", [](KvCacheLayout& l) { l.n_layers = 3; }},
  };
  for (const Case& c : cases) {
    KvCacheLayout ours = layout();
    c.change(ours);
    const std::string why = verify_kv_cache_file(path, ours);
    INFO(why);
    CHECK(why.find(c.why) != std::string::npos);
  }
}

TEST_CASE("a file with different K and V types reads back; swapped types are refused") {
  const std::string path = temp_dir() + "/mixed.pgkv";
  KvCacheLayout mixed = layout();
  mixed.kv_type_k = 1;  // F16
  mixed.kv_type_v = 8;  // Q8_0
  mixed.block_bytes = 2ull * 4 * 2 * (16 + 10);  // 2 layers, 4 tokens, 2 heads of 8: f16 K, q8_0 V rows
  const auto blocks = sample_blocks(mixed);
  write(path, mixed, blocks);
  CHECK(verify_kv_cache_file(path, mixed).empty());
  KvCacheLayout swapped = mixed;
  std::swap(swapped.kv_type_k, swapped.kv_type_v);
  const std::string why = verify_kv_cache_file(path, swapped);
  INFO(why);
  CHECK(why.find("KV element types K f16, V q8_0 (this server: K q8_0, V f16)") != std::string::npos);
}

TEST_CASE("a version-1 file (one KV type) reads as K = V = that type, and is refused by a mixed cache") {
  const std::string v2 = temp_dir() + "/v2.pgkv", v1 = temp_dir() + "/v1.pgkv";
  const auto blocks = sample_blocks(layout());
  write(v2, layout(), blocks);
  spit(v1, as_version1(slurp(v2)));
  KvCacheFileReader r;
  REQUIRE(r.open(v1, layout()).empty());
  REQUIRE(r.blocks() == 3);
  KvFileBlock b;
  for (const auto& want : blocks) {
    REQUIRE(r.next(b));
    CHECK(b.tokens == want.tokens);
    CHECK(b.bytes == want.bytes);
  }
  CHECK_FALSE(r.next(b));
  CHECK(r.error().empty());
  KvCacheLayout mixed = layout();
  mixed.kv_type_v = 8;
  const std::string why = verify_kv_cache_file(v1, mixed);
  INFO(why);
  CHECK(why.find("KV element types K f16, V f16 (this server: K f16, V q8_0)") != std::string::npos);
}

TEST_CASE("an unfinished write leaves the previous file and no temporary file") {
  const std::string path = temp_dir() + "/atomic.pgkv";
  const auto blocks = sample_blocks(layout());
  write(path, layout(), blocks);
  const auto before = slurp(path);
  {
    KvCacheFileWriter w(path, layout(), 3);
    w.add(blocks[0].parent, blocks[0].tokens.data(), blocks[0].bytes.data());
    // destroyed before commit(): as if the process died mid-save
  }
  CHECK(slurp(path) == before);
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(temp_dir()))
    if (e.path().filename().string().rfind("atomic.pgkv", 0) == 0) ++files;
  CHECK(files == 1);
  CHECK_THROWS_AS(KvCacheFileWriter(temp_dir() + "/no-such-dir/x.pgkv", layout(), 0), std::runtime_error);
}

TEST_CASE("truncated and mutated files are refused, never crash, and yield no block") {
  const std::string good = temp_dir() + "/good.pgkv", bad = temp_dir() + "/bad.pgkv";
  write(good, layout(), sample_blocks(layout()));
  const std::vector<uint8_t> bytes = slurp(good);
  std::mt19937_64 rng(20261123);
  int refused = 0;
  const int kMutations = 400;
  for (int i = 0; i < kMutations; ++i) {
    std::vector<uint8_t> m = bytes;
    switch (i % 4) {
      case 0: m.resize(rng() % m.size()); break;  // truncated anywhere
      case 1: m[rng() % m.size()] ^= static_cast<uint8_t>(1u << (rng() % 8)); break;  // one bit
      case 2:  // a few random bytes
        for (int k = 0; k < 4; ++k) m[rng() % m.size()] = static_cast<uint8_t>(rng());
        break;
      case 3: m.insert(m.begin() + static_cast<std::ptrdiff_t>(rng() % m.size()), static_cast<uint8_t>(rng())); break;
    }
    if (m == bytes) continue;
    spit(bad, m);
    const std::string why = verify_kv_cache_file(bad, layout());
    if (!why.empty()) ++refused;
    else FAIL_CHECK("mutation " << i << " was accepted");
    // Reading it block by block never hands out more than the blocks that check out.
    KvCacheFileReader r;
    if (r.open(bad, layout()).empty()) {
      KvFileBlock b;
      int n = 0;
      while (r.next(b) && n < 10) ++n;
      CHECK(n <= 3);
      CHECK_FALSE(r.error().empty());
    }
  }
  CHECK(refused >= kMutations - 5);  // only a mutation that changed nothing is skipped
  CHECK_FALSE(verify_kv_cache_file(temp_dir() + "/missing.pgkv", layout()).empty());
  std::filesystem::remove_all(temp_dir());
}
