// WordPiece ("bert" in GGUF), the tokenizer of BERT-family encoders: the text is normalized
// (accents stripped, lowercased, control characters dropped), split on whitespace, and each
// punctuation character, ASCII symbol and CJK ideograph becomes a word of its own; each word
// is then cut greedily into the longest vocabulary pieces from the left. GGUF stores a
// word-initial piece with a leading U+2581 "▁" and a continuation piece bare (Hugging Face's
// "##" prefix removed), so the search runs over "▁" + word. A word with any part that has no
// piece becomes the unknown token. Special tokens: [CLS] first and [SEP] last.
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/tokenizer/tokenizer_base.h"

namespace pagoda::tok {

class WordPieceTokenizer final : public TokenizerBase {
 public:
  // Reads the vocabulary; BOS/EOS default to tokenizer.ggml.cls_token_id /
  // seperator_token_id and both are added. Throws TokenizerError on bad metadata.
  explicit WordPieceTokenizer(const gguf::GgufFile& file);

  // The words the normalizer makes of `text` (exposed for tests).
  static std::vector<std::string> split_words(std::string_view text);

 protected:
  void encode_raw(std::string_view text, bool at_start, std::vector<int32_t>& out) const override;
  bool strips_leading_space() const override { return true; }
};

namespace detail {
// A run of code points [first, last] mapped to `target` (the accent table: every one maps to
// target; the lowercase table: first + k maps to target + k).
struct CodepointRun {
  uint32_t first, last, target;
};
extern const CodepointRun kStripAccentRuns[];
extern const size_t kStripAccentRunsCount;
extern const CodepointRun kLowercaseRuns[];
extern const size_t kLowercaseRunsCount;
}  // namespace detail

}  // namespace pagoda::tok
