// The prefix cache's disk file (engine/core/kv_cache_file.h): round trip; a file written for
// another model, block size, KV element type or RoPE setting is refused with the reason; an
// unfinished write leaves the old file; and a few hundred truncations and byte mutations of a
// good file are all refused, never crash and never yield a block.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "engine/core/kv_cache_file.h"

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
  l.kv_type = 1;  // F16
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
      {"KV element type 1 (this server: 0)", [](KvCacheLayout& l) { l.kv_type = 0; }},
      {"KV element type 1 (this server: 8)", [](KvCacheLayout& l) { l.kv_type = 8; }},
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
