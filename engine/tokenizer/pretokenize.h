// Pre-tokenizers for byte-level BPE: split text into words before merges are applied.
//
// Each variant reproduces the split regexes of the model's Hugging Face tokenizer.json (as a
// sequence of "split, keep matches and gaps" stages), written by hand over Unicode category
// tables instead of a regex engine: std::regex has no \p{L} / \p{N}, and hand-written matchers
// are much faster.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda::tok {

// A word: `len` bytes of the input starting at `begin`.
struct Span {
  uint32_t begin;
  uint32_t len;
};

class PreTokenizer {
 public:
  // The pre-tokenizer named by GGUF `tokenizer.ggml.pre` (the names llama.cpp gives them).
  // Throws TokenizerError naming the value and listing the supported ones when it is unknown.
  static PreTokenizer by_name(std::string_view name);
  // Every name by_name accepts (for messages and tests).
  static std::vector<std::string> supported_names();

  // Appends the words of `text` to `words`, in order; together they cover `text` exactly.
  void split(std::string_view text, std::vector<Span>& words) const;

  // Llama 3 style: a word that is itself a vocabulary token is emitted whole, without merges.
  bool ignore_merges() const { return ignore_merges_; }
  // Whether a vocabulary with this pre-tokenizer adds BOS when tokenizer.ggml.add_bos_token is
  // absent (llama.cpp's default for the Llama 3 and Tekken families).
  bool add_bos_by_default() const { return add_bos_by_default_; }
  const std::string& name() const { return name_; }

  // One split stage; public so that the implementation's helpers can see it.
  struct CharClass {
    uint16_t flag_mask = 0;                              // unicode::Flag bits that match
    std::vector<std::pair<uint32_t, uint32_t>> ranges;  // inclusive code point ranges
    bool negate = false;                                 // [^...]: everything else matches
    // Membership of the ASCII code points, filled by prepare() (most text is ASCII, and a
    // class can have a hundred ranges).
    uint64_t ascii[2] = {0, 0};
    bool prepared = false;
    // Fills `ascii`; call after setting the fields above.
    void prepare();
    // Whether a character with code point `cp` and unicode::Flag bits `flags` is in the class.
    bool contains(uint32_t cp, uint16_t flags) const {
      if (cp < 128 && prepared) return (ascii[cp >> 6] >> (cp & 63)) & 1;
      return contains_slow(cp, flags);
    }
    // contains() from the fields alone (no bitmap).
    bool contains_slow(uint32_t cp, uint16_t flags) const;
  };
  enum class StageKind {
    kGpt2,           // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
    kLlama3,         // (?i:'s|..)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,D}| ?[^\s\p{L}\p{N}]+[\r\n]*|
                     //   \s*[\r\n]+|\s+(?!\S)|\s+   (D = max_digits), with the variations of
                     //   `contractions`, `marks_are_letters` and `punct_newlines`
    kDeepseek3,      // [!-/:-@[-`{-~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+|
                     //   ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
    kCaseWords,      // Tekken / GPT-4o: words split at lower->upper case changes, with U =
                     //   [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}], L = [\p{Ll}\p{Lm}\p{Lo}\p{M}]:
                     //   [^\r\n\p{L}\p{N}]?U*L+C?|[^\r\n\p{L}\p{N}]?U+L*C?|\p{N}{1,D}|
                     //   ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
                     //   (C: (?i:'s|'t|'re|'ve|'m|'ll|'d) when `contractions`, else nothing)
    kDigitGroups,    // \d{1,3}(?=(?:\d{3})*\b): a digit run that ends a word, cut in threes from
                     //   the right ("1234567" -> "1", "234", "567")
    kExaoneMoe,      // (?i:'s|..)|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}|
                     //   ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+ (words joined by
                     //   single spaces)
    kRun,            // [class]{min,max}
    kSpaceThenRun,   // \s?[class]+
    kOptSpaceRun,    // " ?[class]+" (a literal space, not \s)
    kTrailingSpace,  // \s+$
  };
  struct Stage {
    StageKind kind = StageKind::kGpt2;
    CharClass cls;
    uint32_t min = 1, max = UINT32_MAX;  // kRun repetition; kLlama3/kCaseWords: max digits
    bool contractions = false;           // kLlama3, kCaseWords: the 's|'t|... alternative
    bool marks_are_letters = false;      // kLlama3: [\p{L}\p{M}]+ words (Qwen3.5)
    bool punct_newlines = true;          // kLlama3, kDeepseek3: [\r\n]* after a punctuation
                                         //   run; kDeepseek3 without it: [\r\n] alone, not
                                         //   \s*[\r\n]+ (Spark 2.5)
    bool cascade_spaces = false;         // kLlama3: \s{512}(?!\S)|\s{256}(?!\S)|..|\s{4}(?!\S)|
                                         //   \s{1,2}(?!\S)|\s instead of \s+(?!\S)|\s+ (Jais 2)
  };

 private:
  std::string name_;
  std::vector<Stage> stages_;
  bool ignore_merges_ = false;
  bool add_bos_by_default_ = false;
};

}  // namespace pagoda::tok
