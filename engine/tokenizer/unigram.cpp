// UnigramTokenizer: the normalizer, the piece trie and the Viterbi search; see unigram.h.
#include "engine/tokenizer/unigram.h"

#include <algorithm>
#include <cfloat>
#include <unordered_map>

#include "engine/gguf/gguf.h"
#include "engine/tokenizer/unigram_charsmap.h"

namespace pagoda::tok {

// A byte trie over token texts; walking it from an offset visits every token that starts there.
class PrefixTrie {
 public:
  void add(std::string_view text, int32_t id) {
    int32_t at = 0;
    for (unsigned char c : text) {
      auto [it, fresh] = edges_.try_emplace(key(at, c), int32_t(tokens_.size()));
      if (fresh) tokens_.push_back(-1);
      at = it->second;
    }
    if (tokens_[size_t(at)] < 0) tokens_[size_t(at)] = id;  // duplicate text: the lower id keeps it
  }
  // The child of `node` by byte c, or -1.
  int32_t child(int32_t node, unsigned char c) const {
    const auto it = edges_.find(key(node, c));
    return it == edges_.end() ? -1 : it->second;
  }
  int32_t token(int32_t node) const { return tokens_[size_t(node)]; }

 private:
  static uint64_t key(int32_t node, unsigned char c) { return uint64_t(uint32_t(node)) << 8 | c; }
  std::vector<int32_t> tokens_{-1};  // node 0 is the root
  std::unordered_map<uint64_t, int32_t> edges_;
};

namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581 stands for a space

// Bytes of the UTF-8 sequence starting with lead byte b (1 for a stray continuation byte).
size_t utf8_len(unsigned char b) {
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[b >> 4];
}

// Length of the well-formed UTF-8 sequence at s[pos] (lead byte and continuation bytes only
// checked), or 0.
size_t valid_utf8_at(std::string_view s, size_t pos) {
  const auto b = static_cast<unsigned char>(s[pos]);
  size_t n = b < 0x80 ? 1 : (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 0;
  if (n == 0 || pos + n > s.size()) return 0;
  for (size_t i = 1; i < n; ++i)
    if ((static_cast<unsigned char>(s[pos + i]) & 0xC0) != 0x80) return 0;
  return n;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

UnigramTokenizer::UnigramTokenizer(const gguf::GgufFile& file)
    : TokenizerBase(Vocab::load(file, false)), pieces_(std::make_unique<PrefixTrie>()) {
  const int32_t n = vocab_.size();
  auto fallback = [&](int32_t& id, const char* key, int32_t def) {
    if (!file.get_int(key) && def < n) id = def;
  };
  fallback(vocab_.eos, "tokenizer.ggml.eos_token_id", 1);
  fallback(vocab_.unk, "tokenizer.ggml.unknown_token_id", 2);
  fallback(vocab_.pad, "tokenizer.ggml.padding_token_id", 0);
  vocab_.add_bos = file.get_bool("tokenizer.ggml.add_bos_token").value_or(false);
  vocab_.add_eos = file.get_bool("tokenizer.ggml.add_eos_token").value_or(true);
  if ((vocab_.add_bos && vocab_.bos < 0) || (vocab_.add_eos && vocab_.eos < 0))
    throw TokenizerError("Unigram vocabulary asks for a BOS or EOS token it does not have");
  if (vocab_.unk < 0) throw TokenizerError("Unigram vocabulary has no unknown token");
  add_space_prefix_ = file.get_bool("tokenizer.ggml.add_space_prefix").value_or(false);
  remove_extra_spaces_ = file.get_bool("tokenizer.ggml.remove_extra_whitespaces").value_or(false);
  if (const auto* blob = file.get_int_array("tokenizer.ggml.precompiled_charsmap"); blob && !blob->empty()) {
    std::vector<uint8_t> bytes(blob->size());
    std::transform(blob->begin(), blob->end(), bytes.begin(), [](int64_t b) { return static_cast<uint8_t>(b); });
    charsmap_ = std::make_unique<CharsMap>(std::move(bytes));
  }

  double min_score = DBL_MAX;
  std::vector<std::string> pieces(static_cast<size_t>(n));
  for (int32_t id = 0; id < n; ++id) {
    const TokenType t = vocab_.type(id);
    const std::string& text = vocab_.text(id);
    if (t == TokenType::kNormal) min_score = std::min(min_score, double(vocab_.score(id)));
    if (t == TokenType::kNormal || t == TokenType::kUserDefined || t == TokenType::kUnused) pieces_->add(text, id);
    if (t == TokenType::kUserDefined) user_defined_.add(text, id);
    if (t == TokenType::kByte && text.size() == 6 && text.compare(0, 3, "<0x") == 0 && text[5] == '>' &&
        hex_digit(text[3]) >= 0 && hex_digit(text[4]) >= 0) {
      pieces[size_t(id)].assign(1, char(hex_digit(text[3]) * 16 + hex_digit(text[4])));
      continue;
    }
    for (size_t p = 0; p < text.size();) {  // "▁" decodes to a space
      if (text.compare(p, kSpace.size(), kSpace) == 0) {
        pieces[size_t(id)] += ' ';
        p += kSpace.size();
      } else {
        pieces[size_t(id)] += text[p++];
      }
    }
  }
  unknown_score_ = (min_score == DBL_MAX ? 0.0 : min_score) - 10.0;
  set_pieces(std::move(pieces));
}

UnigramTokenizer::~UnigramTokenizer() = default;

std::string UnigramTokenizer::normalize(std::string_view text) const {
  std::string out;
  out.reserve(text.size() * 3);
  bool prepended = false, in_word = false;
  auto emit = [&](std::string_view part) {
    for (char c : part) {
      if (c != ' ') {
        if (!in_word) {
          in_word = true;
          if ((add_space_prefix_ && !prepended) || remove_extra_spaces_) {
            out += kSpace;
            prepended = true;
          }
        }
        out += c;
      } else {
        in_word = false;
        if (!remove_extra_spaces_) out += kSpace;
      }
    }
  };
  for (size_t pos = 0; pos < text.size();) {
    if (const size_t len = user_defined_.match_at(text, pos).first; len > 0) {  // kept verbatim
      emit(text.substr(pos, len));
      pos += len;
      continue;
    }
    if (charsmap_) {
      const auto [len, replacement] = charsmap_->longest_prefix(text, pos);
      if (len > 0) {
        emit(replacement);
        pos += len;
        continue;
      }
    }
    if (const size_t len = valid_utf8_at(text, pos); len > 0) {
      emit(text.substr(pos, len));
      pos += len;
    } else {  // a malformed byte becomes U+FFFD
      emit("\xEF\xBF\xBD");
      pos += 1;
    }
  }
  return out;
}

void UnigramTokenizer::encode_raw(std::string_view text, bool, std::vector<int32_t>& out) const {
  const std::string s = normalize(text);
  if (s.empty()) return;
  // best[i]: the highest-scoring cut of s[0, i): its last token, where that token starts, the sum.
  struct Best {
    int32_t token;
    size_t from;
    double score;
  };
  std::vector<Best> best(s.size() + 1, Best{vocab_.unk, 0, -DBL_MAX});
  best[0].score = 0;
  for (size_t at = 0; at < s.size();) {
    const size_t cp_len = std::min(utf8_len(static_cast<unsigned char>(s[at])), s.size() - at);
    const double base = best[at].score;
    bool whole_cp = false;
    int32_t node = 0;
    for (size_t end = at; end < s.size();) {
      node = pieces_->child(node, static_cast<unsigned char>(s[end++]));
      if (node < 0) break;
      const int32_t id = pieces_->token(node);
      if (id < 0) continue;
      if (end - at == cp_len) whole_cp = true;
      // User-defined tokens score 0 so that they win; normal scores are log probabilities.
      const double score = base + (vocab_.type(id) == TokenType::kUserDefined ? 0.0 : double(vocab_.score(id)));
      if (score > best[end].score) best[end] = Best{id, at, score};
    }
    if (!whole_cp && base + unknown_score_ > best[at + cp_len].score)
      best[at + cp_len] = Best{vocab_.unk, at, base + unknown_score_};
    at += cp_len;
  }
  // Walk back from the end; a run of unknown tokens becomes one.
  const size_t first = out.size();
  bool prev_unknown = false;
  for (size_t at = s.size(); at > 0; at = best[at].from) {
    const bool unknown = best[at].token == vocab_.unk;
    if (!(prev_unknown && unknown)) out.push_back(best[at].token);
    prev_unknown = unknown;
  }
  std::reverse(out.begin() + std::ptrdiff_t(first), out.end());
}

}  // namespace pagoda::tok
