// Tokenizer built from a GGUF file's `tokenizer.*` metadata: SentencePiece-style BPE ("llama")
// and byte-level BPE ("gpt2") with the pre-tokenizer named by `tokenizer.ggml.pre`, BERT's
// WordPiece ("bert") and SentencePiece's Unigram ("t5").
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pagoda::gguf { class GgufFile; }

namespace pagoda {

struct TokenizerError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Byte ranges [begin, end) of a text, sorted and disjoint.
using TextRanges = std::vector<std::pair<size_t, size_t>>;

class Tokenizer {
 public:
  // Throws TokenizerError for a missing/unsupported model or pre-tokenizer, or bad metadata.
  static std::unique_ptr<Tokenizer> from_gguf(const gguf::GgufFile& file);
  virtual ~Tokenizer() = default;

  // `add_special`: prepend BOS / append EOS as the vocabulary's add_bos/add_eos flags say.
  // `parse_special`: control-token text in `text` becomes the control token.
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special,
                                      bool parse_special) const = 0;
  // encode(text, add_special, parse_special = true), except that control-token text inside
  // the ranges `plain` is plain text, as with parse_special off: client text inside a rendered
  // chat prompt. This default encodes the pieces one by one; the GGUF tokenizers split the
  // text only where they take a control token, so plain text merges across a range's edges.
  virtual std::vector<int32_t> encode_marked(std::string_view text, bool add_special,
                                             const TextRanges& plain) const {
    std::vector<int32_t> out;
    if (add_special && add_bos() && bos_id() >= 0) out.push_back(bos_id());
    size_t pos = 0;
    auto append = [&](size_t end, bool parse_special) {
      if (pos < end) {
        const std::vector<int32_t> ids = encode(text.substr(pos, end - pos), false, parse_special);
        out.insert(out.end(), ids.begin(), ids.end());
      }
      pos = end;
    };
    for (const auto& [begin, end] : plain) {
      append(begin, true);
      append(end, false);
    }
    append(text.size(), true);
    if (add_special && add_eos() && eos_id() >= 0) out.push_back(eos_id());
    return out;
  }
  // The bytes a token stands for when decoded (byte tokens -> the byte; SPM "▁" -> space;
  // byte-level BPE -> original bytes). Control tokens give their text only if `special`.
  virtual std::string token_to_piece(int32_t id, bool special = false) const = 0;
  // Concatenated pieces; SPM drops the one leading space it added when encoding.
  virtual std::string decode(const std::vector<int32_t>& ids, bool special = false) const = 0;

  virtual int32_t vocab_size() const = 0;
  virtual const std::string& token_text(int32_t id) const = 0;  // as stored in the vocabulary
  virtual int32_t bos_id() const = 0;   // -1 when absent
  virtual int32_t eos_id() const = 0;
  virtual int32_t eot_id() const = 0;
  virtual bool add_bos() const = 0;
  virtual bool add_eos() const = 0;
  // The separator between the two texts of a pair (tokenizer.ggml.seperator_token_id; -1 when
  // absent) and whether a pair puts it after the first text's EOS (tokenizer.ggml.add_sep_token).
  virtual int32_t sep_id() const { return -1; }
  virtual bool add_sep() const { return false; }
  virtual bool is_control(int32_t id) const = 0;
  // End of generation: EOS, EOT and similar tokens.
  virtual bool is_eog(int32_t id) const = 0;
  // Problems found while loading that did not stop it (e.g. a missing tokenizer.ggml.pre and
  // the fallback used instead), one sentence each, for the caller to log.
  virtual std::vector<std::string> warnings() const { return {}; }
};

}  // namespace pagoda
