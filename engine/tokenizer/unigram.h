// Unigram ("t5" in GGUF), the SentencePiece model of T5, XLM-RoBERTa and bge-m3 vocabularies:
// every token has a score (its log probability), and a text is cut into the sequence of
// vocabulary pieces with the highest total score (Viterbi over byte offsets, stepping one code
// point at a time). Before that the text is normalized: the precompiled character map the
// file may carry (tokenizer.ggml.precompiled_charsmap, SentencePiece's NFKC-like table) rewrites
// the longest matching prefixes, spaces become U+2581 "▁", a "▁" is put in front
// (tokenizer.ggml.add_space_prefix) and runs of spaces collapse to one
// (tokenizer.ggml.remove_extra_whitespaces). A code point no piece covers becomes the unknown
// token, scored 10 below the lowest normal score; consecutive unknown tokens merge into one.
// Defaults as llama.cpp reads these files: EOS 1, UNK 2, PAD 0, no BOS; EOS added, BOS not.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer/tokenizer_base.h"

namespace pagoda::tok {

class PrefixTrie;
class CharsMap;

class UnigramTokenizer final : public TokenizerBase {
 public:
  // Throws TokenizerError on bad metadata (ids outside the vocabulary, a malformed charsmap).
  explicit UnigramTokenizer(const gguf::GgufFile& file);
  ~UnigramTokenizer() override;

  // The normalized form of `text` that the search runs over (exposed for tests).
  std::string normalize(std::string_view text) const;

 protected:
  void encode_raw(std::string_view text, bool at_start, std::vector<int32_t>& out) const override;
  bool strips_leading_space() const override { return add_space_prefix_; }

 private:
  bool add_space_prefix_ = false, remove_extra_spaces_ = false;
  double unknown_score_ = 0;
  std::unique_ptr<PrefixTrie> pieces_;         // normal, user-defined and unused tokens
  TokenTextMatcher user_defined_;              // kept as they are by the normalizer
  std::unique_ptr<CharsMap> charsmap_;         // null when the file has none
};

}  // namespace pagoda::tok
