// The split stages' matchers (one hand-written function per regex family, see StageKind) and
// PreTokenizer::split. The variants by name are in pretokenize_variants.cpp.
#include "engine/tokenizer/pretokenize.h"

#include <utility>

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
  if (st.cascade_spaces) {
    // \s{n}(?!\S) for n = 512, 256, .., 4, then \s{1,2}(?!\S), then \s: the largest of these
    // that leaves whitespace (or the end of the text) after it.
    const size_t r = k - i;
    for (size_t n = 512; n >= 4; n /= 2)
      if (r > n || (r == n && k == end)) return n;
    return r > 2 || (r == 2 && k == end) ? 2 : 1;
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
size_t match_deepseek3(const PreTokenizer::Stage& st, const std::vector<Unit>& u, size_t i, size_t end) {
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
    return (st.punct_newlines ? run_end(u, k, end, is_crlf) : k) - i;
  }
  if (!is_ws(u[i])) return 0;
  if (!st.punct_newlines && is_crlf(u[i])) return 1;  // [\r\n]
  const size_t k = run_end(u, i, end, is_ws);
  if (st.punct_newlines) {
    for (size_t p = k; p-- > i;) {
      if (is_crlf(u[p])) return p + 1 - i;
    }
  }
  return match_space_run(u, i, end);
}

// \w of the regex engines Hugging Face uses: letters, marks, numbers and '_'.
inline bool is_word_char(const Unit& c) {
  return (c.fl & (kLetter | kNumber | unicode::kMark)) != 0 || c.cp == '_';
}

// kDigitGroups at i: the next group of a run of ASCII digits that ends a word; 0 elsewhere.
size_t match_digit_groups(const std::vector<Unit>& u, size_t i, size_t end) {
  auto digit = [](const Unit& c) { return c.cp >= '0' && c.cp <= '9'; };
  if (!digit(u[i])) return 0;
  const size_t k = run_end(u, i, end, digit);
  if (k < end && is_word_char(u[k])) return 0;  // no \b after the run: no match anywhere in it
  const size_t n = k - i;
  return n % 3 == 0 ? 3 : n % 3;
}

// The EXAONE MoE pattern (see StageKind::kExaoneMoe). Always matches at least one character.
size_t match_exaone_moe(const std::vector<Unit>& u, size_t i, size_t end) {
  if (size_t n = match_contraction(u, i, end, true)) return n;
  auto mark = [](const Unit& c) { return (c.fl & unicode::kMark) != 0; };
  // (?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+ from s: letters with their marks, single spaces between.
  auto words = [&](size_t s) {
    size_t p = s;
    while (p < end) {
      if (is_letter(u[p])) {
        p = run_end(u, p + 1, end, mark);
      } else if (u[p].cp == ' ' && p > s && p + 1 < end && is_letter(u[p + 1])) {
        ++p;
      } else {
        break;
      }
    }
    return p;
  };
  if (is_letter(u[i])) return words(i) - i;
  if (!is_crlf(u[i]) && !is_number(u[i]) && i + 1 < end && is_letter(u[i + 1])) return words(i + 1) - i;
  if (is_number(u[i])) return 1;
  // ' ?[^\s\p{L}\p{N}]+[\r\n/]?'
  const size_t j = (u[i].cp == ' ' && i + 1 < end) ? i + 1 : i;
  if (is_other(u[j])) {
    const size_t k = run_end(u, j, end, is_other);
    return (k < end && (is_crlf(u[k]) || u[k].cp == '/') ? k + 1 : k) - i;
  }
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
      return match_deepseek3(st, u, i, end);
    case K::kDigitGroups:
      return match_digit_groups(u, i, end);
    case K::kExaoneMoe:
      return match_exaone_moe(u, i, end);
    case K::kCaseWords:
      return match_case_words(u, i, end, st.max, st.contractions);
    case K::kRun: {
      // Most runs are of a category alone (\p{N}): test the flags without the class lookup.
      const uint16_t mask = st.cls.flag_mask;
      const size_t n = st.cls.ranges.empty() && !st.cls.negate
                           ? run_end(u, i, end, [mask](const Unit& c) { return (c.fl & mask) != 0; }, st.max) - i
                           : run_end(u, i, end, in_class, st.max) - i;
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

}  // namespace

bool PreTokenizer::CharClass::contains_slow(uint32_t cp, uint16_t flags) const {
  if (flags & flag_mask) return !negate;
  for (const auto& [lo, hi] : ranges)
    if (cp >= lo && cp <= hi) return !negate;
  return negate;
}

void PreTokenizer::CharClass::prepare() {
  ascii[0] = ascii[1] = 0;
  prepared = false;
  if (ranges.empty() && !negate) return;  // a flag test alone is as cheap as the bitmap
  for (uint32_t cp = 0; cp < 128; ++cp)
    if (contains_slow(cp, unicode::flags(cp))) ascii[cp >> 6] |= uint64_t{1} << (cp & 63);
  prepared = true;
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
