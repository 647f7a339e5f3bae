// The byte-level pieces of the KV event stream: SHA-256 on the FIPS 180-4 vectors, msgpack's
// shortest encodings, and the block hashes on fixed examples. The expected hashes were computed
// independently (Python's hashlib over CBOR written by hand from RFC 8949), following llm-d's
// ChunkedTokenDatabase: low 64 bits of SHA-256 over canonical CBOR of [parent, tokens, extra].
#include <catch2/catch.hpp>

#include <numeric>
#include <vector>

#include "engine/kv_events/block_hash.h"
#include "engine/kv_events/msgpack_writer.h"
#include "engine/kv_events/sha256.h"

using namespace pagoda::kv_events;

namespace {
std::string hex(const std::string& bytes) {
  static const char* d = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) out += d[c >> 4], out += d[c & 15];
  return out;
}
std::string hex(const std::array<uint8_t, 32>& a) { return hex(std::string(a.begin(), a.end())); }
}  // namespace

TEST_CASE("sha256 matches the standard's vectors") {
  CHECK(hex(sha256("")) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(hex(sha256("abc")) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(hex(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")) ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(hex(sha256(std::string(1000, 'a'))) == "41edece42d63e8d9bf515a9ba6932e1c20cbc9f5a5d134645adb5db1b9737ea3");
}

TEST_CASE("msgpack values take their shortest encoding") {
  MsgpackWriter w;
  w.uint(5);
  w.uint(200);
  w.uint(70000);
  w.uint(0xb2d4f55f6847e50cull);
  w.int64(-1);
  w.int64(-200);
  w.nil();
  w.str("BlockStored");
  w.array(2);
  w.float64(1.5);
  CHECK(hex(w.bytes()) ==
        "05" "ccc8" "ce00011170" "cfb2d4f55f6847e50c" "ff" "d1ff38" "c0" "ab426c6f636b53746f726564" "92"
        "cb3ff8000000000000");
  MsgpackWriter big;
  big.array(16);
  big.str(std::string(40, 'x'));
  CHECK(hex(big.bytes()).substr(0, 10) == "dc0010d928");
}

TEST_CASE("block hashes follow the indexer's definition on fixed examples") {
  // The root: SHA-256 of CBOR "" (0x60); with a seed, of that text.
  CHECK(root_block_hash("") == 0x0ad38662763f13d3ull);
  CHECK(root_block_hash("42") == 0xa74ffcc4f31c1780ull);
  std::vector<int32_t> a(16);
  std::iota(a.begin(), a.end(), 1);
  const uint64_t h1 = block_hash(root_block_hash(""), a.data(), 16);
  CHECK(h1 == 0xb2d4f55f6847e50cull);
  // Token ids of every CBOR width (1-byte, 2-byte, 4-byte heads) and a zero.
  std::vector<int32_t> b = {300, 70000, 5, 0};
  for (int t = 1000; t < 1012; ++t) b.push_back(t);
  CHECK(block_hash(h1, b.data(), 16) == 0xb2f54d5fcd50f71bull);
  // An adapter's extra key changes the hash.
  CHECK(block_hash(root_block_hash(""), a.data(), 16, 12345) == 0x8dc95fa1d9271134ull);
}
