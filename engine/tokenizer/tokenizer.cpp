// Tokenizer::from_gguf and the behaviour shared by all tokenizer kinds.
#include <string>

#include "engine/gguf/gguf.h"
#include "engine/tokenizer/bpe.h"
#include "engine/tokenizer/spm.h"
#include "engine/tokenizer/tokenizer_base.h"
#include "engine/tokenizer/unigram.h"
#include "engine/tokenizer/wordpiece.h"

namespace pagoda {

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const gguf::GgufFile& file) {
  try {
    const auto model = file.get_string("tokenizer.ggml.model");
    if (!model) throw TokenizerError("GGUF file has no tokenizer.ggml.model");
    if (*model == "llama") return std::make_unique<tok::SpmTokenizer>(file);
    if (*model == "gpt2") return std::make_unique<tok::BpeTokenizer>(file);
    if (*model == "bert") return std::make_unique<tok::WordPieceTokenizer>(file);
    if (*model == "t5") return std::make_unique<tok::UnigramTokenizer>(file);
    throw TokenizerError("unsupported tokenizer.ggml.model \"" + *model +
                         "\" (supported: llama, gpt2, bert, t5)");
  } catch (const gguf::GgufError& e) {
    // A tokenizer key with the wrong type: report it as a tokenizer problem.
    throw TokenizerError(std::string("bad tokenizer metadata: ") + e.what());
  }
}

namespace tok {

std::vector<int32_t> TokenizerBase::encode(std::string_view text, bool add_special,
                                           bool parse_special) const {
  return encode_partitioned(text, add_special, parse_special, nullptr);
}

std::vector<int32_t> TokenizerBase::encode_marked(std::string_view text, bool add_special,
                                                  const TextRanges& plain) const {
  return encode_partitioned(text, add_special, true, &plain);
}

std::vector<int32_t> TokenizerBase::encode_partitioned(std::string_view text, bool add_special,
                                                       bool parse_special, const TextRanges* plain) const {
  // Offsets inside the tokenizers are 32-bit; far beyond any context length anyway.
  if (text.size() >= (size_t{1} << 31))
    throw TokenizerError("input of " + std::to_string(text.size()) + " bytes is too large to tokenize");
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (add_special && vocab_.add_bos) out.push_back(vocab_.bos);
  std::vector<Fragment> fragments;
  vocab_.partition(text, parse_special, fragments, plain);
  bool at_start = true;
  for (const Fragment& f : fragments) {
    if (f.token >= 0) {
      out.push_back(f.token);
      at_start = true;
    } else {
      encode_raw(f.text, at_start, out);
      at_start = false;
    }
  }
  if (add_special && vocab_.add_eos) out.push_back(vocab_.eos);
  return out;
}

bool TokenizerBase::is_special_piece(int32_t id) const {
  const TokenType t = vocab_.type(id);
  return t == TokenType::kControl || t == TokenType::kUnknown;
}

std::string TokenizerBase::token_to_piece(int32_t id, bool special) const {
  if (!vocab_.valid(id))
    throw TokenizerError("token id " + std::to_string(id) + " is outside the vocabulary (" +
                         std::to_string(vocab_.size()) + " tokens)");
  if (!special && is_special_piece(id)) return {};
  return pieces_[id];
}

std::string TokenizerBase::decode(const std::vector<int32_t>& ids, bool special) const {
  std::string out;
  bool strip = strips_leading_space();
  for (int32_t id : ids) {
    std::string piece = token_to_piece(id, special);
    if (strip && !is_special_piece(id) && !pieces_[id].empty()) {
      if (piece[0] == ' ') piece.erase(0, 1);
      strip = false;
    }
    out += piece;
  }
  return out;
}

const std::string& TokenizerBase::token_text(int32_t id) const {
  if (!vocab_.valid(id))
    throw TokenizerError("token id " + std::to_string(id) + " is outside the vocabulary (" +
                         std::to_string(vocab_.size()) + " tokens)");
  return vocab_.text(id);
}

bool TokenizerBase::is_control(int32_t id) const {
  return vocab_.valid(id) && vocab_.type(id) == TokenType::kControl;
}

bool TokenizerBase::is_eog(int32_t id) const { return vocab_.valid(id) && vocab_.eog[id]; }

}  // namespace tok
}  // namespace pagoda
