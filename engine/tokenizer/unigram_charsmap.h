// SentencePiece's precompiled character map (GGUF tokenizer.ggml.precompiled_charsmap): a
// 4-byte little-endian size, then that many bytes of a XOR-compressed compact double array
// (one 32-bit word per node: BASE in bits 10-30 shifted left by 8 when bit 9 is set, the
// label checked in bits 0-7 plus bit 31, the leaf flag in bit 8), then NUL-terminated
// replacement strings that the array's leaves index. The normalizer asks for the longest input
// prefix the array holds and the text that replaces it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace pagoda::tok {

class CharsMap {
 public:
  // Throws TokenizerError when the blob is too short or its array size does not fit.
  explicit CharsMap(std::vector<uint8_t> blob);

  // The longest prefix of s[pos..] the map holds: its byte length (0: none) and replacement.
  // Matching stops at a NUL byte. Throws TokenizerError on an index outside the blob.
  std::pair<size_t, std::string_view> longest_prefix(std::string_view s, size_t pos) const;

 private:
  uint32_t node(size_t i) const;
  std::vector<uint8_t> blob_;
  size_t nodes_ = 0;          // 32-bit words in the array
  size_t strings_ = 0;        // offset of the replacement strings in blob_
};

}  // namespace pagoda::tok
