// SHA-256 (FIPS 180-4) of a byte string: the digest the KV event block hashes are cut from.
// Plain portable C++, one call per message; checked against the standard's test vectors.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace pagoda::kv_events {

std::array<uint8_t, 32> sha256(const uint8_t* data, size_t n);
inline std::array<uint8_t, 32> sha256(std::string_view s) {
  return sha256(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

}  // namespace pagoda::kv_events
