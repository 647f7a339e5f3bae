// WordPiece: the BERT normalizer (accent stripping, lowercasing, word splitting) and the
// greedy longest-piece search; see wordpiece.h.
#include "engine/tokenizer/wordpiece.h"

#include <algorithm>

#include "engine/gguf/gguf.h"
#include "engine/tokenizer/unicode.h"

namespace pagoda::tok {

namespace {

constexpr std::string_view kWordStart = "\xE2\x96\x81";  // U+2581, marks a word-initial piece

// The run of `runs` holding `cp`, or nullptr.
const detail::CodepointRun* find_run(const detail::CodepointRun* runs, size_t n, uint32_t cp) {
  const auto* end = runs + n;
  const auto* it = std::upper_bound(runs, end, cp,
                                    [](uint32_t c, const detail::CodepointRun& r) { return c < r.first; });
  if (it == runs) return nullptr;
  --it;
  return cp <= it->last ? it : nullptr;
}

uint32_t strip_accent(uint32_t cp) {
  const auto* r = find_run(detail::kStripAccentRuns, detail::kStripAccentRunsCount, cp);
  return r ? r->target : cp;
}

uint32_t to_lower(uint32_t cp) {
  const auto* r = find_run(detail::kLowercaseRuns, detail::kLowercaseRunsCount, cp);
  return r ? r->target + (cp - r->first) : cp;
}

// CJK ideographs, which BERT splits one per word (Hangul and kana are ordinary letters).
bool is_cjk(uint32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
         (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
         (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

}  // namespace

WordPieceTokenizer::WordPieceTokenizer(const gguf::GgufFile& file)
    : TokenizerBase(Vocab::load(file, false)) {
  const int32_t n = vocab_.size();
  auto special = [&](const char* key) -> int32_t {
    const auto v = file.get_int(key);
    if (!v) return -1;
    if (*v < 0 || *v >= n)
      throw TokenizerError(std::string(key) + " = " + std::to_string(*v) + " is outside the vocabulary");
    return static_cast<int32_t>(*v);
  };
  if (vocab_.bos < 0) vocab_.bos = special("tokenizer.ggml.cls_token_id");
  if (vocab_.eos < 0) vocab_.eos = special("tokenizer.ggml.seperator_token_id");
  if (vocab_.unk < 0) vocab_.unk = vocab_.find("[UNK]");
  if (vocab_.unk < 0) throw TokenizerError("WordPiece vocabulary has no unknown token");
  vocab_.add_bos = file.get_bool("tokenizer.ggml.add_bos_token").value_or(vocab_.bos >= 0);
  vocab_.add_eos = file.get_bool("tokenizer.ggml.add_eos_token").value_or(vocab_.eos >= 0);
  if ((vocab_.add_bos && vocab_.bos < 0) || (vocab_.add_eos && vocab_.eos < 0))
    throw TokenizerError("WordPiece vocabulary lacks its [CLS] or [SEP] token");

  std::vector<std::string> pieces(n);
  for (int32_t id = 0; id < n; ++id) {
    const std::string& t = vocab_.text(id);
    if (vocab_.type(id) == TokenType::kUnused) continue;
    if (t.compare(0, kWordStart.size(), kWordStart) == 0)
      pieces[id].assign(1, ' ').append(t, kWordStart.size(), std::string::npos);
    else
      pieces[id] = t;
  }
  set_pieces(std::move(pieces));
}

std::vector<std::string> WordPieceTokenizer::split_words(std::string_view text) {
  std::vector<std::string> words(1);
  for (size_t pos = 0, len = 0; pos < text.size(); pos += len) {
    const uint32_t raw = unicode::decode(text, pos, len);
    if (raw == unicode::kInvalid || raw == 0 || raw == 0xFFFD) continue;
    const uint32_t cp = strip_accent(raw);
    const uint16_t f = unicode::flags(cp);
    if (f & unicode::kWhitespace) {
      if (!words.back().empty()) words.emplace_back();
      continue;
    }
    // Control, format and private-use characters (and unassigned ones) carry no flags.
    if (f == 0) continue;
    std::string s;
    unicode::append_utf8(s, to_lower(cp));
    if ((f & unicode::kPunct) || (cp < 0x7F && (f & unicode::kSymbol)) || is_cjk(cp)) {
      if (!words.back().empty()) words.emplace_back();
      words.back() = std::move(s);
      words.emplace_back();
    } else {
      words.back() += s;
    }
  }
  if (words.back().empty()) words.pop_back();
  return words;
}

void WordPieceTokenizer::encode_raw(std::string_view text, bool, std::vector<int32_t>& out) const {
  const size_t max_len = vocab_.max_token_len();
  for (const std::string& word : split_words(text)) {
    const std::string w = std::string(kWordStart) + word;
    const size_t start = out.size();
    for (size_t i = 0; i < w.size();) {
      size_t taken = 0;
      for (size_t j = std::min(w.size(), i + max_len); j > i; --j) {
        const int32_t id = vocab_.find(std::string_view(w).substr(i, j - i));
        if (id >= 0) {
          out.push_back(id);
          taken = j - i;
          break;
        }
      }
      if (taken == 0) {  // some part has no piece: the whole word is unknown
        out.resize(start);
        break;
      }
      i += taken;
    }
    if (out.size() == start) out.push_back(vocab_.unk);
  }
}

}  // namespace pagoda::tok
