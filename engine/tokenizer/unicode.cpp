#include "engine/tokenizer/unicode.h"

#include <algorithm>
#include <array>
#include <vector>

namespace pagoda::unicode {
namespace {

// Flags of the Basic Multilingual Plane expanded once into a flat table (64 KiB): almost all
// text lives there, and pre-tokenizers ask for the flags of every character.
struct BmpTable {
  std::array<uint16_t, 0x10000> f{};
  BmpTable() {
    for (size_t k = 0; k < detail::kCategoryRunCount; ++k) {
      const uint32_t first = detail::kCategoryRuns[k].first;
      if (first >= 0x10000) break;
      const uint32_t end = k + 1 < detail::kCategoryRunCount
                               ? std::min<uint32_t>(detail::kCategoryRuns[k + 1].first, 0x10000)
                               : 0x10000;
      for (uint32_t cp = first; cp < end; ++cp) f[cp] = detail::kCategoryRuns[k].flags;
    }
  }
};

const BmpTable& bmp() {
  static const BmpTable table;  // immutable after construction
  return table;
}

// Expected length of a sequence from its lead byte; 0 when the byte cannot start one.
inline size_t lead_len(uint8_t b) {
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) return 2;
  if (b >= 0xE0 && b <= 0xEF) return 3;
  if (b >= 0xF0 && b <= 0xF4) return 4;
  return 0;
}

// Whether `b` may follow `lead` as the second byte (excludes overlongs, surrogates, > U+10FFFF).
inline bool second_ok(uint8_t lead, uint8_t b) {
  if ((b & 0xC0) != 0x80) return false;
  if (lead == 0xE0) return b >= 0xA0;
  if (lead == 0xED) return b < 0xA0;
  if (lead == 0xF0) return b >= 0x90;
  if (lead == 0xF4) return b < 0x90;
  return true;
}

}  // namespace

uint16_t flags(uint32_t cp) {
  if (cp < 0x10000) return bmp().f[cp];
  if (cp > 0x10FFFF) return 0;
  const auto* begin = detail::kCategoryRuns;
  const auto* end = detail::kCategoryRuns + detail::kCategoryRunCount;
  const auto* it = std::upper_bound(begin, end, cp, [](uint32_t v, const detail::CategoryRun& r) {
    return v < r.first;
  });
  return it == begin ? 0 : (it - 1)->flags;
}

uint32_t decode(std::string_view s, size_t pos, size_t& len) {
  const auto b0 = static_cast<uint8_t>(s[pos]);
  len = 1;
  if (b0 < 0x80) return b0;
  const size_t n = lead_len(b0);
  if (n == 0 || pos + n > s.size()) return kInvalid;
  const auto b1 = static_cast<uint8_t>(s[pos + 1]);
  if (!second_ok(b0, b1)) return kInvalid;
  uint32_t cp = (b0 & (0x7F >> n)) << 6 | (b1 & 0x3F);
  for (size_t k = 2; k < n; ++k) {
    const auto b = static_cast<uint8_t>(s[pos + k]);
    if ((b & 0xC0) != 0x80) return kInvalid;
    cp = cp << 6 | (b & 0x3F);
  }
  len = n;
  return cp;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | cp >> 6);
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | cp >> 12);
    out += static_cast<char>(0x80 | (cp >> 6 & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | cp >> 18);
    out += static_cast<char>(0x80 | (cp >> 12 & 0x3F));
    out += static_cast<char>(0x80 | (cp >> 6 & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

size_t complete_prefix_len(std::string_view s) {
  // Only the last (up to 3) bytes can be the start of an unfinished sequence.
  const size_t lo = s.size() > 3 ? s.size() - 3 : 0;
  for (size_t start = s.size(); start-- > lo;) {
    const auto b = static_cast<uint8_t>(s[start]);
    if ((b & 0xC0) == 0x80) continue;  // continuation byte: look further back
    const size_t n = lead_len(b);
    if (n <= 1 || start + n <= s.size()) return s.size();  // ASCII, invalid, or complete
    // A lead byte whose sequence is cut short: hold it back only if what is there so far
    // can still become valid.
    bool viable = start + 1 >= s.size() || second_ok(b, static_cast<uint8_t>(s[start + 1]));
    for (size_t k = start + 2; viable && k < s.size(); ++k)
      viable = (static_cast<uint8_t>(s[k]) & 0xC0) == 0x80;
    return viable ? start : s.size();
  }
  return s.size();
}

bool is_valid_utf8(std::string_view s) {
  for (size_t pos = 0; pos < s.size();) {
    size_t len = 0;
    if (decode(s, pos, len) == kInvalid) return false;
    pos += len;
  }
  return true;
}

std::string sanitize_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) {
    size_t len = 0;
    if (decode(s, pos, len) == kInvalid) {
      // One U+FFFD per maximal subpart: a lead byte and the continuation bytes that could
      // still have followed it (the Unicode recommendation).
      const auto b0 = static_cast<uint8_t>(s[pos]);
      const size_t n = lead_len(b0);
      if (n >= 2 && pos + 1 < s.size() && second_ok(b0, static_cast<uint8_t>(s[pos + 1]))) {
        len = 2;
        while (len < n && pos + len < s.size() &&
               (static_cast<uint8_t>(s[pos + len]) & 0xC0) == 0x80)
          ++len;
      }
      out += "\xEF\xBF\xBD";
    } else {
      out.append(s.substr(pos, len));
    }
    pos += len;
  }
  return out;
}

uint32_t byte_to_cp(uint8_t b) {
  // Bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF are printable and map to themselves; the other
  // 68 bytes are numbered in byte order from U+0100.
  auto printable = [](unsigned v) {
    return (v >= 0x21 && v <= 0x7E) || (v >= 0xA1 && v <= 0xAC) || (v >= 0xAE && v <= 0xFF);
  };
  if (printable(b)) return b;
  uint32_t n = 0;
  for (unsigned v = 0; v < b; ++v)
    if (!printable(v)) ++n;
  return 0x100 + n;
}

int cp_to_byte(uint32_t cp) {
  static const std::vector<int> inverse = [] {
    std::vector<int> inv(0x144, -1);
    for (unsigned b = 0; b < 256; ++b) inv[byte_to_cp(static_cast<uint8_t>(b))] = static_cast<int>(b);
    return inv;
  }();
  return cp < inverse.size() ? inverse[cp] : -1;
}

}  // namespace pagoda::unicode
