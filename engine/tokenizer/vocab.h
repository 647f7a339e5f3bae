// The vocabulary shared by every tokenizer kind: token texts, types and scores from GGUF
// `tokenizer.ggml.*`, special token ids, and the matcher that finds special/user-defined token
// text inside raw input before the model-specific algorithm runs.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/tokenizer/tokenizer.h"

namespace pagoda::gguf { class GgufFile; }

namespace pagoda::tok {

// GGUF `tokenizer.ggml.token_type` values.
enum class TokenType : uint8_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// Finds the token texts it holds inside a string: at each position the longest one starting
// there, scanning left to right (the "leftmost-longest" rule Hugging Face uses for added tokens).
class TokenTextMatcher {
 public:
  void add(std::string_view text, int32_t id);
  // Length and id of the longest token text starting at `pos`; {0, -1} when none.
  std::pair<size_t, int32_t> match_at(std::string_view s, size_t pos) const;
  bool empty() const { return nodes_.size() <= 1; }

 private:
  struct Node {
    int32_t token = -1;  // token whose text ends here
  };
  std::vector<Node> nodes_{Node{}};
  std::unordered_map<uint64_t, int32_t> edges_;  // (node << 8 | byte) -> child node
  bool first_byte_[256] = {};
};

// Token text -> id: an open-addressing hash table over the vocabulary's own strings (text is
// looked up for every candidate merge, so this avoids std::hash and node-based buckets).
class TokenIndex {
 public:
  // Indexes `texts`; find() must be given the same vector (the index keeps no pointer to it,
  // so the owner may move).
  void build(const std::vector<std::string>& texts);
  // The lowest id whose text is exactly `s`, or -1.
  int32_t find(std::string_view s, const std::vector<std::string>& texts) const;

 private:
  static uint64_t hash(std::string_view s);
  std::vector<int32_t> slots_;     // token id, -1 when empty
  std::vector<uint32_t> tags_;     // upper hash bits of the slot's text, to skip most compares
  uint64_t mask_ = 0;
};

// Whitespace handling around an added token, as Hugging Face's AddedToken lstrip / rstrip: when
// such a token is matched in raw input, the whitespace run just before it (kStripLeft) or just
// after it (kStripRight) is dropped instead of being tokenized. GGUF has no key for these, so
// Vocab::load sets them by model family (see vocab.cpp).
enum StripFlags : uint8_t {
  kStripNone = 0,
  kStripLeft = 1,
  kStripRight = 2,
};

// A piece of input: either raw text to run through the tokenizer or an already matched token.
struct Fragment {
  int32_t token = -1;  // >= 0: a special / user-defined token
  std::string_view text;
};

class Vocab {
 public:
  // Reads tokens, types, scores and special ids. `spm` selects SentencePiece defaults (add BOS,
  // ids 1/2/0 for BOS/EOS/UNK when absent). Throws TokenizerError on missing or inconsistent keys.
  static Vocab load(const gguf::GgufFile& file, bool spm);

  Vocab() = default;
  Vocab(Vocab&&) = default;
  Vocab& operator=(Vocab&&) = default;
  Vocab(const Vocab&) = delete;  // large; moved, never copied
  Vocab& operator=(const Vocab&) = delete;

  int32_t size() const { return static_cast<int32_t>(text_.size()); }
  const std::string& text(int32_t id) const { return text_[id]; }
  TokenType type(int32_t id) const { return type_[id]; }
  float score(int32_t id) const { return score_.empty() ? 0.0f : score_[id]; }
  bool valid(int32_t id) const { return id >= 0 && id < size(); }
  // The id of the token with exactly this text, or -1.
  int32_t find(std::string_view text) const { return ids_.find(text, text_); }
  // Length in bytes of the longest token text.
  size_t max_token_len() const { return max_len_; }

  // Splits `text` into raw fragments and special tokens. User-defined tokens are always
  // matched; control and unknown-type tokens only when `parse_special`. Whitespace next to a
  // matched token with strip flags is dropped (a raw fragment left empty is not emitted).
  // With `plain` (sorted, disjoint byte ranges): a control token overlapping one is not taken
  // there (only user-defined tokens are), as if parse_special were off for those bytes.
  void partition(std::string_view text, bool parse_special, std::vector<Fragment>& out,
                 const std::vector<std::pair<size_t, size_t>>* plain = nullptr) const;

  // Strip flags (StripFlags bits) of a token; kStripNone unless set.
  uint8_t strip(int32_t id) const { return strip_.empty() ? uint8_t{kStripNone} : strip_[id]; }
  // Sets the strip flags of `id` (a valid id). load() calls it for model families whose added
  // tokens strip whitespace; public so that callers and tests can describe other vocabularies.
  void set_strip(int32_t id, uint8_t flags);

  int32_t bos = -1, eos = -1, eot = -1, eom = -1, pad = -1, unk = -1, sep = -1;
  bool add_bos = false, add_eos = false, add_sep = false;
  std::vector<bool> eog;  // per token: ends generation

 private:
  std::vector<std::string> text_;
  std::vector<TokenType> type_;
  std::vector<float> score_;
  std::vector<uint8_t> strip_;  // per token StripFlags; empty while no token has any
  size_t max_len_ = 0;
  TokenIndex ids_;
  TokenTextMatcher user_defined_;  // always matched
  TokenTextMatcher all_special_;   // matched with parse_special
};

}  // namespace pagoda::tok
