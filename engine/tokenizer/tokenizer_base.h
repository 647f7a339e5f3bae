// What the SPM and byte-level BPE tokenizers share: the vocabulary, special-token handling
// around the model-specific algorithm, and per-token decoded pieces.
#pragma once

#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/vocab.h"

namespace pagoda::tok {

class TokenizerBase : public Tokenizer {
 public:
  // Splits off special / user-defined tokens, runs encode_raw() on the text between them, and
  // adds BOS/EOS when `add_special` and the vocabulary asks for them.
  std::vector<int32_t> encode(std::string_view text, bool add_special,
                              bool parse_special) const override;
  std::vector<int32_t> encode_marked(std::string_view text, bool add_special,
                                     const TextRanges& plain) const override;
  std::string token_to_piece(int32_t id, bool special = false) const override;
  // Concatenated pieces. When strips_leading_space(), the first token with a non-empty plain
  // piece (control tokens excluded) loses one leading space: the one encoding added.
  std::string decode(const std::vector<int32_t>& ids, bool special = false) const override;

  int32_t vocab_size() const override { return vocab_.size(); }
  const std::string& token_text(int32_t id) const override;
  int32_t bos_id() const override { return vocab_.bos; }
  int32_t eos_id() const override { return vocab_.eos; }
  int32_t eot_id() const override { return vocab_.eot; }
  bool add_bos() const override { return vocab_.add_bos; }
  bool add_eos() const override { return vocab_.add_eos; }
  int32_t sep_id() const override { return vocab_.sep; }
  bool add_sep() const override { return vocab_.add_sep; }
  bool is_control(int32_t id) const override;
  bool is_eog(int32_t id) const override;
  std::vector<std::string> warnings() const override { return warnings_; }

  const Vocab& vocab() const { return vocab_; }

 protected:
  std::vector<int32_t> encode_partitioned(std::string_view text, bool add_special, bool parse_special,
                                          const TextRanges* plain) const;
  explicit TokenizerBase(Vocab vocab) : vocab_(std::move(vocab)) {}

  // Appends the tokens of one run of raw text. `at_start` is true when the text begins the
  // input or follows a special token (SPM adds its leading space there).
  virtual void encode_raw(std::string_view text, bool at_start, std::vector<int32_t>& out) const = 0;
  // Whether decode() removes the leading space that encoding adds (SPM's add_space_prefix).
  virtual bool strips_leading_space() const { return false; }

  // Fills pieces_: the bytes each token decodes to (control/unknown tokens: their text, shown
  // only with `special`; unused tokens: nothing). Called by the constructors of subclasses.
  void set_pieces(std::vector<std::string> pieces) { pieces_ = std::move(pieces); }
  // Whether the piece of `id` is suppressed unless special pieces are asked for.
  bool is_special_piece(int32_t id) const;

  Vocab vocab_;
  std::vector<std::string> warnings_;  // see Tokenizer::warnings()

 private:
  std::vector<std::string> pieces_;
};

}  // namespace pagoda::tok
