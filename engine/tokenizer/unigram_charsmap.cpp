// CharsMap: reading the double array of a precompiled SentencePiece normalization map.
#include "engine/tokenizer/unigram_charsmap.h"

#include <cstring>
#include <string>

#include "engine/tokenizer/tokenizer.h"

namespace pagoda::tok {

CharsMap::CharsMap(std::vector<uint8_t> blob) : blob_(std::move(blob)) {
  if (blob_.size() < 4) throw TokenizerError("tokenizer.ggml.precompiled_charsmap is shorter than its size field");
  uint32_t size = 0;
  for (int i = 3; i >= 0; --i) size = size << 8 | blob_[size_t(i)];
  if (size % 4 != 0 || size_t(size) + 4 >= blob_.size())
    throw TokenizerError("tokenizer.ggml.precompiled_charsmap: its array of " + std::to_string(size) +
                         " bytes does not fit the " + std::to_string(blob_.size()) + "-byte map");
  nodes_ = size / 4;
  strings_ = 4 + size_t(size);
}

uint32_t CharsMap::node(size_t i) const {
  if (i >= nodes_) throw TokenizerError("tokenizer.ggml.precompiled_charsmap: node index outside the array");
  const uint8_t* p = blob_.data() + 4 + i * 4;
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

std::pair<size_t, std::string_view> CharsMap::longest_prefix(std::string_view s, size_t pos) const {
  auto base = [](uint32_t n) { return (n >> 10) << ((n & (1u << 9)) >> 6); };
  size_t best_len = 0, best_value = 0;
  uint32_t at = base(node(0));
  for (size_t i = pos; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == 0) break;
    at ^= c;
    if (at >= nodes_) break;  // outside the array: no child labelled c
    const uint32_t n = node(at);
    if ((n & ((1u << 31) | 0xFFu)) != c) break;  // not a child labelled c
    const bool leaf = (n >> 8) & 1;
    at ^= base(n);
    if (leaf) {
      best_len = i - pos + 1;
      best_value = node(at) & ((1u << 31) - 1);
    }
  }
  if (best_len == 0) return {0, {}};
  const size_t off = strings_ + best_value;
  if (off >= blob_.size()) throw TokenizerError("tokenizer.ggml.precompiled_charsmap: replacement outside the map");
  const char* str = reinterpret_cast<const char*>(blob_.data() + off);
  return {best_len, std::string_view(str, strnlen(str, blob_.size() - off))};
}

}  // namespace pagoda::tok
