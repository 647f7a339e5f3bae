#include "engine/kv_events/block_hash.h"

#include "engine/kv_events/sha256.h"

namespace pagoda::kv_events {

namespace {

// A CBOR head: major type (0 unsigned, 3 text, 4 array) and its argument, shortest form.
void head(std::string& out, uint8_t major, uint64_t v) {
  const uint8_t m = uint8_t(major << 5);
  int bytes = 0;
  if (v < 24) {
    out += char(m | v);
    return;
  }
  if (v <= 0xff) out += char(m | 24), bytes = 1;
  else if (v <= 0xffff) out += char(m | 25), bytes = 2;
  else if (v <= 0xffffffffull) out += char(m | 26), bytes = 4;
  else out += char(m | 27), bytes = 8;
  for (int i = bytes - 1; i >= 0; --i) out += char(uint8_t(v >> (8 * i)));
}

uint64_t low64(const std::string& cbor) {
  const auto d = sha256(cbor);
  uint64_t v = 0;
  for (int i = 24; i < 32; ++i) v = v << 8 | d[i];
  return v;
}

}  // namespace

uint64_t root_block_hash(std::string_view seed) {
  std::string cbor;
  head(cbor, 3, seed.size());
  cbor += seed;
  return low64(cbor);
}

uint64_t block_hash(uint64_t parent, const int32_t* tokens, int n, uint64_t extra) {
  std::string cbor;
  head(cbor, 4, 3);
  head(cbor, 0, parent);
  head(cbor, 4, uint64_t(n));
  for (int i = 0; i < n; ++i) head(cbor, 0, uint32_t(tokens[i]));
  if (extra) head(cbor, 0, extra);
  else cbor += char(0xf6);  // null
  return low64(cbor);
}

}  // namespace pagoda::kv_events
