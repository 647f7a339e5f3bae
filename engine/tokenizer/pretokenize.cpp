#include "engine/tokenizer/pretokenize.h"

#include <utility>

#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/unicode.h"

namespace pagoda::tok {
namespace {

using unicode::kLetter;
using unicode::kNumber;
using unicode::kPunct;
using unicode::kWhitespace;

// One decoded character of the input.
struct Unit {
  uint32_t cp;
  uint16_t fl;
};

// The text as characters, with the byte offset of each (off has one extra entry: the end).
struct Units {
  std::vector<Unit> u;
  std::vector<uint32_t> off;

  explicit Units(std::string_view text) {
    u.reserve(text.size());
    off.reserve(text.size() + 1);
    for (size_t pos = 0; pos < text.size();) {
      size_t len = 0;
      const uint32_t cp = unicode::decode(text, pos, len);
      off.push_back(static_cast<uint32_t>(pos));
      u.push_back({cp, cp == unicode::kInvalid ? uint16_t{0} : unicode::flags(cp)});
      pos += len;
    }
    off.push_back(static_cast<uint32_t>(text.size()));
  }
};

inline bool is_ws(const Unit& c) { return c.fl & kWhitespace; }
inline bool is_letter(const Unit& c) { return c.fl & kLetter; }
inline bool is_number(const Unit& c) { return c.fl & kNumber; }
inline bool is_crlf(const Unit& c) { return c.cp == '\r' || c.cp == '\n'; }
// [^\s\p{L}\p{N}]
inline bool is_other(const Unit& c) { return !(c.fl & (kWhitespace | kLetter | kNumber)); }

// End of the run starting at i of characters satisfying `pred` (at most `max` of them).
template <class Pred>
inline size_t run_end(const std::vector<Unit>& u, size_t i, size_t end, Pred pred,
                      size_t max = SIZE_MAX) {
  size_t j = i;
  while (j < end && j - i < max && pred(u[j])) ++j;
  return j;
}

// 's|'t|'re|'ve|'m|'ll|'d, optionally ASCII-case-insensitive; returns the length or 0.
size_t match_contraction(const std::vector<Unit>& u, size_t i, size_t end, bool any_case) {
  if (u[i].cp != '\'' || i + 1 >= end) return 0;
  auto lower = [&](size_t k) -> uint32_t {
    const uint32_t c = u[k].cp;
    return any_case && c >= 'A' && c <= 'Z' ? c + 32 : c;
  };
  const uint32_t a = lower(i + 1);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (i + 2 < end) {
    const uint32_t b = lower(i + 2);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  }
  return 0;
}

// \s+(?!\S) then \s+ at i (u[i] is whitespace): the whole run when it ends the text or is a
// single character; otherwise all of it but the last character, which goes with the next word.
size_t match_space_run(const std::vector<Unit>& u, size_t i, size_t end) {
  const size_t k = run_end(u, i, end, is_ws);
  if (k == end || k - i == 1) return k - i;
  return k - i - 1;
}

// The GPT-2 pattern (see StageKind::kGpt2). Always matches at least one character.
size_t match_gpt2(const std::vector<Unit>& u, size_t i, size_t end) {
  if (size_t n = match_contraction(u, i, end, false)) return n;
  const size_t j = (u[i].cp == ' ' && i + 1 < end) ? i + 1 : i;  // the optional leading space
  if (is_letter(u[j])) return run_end(u, j, end, is_letter) - i;
  if (is_number(u[j])) return run_end(u, j, end, is_number) - i;
  if (is_other(u[j])) return run_end(u, j, end, is_other) - i;
  return match_space_run(u, i, end);  // u[i] is whitespace here
}

// The Llama 3 pattern and its variations (see StageKind::kLlama3). Always matches at least
// one character.
size_t match_llama3(const PreTokenizer::Stage& st, const std::vector<Unit>& u, size_t i, size_t end) {
  if (st.contractions) {
    if (size_t n = match_contraction(u, i, end, true)) return n;
  }
  const uint16_t word_mask = st.marks_are_letters ? (kLetter | unicode::kMark) : kLetter;
  auto word = [word_mask](const Unit& c) { return (c.fl & word_mask) != 0; };
  // [^\r\n\p{L}\p{N}]?\p{L}+ (with marks: [\p{L}\p{M}]+; a mark is then a word character
  // itself, so the optional prefix only matters before a word that starts after it)
  if (word(u[i])) return run_end(u, i, end, word) - i;
  if (!is_crlf(u[i]) && !is_number(u[i]) && i + 1 < end && word(u[i + 1]))
    return run_end(u, i + 1, end, word) - i;
  // \p{N}{1,D}
  if (is_number(u[i])) return run_end(u, i, end, is_number, st.max) - i;
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*' (with marks: [^\s\p{L}\p{M}\p{N}])
  auto other = [word_mask](const Unit& c) { return !(c.fl & (kWhitespace | kNumber | word_mask)); };
  const size_t j = (u[i].cp == ' ' && i + 1 < end) ? i + 1 : i;
  if (other(u[j])) {
    const size_t k = run_end(u, j, end, other);
    return (st.punct_newlines ? run_end(u, k, end, is_crlf) : k) - i;
  }
  // \s*[\r\n]+ : the whitespace run up to and including its last line break.
  const size_t k = run_end(u, i, end, is_ws);
  for (size_t p = k; p-- > i;) {
    if (is_crlf(u[p])) return p + 1 - i;
  }
  return match_space_run(u, i, end);
}

// [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] and [\p{Ll}\p{Lm}\p{Lo}\p{M}] of the case-aware patterns.
inline bool is_upperish(const Unit& c) {
  return ((c.fl & kLetter) && !(c.fl & unicode::kLower)) || (c.fl & unicode::kMark);
}
inline bool is_lowerish(const Unit& c) {
  return ((c.fl & kLetter) && !(c.fl & unicode::kUpper)) || (c.fl & unicode::kMark);
}

// U*L+ at s (see StageKind::kCaseWords); returns the end, or 0 when it does not match.
size_t match_upper_then_lower(const std::vector<Unit>& u, size_t s, size_t end) {
  const size_t a = run_end(u, s, end, is_upperish);
  if (a < end && is_lowerish(u[a])) return run_end(u, a, end, is_lowerish);
  // Backtracking: U* gives back characters until L+ can start; L+ then ends where U* ended.
  for (size_t p = a; p-- > s;)
    if (is_lowerish(u[p])) return p + 1;
  return 0;
}

// U+L* at s; returns the end, or 0.
size_t match_upper_run(const std::vector<Unit>& u, size_t s, size_t end) {
  const size_t a = run_end(u, s, end, is_upperish);
  return a == s ? 0 : run_end(u, a, end, is_lowerish);
}

// The Tekken / GPT-4o pattern (see StageKind::kCaseWords). Always matches.
size_t match_case_words(const std::vector<Unit>& u, size_t i, size_t end, size_t max_digits,
                        bool contractions) {
  // [^\r\n\p{L}\p{N}]? before a word: tried with the character first, then without.
  const bool prefix = !is_crlf(u[i]) && !is_letter(u[i]) && !is_number(u[i]) && i + 1 < end;
  size_t e = 0;
  for (auto word : {match_upper_then_lower, match_upper_run}) {
    if (prefix) e = word(u, i + 1, end);
    if (e == 0) e = word(u, i, end);
    if (e != 0) break;
  }
  if (e != 0) return e - i + (contractions && e < end ? match_contraction(u, e, end, true) : 0);
  if (is_number(u[i])) return run_end(u, i, end, is_number, max_digits) - i;
  // ' ?[^\s\p{L}\p{N}]+[\r\n/]*'
  const size_t j = (u[i].cp == ' ' && i + 1 < end) ? i + 1 : i;
  if (is_other(u[j])) {
    const size_t k = run_end(u, j, end, is_other);
    return run_end(u, k, end, [](const Unit& c) { return is_crlf(c) || c.cp == '/'; }) - i;
  }
  const size_t k = run_end(u, i, end, is_ws);
  for (size_t p = k; p-- > i;) {
    if (is_crlf(u[p])) return p + 1 - i;
  }
  return match_space_run(u, i, end);
}

// The DeepSeek V3 pattern (see StageKind::kDeepseek3). May match nothing (digits, controls).
size_t match_deepseek3(const std::vector<Unit>& u, size_t i, size_t end) {
  auto ascii_letter = [](const Unit& c) { return c.cp < 0x80 && (c.cp | 0x20) >= 'a' && (c.cp | 0x20) <= 'z'; };
  auto ascii_punct = [](const Unit& c) {
    return (c.cp >= '!' && c.cp <= '/') || (c.cp >= ':' && c.cp <= '@') ||
           (c.cp >= '[' && c.cp <= '`') || (c.cp >= '{' && c.cp <= '~');
  };
  auto letter_or_mark = [](const Unit& c) { return (c.fl & (kLetter | unicode::kMark)) != 0; };
  auto punct_or_symbol = [](const Unit& c) { return (c.fl & (kPunct | unicode::kSymbol)) != 0; };
  // [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+
  if (ascii_punct(u[i]) && i + 1 < end && ascii_letter(u[i + 1]))
    return run_end(u, i + 1, end, ascii_letter) - i;
  // [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
  if (letter_or_mark(u[i])) return run_end(u, i, end, letter_or_mark) - i;
  if (!is_crlf(u[i]) && !(u[i].fl & kLetter) && !punct_or_symbol(u[i]) && i + 1 < end &&
      letter_or_mark(u[i + 1]))
    return run_end(u, i + 1, end, letter_or_mark) - i;
  // ' ?[\p{P}\p{S}]+[\r\n]*'
  const size_t j = (u[i].cp == ' ' && i + 1 < end) ? i + 1 : i;
  if (punct_or_symbol(u[j])) {
    const size_t k = run_end(u, j, end, punct_or_symbol);
    return run_end(u, k, end, is_crlf) - i;
  }
  if (!is_ws(u[i])) return 0;
  const size_t k = run_end(u, i, end, is_ws);
  for (size_t p = k; p-- > i;) {
    if (is_crlf(u[p])) return p + 1 - i;
  }
  return match_space_run(u, i, end);
}

size_t match_stage(const PreTokenizer::Stage& st, const std::vector<Unit>& u, size_t i,
                   size_t end) {
  using K = PreTokenizer::StageKind;
  auto in_class = [&](const Unit& c) { return st.cls.contains(c.cp, c.fl); };
  switch (st.kind) {
    case K::kGpt2:
      return match_gpt2(u, i, end);
    case K::kLlama3:
      return match_llama3(st, u, i, end);
    case K::kDeepseek3:
      return match_deepseek3(u, i, end);
    case K::kCaseWords:
      return match_case_words(u, i, end, st.max, st.contractions);
    case K::kRun: {
      const size_t n = run_end(u, i, end, in_class, st.max) - i;
      return n >= st.min ? n : 0;
    }
    case K::kSpaceThenRun:
      if (is_ws(u[i]) && i + 1 < end && in_class(u[i + 1]))
        return run_end(u, i + 1, end, in_class) - i;
      return in_class(u[i]) ? run_end(u, i, end, in_class) - i : 0;
    case K::kOptSpaceRun:
      if (u[i].cp == ' ' && i + 1 < end && in_class(u[i + 1]))
        return run_end(u, i + 1, end, in_class) - i;
      return in_class(u[i]) ? run_end(u, i, end, in_class) - i : 0;
    case K::kTrailingSpace:
      break;  // handled by split_fragment
  }
  return 0;
}

// Splits the characters [b, e) by one stage: matches and the gaps between them become pieces.
void split_fragment(const PreTokenizer::Stage& st, const std::vector<Unit>& u, size_t b, size_t e,
                    std::vector<std::pair<uint32_t, uint32_t>>& out) {
  auto push = [&](size_t x, size_t y) {
    out.emplace_back(static_cast<uint32_t>(x), static_cast<uint32_t>(y));
  };
  if (st.kind == PreTokenizer::StageKind::kTrailingSpace) {
    size_t t = e;
    while (t > b && is_ws(u[t - 1])) --t;
    if (t > b) push(b, t);
    if (t < e) push(t, e);
    return;
  }
  size_t gap = b;
  for (size_t i = b; i < e;) {
    const size_t n = match_stage(st, u, i, e);
    if (n == 0) {
      ++i;
      continue;
    }
    if (gap < i) push(gap, i);
    push(i, i + n);
    i += n;
    gap = i;
  }
  if (gap < e) push(gap, e);
}

PreTokenizer::CharClass ranges(std::vector<std::pair<uint32_t, uint32_t>> r, uint16_t mask = 0) {
  PreTokenizer::CharClass c;
  c.flag_mask = mask;
  c.ranges = std::move(r);
  return c;
}

PreTokenizer::Stage run(PreTokenizer::CharClass cls, uint32_t min = 1, uint32_t max = UINT32_MAX) {
  PreTokenizer::Stage s;
  s.kind = PreTokenizer::StageKind::kRun;
  s.cls = std::move(cls);
  s.min = min;
  s.max = max;
  return s;
}

PreTokenizer::Stage space_then_run(PreTokenizer::CharClass cls) {
  PreTokenizer::Stage s;
  s.kind = PreTokenizer::StageKind::kSpaceThenRun;
  s.cls = std::move(cls);
  return s;
}

PreTokenizer::Stage simple(PreTokenizer::StageKind kind, uint32_t max = UINT32_MAX) {
  PreTokenizer::Stage s;
  s.kind = kind;
  s.max = max;
  return s;
}

// Character classes that appear literally in the DeepSeek tokenizers' split patterns.
PreTokenizer::CharClass cjk_class() {  // [一-龥ࠀ-一가-퟿]
  return ranges({{0x4E00, 0x9FA5}, {0x0800, 0x4E00}, {0xAC00, 0xD7FF}});
}

PreTokenizer::CharClass deepseek_punct_class() {  // [!-/:-~！-／：-～‘-‟　-。]
  return ranges({{0x21, 0x2F}, {0x3A, 0x7E}, {0xFF01, 0xFF0F}, {0xFF1A, 0xFF5E}, {0x2018, 0x201F},
                 {0x3000, 0x3002}});
}

// DeepSeek LLM's letter class: an explicit list of cased-letter ranges (from its tokenizer.json).
PreTokenizer::CharClass deepseek_letter_class() {
  return ranges({
      {0x41, 0x5A}, {0x61, 0x7A}, {0xB5, 0xB5}, {0xC0, 0xD6}, {0xD8, 0xF6}, {0xF8, 0x1BA},
      {0x1BC, 0x1BF}, {0x1C4, 0x293}, {0x295, 0x2AF}, {0x370, 0x373}, {0x376, 0x377},
      {0x37B, 0x37D}, {0x37F, 0x37F}, {0x386, 0x386}, {0x388, 0x38A}, {0x38C, 0x38C},
      {0x38E, 0x3A1}, {0x3A3, 0x3F5}, {0x3F7, 0x481}, {0x48A, 0x52F}, {0x531, 0x556},
      {0x10A0, 0x10C5}, {0x13A0, 0x13F5}, {0x13F8, 0x13FD}, {0x1C90, 0x1CBA}, {0x1CBD, 0x1CBF},
      {0x1D00, 0x1D2B}, {0x1D6B, 0x1D77}, {0x1D79, 0x1D9A}, {0x1E00, 0x1F15}, {0x1F18, 0x1F1D},
      {0x1F20, 0x1F45}, {0x1F48, 0x1F4D}, {0x1F50, 0x1F57}, {0x1F59, 0x1F59}, {0x1F5B, 0x1F5B},
      {0x1F5D, 0x1F5D}, {0x1F5F, 0x1F7D}, {0x1F80, 0x1FB4}, {0x1FB6, 0x1FBC}, {0x1FBE, 0x1FBE},
      {0x1FC2, 0x1FC4}, {0x1FC6, 0x1FCC}, {0x1FD0, 0x1FD3}, {0x1FD6, 0x1FDB}, {0x1FE0, 0x1FEC},
      {0x1FF2, 0x1FF4}, {0x1FF6, 0x1FFC}, {0x2102, 0x2102}, {0x2107, 0x2107}, {0x210A, 0x2113},
      {0x2115, 0x2115}, {0x2119, 0x211D}, {0x2124, 0x2124}, {0x2126, 0x2126}, {0x2128, 0x2128},
      {0x212A, 0x212D}, {0x212F, 0x2134}, {0x2139, 0x2139}, {0x213C, 0x213F}, {0x2145, 0x2149},
      {0x214E, 0x214E}, {0x2183, 0x2184}, {0x2C00, 0x2C7B}, {0x2C7E, 0x2CE4}, {0x2CEB, 0x2CEE},
      {0x2CF2, 0x2CF3}, {0xA640, 0xA66D}, {0xA680, 0xA69B}, {0xA722, 0xA76F}, {0xA771, 0xA787},
      {0xA78B, 0xA78E}, {0xAB70, 0xABBF}, {0xFB00, 0xFB06}, {0xFB13, 0xFB17}, {0xFF21, 0xFF3A},
      {0xFF41, 0xFF5A}, {0x10400, 0x1044F}, {0x104B0, 0x104D3}, {0x104D8, 0x104FB},
      {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2}, {0x118A0, 0x118DF}, {0x1E900, 0x1E943},
  });
}

// The Llama 3 pattern with `max_digits` digits per number (see StageKind::kLlama3).
PreTokenizer::Stage llama3(uint32_t max_digits) {
  PreTokenizer::Stage s = simple(PreTokenizer::StageKind::kLlama3, max_digits);
  s.contractions = true;
  return s;
}

// [^(\s|.,!?…。，、।۔،)] of the BLOOM / Poro / Viking pattern " ?[^(\s|.,!?…。，、।۔،)]+": the
// parentheses and "|" are literal members of the class there.
PreTokenizer::CharClass bloom_word_class() {
  auto c = ranges({{'(', ')'}, {'|', '|'}, {'.', '.'}, {',', ','}, {'!', '!'}, {'?', '?'},
                   {0x2026, 0x2026}, {0x3002, 0x3002}, {0xFF0C, 0xFF0C}, {0x3001, 0x3001},
                   {0x0964, 0x0964}, {0x06D4, 0x06D4}, {0x060C, 0x060C}},
                  kWhitespace);
  c.negate = true;
  return c;
}

PreTokenizer::Stage opt_space_run(PreTokenizer::CharClass cls) {
  PreTokenizer::Stage s;
  s.kind = PreTokenizer::StageKind::kOptSpaceRun;
  s.cls = std::move(cls);
  return s;
}

struct Variant {
  const char* names[16];  // tokenizer.ggml.pre values (llama.cpp's names); unused ones null
  bool ignore_merges;
  bool add_bos_by_default;
  std::vector<PreTokenizer::Stage> (*stages)();
};

using K = PreTokenizer::StageKind;

// The variants by tokenizer.ggml.pre value. Names sharing an entry share the split rules; the
// rules are the split regexes llama.cpp uses for each name.
const Variant kVariants[] = {
    // llama.cpp's fallback for vocabularies converted before tokenizer.ggml.pre existed.
    {{"default"}, false, false,
     [] {
       // [\p{P}\$\+<=>\^~\|]+ , GPT-2 , \p{N}+ , [0-9][0-9][0-9]
       auto punct = ranges({{'$', '$'}, {'+', '+'}, {'<', '>'}, {'^', '^'}, {'~', '~'}, {'|', '|'}},
                           kPunct);
       return std::vector{run(std::move(punct)), simple(K::kGpt2), run(ranges({}, kNumber)),
                          run(ranges({{'0', '9'}}), 3, 3)};
     }},
    {{"gpt-2", "gpt2", "mpt", "gpt-neox", "olmo", "phi-2", "roberta-bpe", "jais", "gigachat",
      "a.x-4.0", "mellum", "exaone4", "trillion", "granite-docling"},
     false, false, [] { return std::vector{simple(K::kGpt2)}; }},
    {{"llama-bpe", "llama3", "llama-v3", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
      "jina-v5-nano"},
     true, true, [] { return std::vector{llama3(3)}; }},
    {{"dbrx", "smaug-bpe", "chatglm-bpe", "glm4"}, false, false, [] { return std::vector{llama3(3)}; }},
    {{"qwen2", "stablelm2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez", "hunyuan",
      "solar-open", "grok-2", "bailingmoe", "bailingmoe2", "llada-moe"},
     false, false, [] { return std::vector{llama3(1)}; }},
    {{"qwen35"}, false, false,
     [] {
       auto s = llama3(1);
       s.marks_are_letters = true;
       return std::vector{s};
     }},
    {{"seed-coder"}, false, false,
     [] {
       auto s = llama3(1);
       s.punct_newlines = false;  // " ?[^\s\p{L}\p{N}\r\n]+" with no [\r\n]* after it
       return std::vector{s};
     }},
    {{"ufakzeka"}, false, false,
     [] {
       auto s = llama3(1);
       s.contractions = false;  // Turkish apostrophe suffixes stay with their word
       return std::vector{s};
     }},
    {{"minicpm5"}, true, false,
     [] { return std::vector{run(ranges({}, kNumber), 1, 3), llama3(UINT32_MAX)}; }},
    {{"laguna"}, false, false,
     [] {
       // [^\n]+|[\n]+ (runs of line feeds apart from the rest), then Qwen2's pattern
       return std::vector{run(ranges({{'\n', '\n'}})), llama3(1)};
     }},
    {{"tekken"}, true, true, [] { return std::vector{simple(K::kCaseWords, 1)}; }},
    {{"gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"}, false, false,
     [] {
       auto s = simple(K::kCaseWords, 3);
       s.contractions = true;
       return std::vector{s};
     }},
    {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b", "mellum2"},
     false, false, [] { return std::vector{run(ranges({}, kNumber), 1, 1), simple(K::kGpt2)}; }},
    {{"falcon"}, false, false,
     [] {
       // [\p{P}\$\+<=>\^~\|`]+ , GPT-2, [0-9][0-9][0-9]
       auto punct = ranges({{'$', '$'}, {'+', '+'}, {'<', '>'}, {'^', '^'}, {'~', '~'},
                            {'|', '|'}, {'`', '`'}},
                           kPunct);
       return std::vector{run(std::move(punct)), simple(K::kGpt2), run(ranges({{'0', '9'}}), 3, 3)};
     }},
    {{"deepseek-llm"}, false, false,
     [] {
       return std::vector{run(ranges({{'\r', '\r'}, {'\n', '\n'}}), 1, 1),
                          space_then_run(deepseek_letter_class()),
                          space_then_run(deepseek_punct_class()), simple(K::kTrailingSpace),
                          run(cjk_class()), run(ranges({}, kNumber))};
     }},
    {{"deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"}, false, false,
     [] {
       // \p{N}{1,3} , [一-龥ぁ-ゟ゠-ヿ]+ , the pattern of kDeepseek3
       return std::vector{run(ranges({}, kNumber), 1, 3),
                          run(ranges({{0x4E00, 0x9FA5}, {0x3040, 0x309F}, {0x30A0, 0x30FF}})),
                          simple(K::kDeepseek3)};
     }},
    {{"deepseek-coder"}, false, false,
     [] {
       return std::vector{run(ranges({{'\r', '\r'}, {'\n', '\n'}}), 1, 1),
                          space_then_run(ranges({}, kLetter)), space_then_run(ranges({}, kPunct)),
                          run(cjk_class()), run(ranges({}, kNumber), 1, 1)};
     }},
    {{"bloom", "poro-chat", "gpt3-finnish"}, false, false,
     [] { return std::vector{opt_space_run(bloom_word_class())}; }},
    {{"viking"}, false, false,
     [] { return std::vector{opt_space_run(bloom_word_class()), run(ranges({}, kNumber), 1, 1)}; }},
};

}  // namespace

bool PreTokenizer::CharClass::contains(uint32_t cp, uint16_t flags) const {
  if (flags & flag_mask) return !negate;
  for (const auto& [lo, hi] : ranges)
    if (cp >= lo && cp <= hi) return !negate;
  return negate;
}

PreTokenizer PreTokenizer::by_name(std::string_view name) {
  for (const auto& v : kVariants) {
    for (const char* n : v.names) {
      if (n != nullptr && name == n) {
        PreTokenizer p;
        p.name_ = std::string(name);
        p.stages_ = v.stages();
        p.ignore_merges_ = v.ignore_merges;
        p.add_bos_by_default_ = v.add_bos_by_default;
        return p;
      }
    }
  }
  std::string known;
  for (const auto& n : supported_names()) known += (known.empty() ? "" : ", ") + n;
  throw TokenizerError("unsupported pre-tokenizer tokenizer.ggml.pre = \"" + std::string(name) +
                       "\" (supported: " + known + ")");
}

std::vector<std::string> PreTokenizer::supported_names() {
  std::vector<std::string> out;
  for (const auto& v : kVariants)
    for (const char* n : v.names)
      if (n != nullptr) out.emplace_back(n);
  return out;
}

void PreTokenizer::split(std::string_view text, std::vector<Span>& words) const {
  if (text.empty()) return;
  const Units units(text);
  std::vector<std::pair<uint32_t, uint32_t>> cur{{0, static_cast<uint32_t>(units.u.size())}};
  std::vector<std::pair<uint32_t, uint32_t>> next;
  for (const Stage& st : stages_) {
    next.clear();
    for (const auto& [b, e] : cur) split_fragment(st, units.u, b, e, next);
    std::swap(cur, next);
  }
  for (const auto& [b, e] : cur) words.push_back({units.off[b], units.off[e] - units.off[b]});
}

}  // namespace pagoda::tok
