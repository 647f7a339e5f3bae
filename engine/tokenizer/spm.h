// SentencePiece-style BPE ("llama" in GGUF): spaces become U+2581 "▁", a leading "▁" is added,
// adjacent pieces are merged greedily by vocabulary score, and characters with no token fall
// back to byte tokens <0xXX>.
#pragma once

#include "engine/tokenizer/tokenizer_base.h"

namespace pagoda::tok {

class SpmTokenizer final : public TokenizerBase {
 public:
  // Reads the vocabulary (scores, types, byte tokens) and tokenizer.ggml.add_space_prefix
  // (default true). Throws TokenizerError on bad metadata.
  explicit SpmTokenizer(const gguf::GgufFile& file);

 protected:
  void encode_raw(std::string_view text, bool at_start, std::vector<int32_t>& out) const override;
  bool strips_leading_space() const override { return add_space_prefix_; }

 private:
  // The token a merged piece may become: normal and user-defined tokens only (control and
  // unused tokens are never produced from plain text). -1 when none.
  int32_t mergeable(std::string_view piece) const;
  // Appends the byte tokens of `bytes` (the unknown token where a byte token is missing).
  void byte_fallback(std::string_view bytes, std::vector<int32_t>& out) const;
  struct Scratch;
  // Merges the escaped text `s` (one symbol per character) and appends its tokens.
  void encode_segment(std::string_view s, Scratch& sc, std::vector<int32_t>& out) const;

  bool add_space_prefix_ = true;
  // True when no token has "▁" after another character: then no merge can cross the boundary
  // before a word's "▁", and each word can be merged on its own (same result, much faster).
  bool split_words_ = false;
  int32_t byte_token_[256];
};

}  // namespace pagoda::tok
