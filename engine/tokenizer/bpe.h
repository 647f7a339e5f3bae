// Byte-level BPE ("gpt2" in GGUF): the pre-tokenizer named by tokenizer.ggml.pre splits text
// into words; each word's bytes start as single-byte tokens (GPT-2 byte -> code point map) and
// adjacent pairs are merged in merge-rank order (tokenizer.ggml.merges).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/tokenizer/pretokenize.h"
#include "engine/tokenizer/tokenizer_base.h"

namespace pagoda::tok {

// Merge rules keyed by the pair of token ids: an open-addressing hash table, so that looking
// up a pair during encoding neither hashes strings nor allocates.
class MergeTable {
 public:
  struct Merge {
    int32_t rank = -1;    // position in tokenizer.ggml.merges; lower merges first
    int32_t result = -1;  // the token the pair becomes
  };
  void build(const std::vector<std::pair<uint64_t, Merge>>& merges);
  // The merge of (left, right), or rank -1 when the pair does not merge.
  Merge find(int32_t left, int32_t right) const;
  size_t size() const { return count_; }

 private:
  static uint64_t key(int32_t l, int32_t r) {
    return static_cast<uint64_t>(static_cast<uint32_t>(l)) << 32 | static_cast<uint32_t>(r);
  }
  std::vector<uint64_t> keys_;
  std::vector<Merge> values_;
  uint64_t mask_ = 0;
  size_t count_ = 0;
};

class BpeTokenizer final : public TokenizerBase {
 public:
  // Reads the vocabulary, merges and pre-tokenizer. Throws TokenizerError on an unknown
  // tokenizer.ggml.pre or malformed merges. encode() throws TokenizerError for input bytes the
  // vocabulary has no token for (real vocabularies lack some bytes that valid UTF-8 never uses).
  explicit BpeTokenizer(const gguf::GgufFile& file);

  const PreTokenizer& pre_tokenizer() const { return pre_; }
  size_t merge_count() const { return merges_.size(); }

 protected:
  void encode_raw(std::string_view text, bool at_start, std::vector<int32_t>& out) const override;

 private:
  // Reusable buffers for one encode call (no allocation per word or per merge).
  struct Scratch;
  void encode_word(std::string_view word, Scratch& sc, std::vector<int32_t>& out) const;

  PreTokenizer pre_;
  MergeTable merges_;
  int32_t byte_token_[256];  // the single-byte token of each byte, -1 when there is none
  int32_t unk_for_bytes_ = -1;  // stands in for a byte with no token; -1: such bytes are errors
};

}  // namespace pagoda::tok
