#include "engine/tokenizer/spm.h"

#include <algorithm>
#include <cstdio>

#include "engine/gguf/gguf.h"
#include "engine/tokenizer/unicode.h"

namespace pagoda::tok {
namespace {

constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581 "▁"

// Replaces every "▁" in `s` with a space.
std::string unescape_spaces(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) {
    if (s.compare(pos, kSpaceMark.size(), kSpaceMark) == 0) {
      out += ' ';
      pos += kSpaceMark.size();
    } else {
      out += s[pos++];
    }
  }
  return out;
}

// The byte a "<0xXX>" token text stands for, or -1.
int parse_byte_token(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

// A symbol: a run of bytes of the escaped text, linked to its live neighbours.
struct Symbol {
  uint32_t off;
  uint32_t len;  // 0 once merged into its left neighbour
  int32_t prev;
  int32_t next;
};

// A candidate merge of symbol `left` with its right neighbour into a piece of `len` bytes.
struct Bigram {
  float score;
  int32_t left;
  uint32_t len;
};

// Heap order: highest score first, then the leftmost pair.
struct BigramLess {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

}  // namespace

SpmTokenizer::SpmTokenizer(const gguf::GgufFile& file) : TokenizerBase(Vocab::load(file, true)) {
  add_space_prefix_ = file.get_bool("tokenizer.ggml.add_space_prefix").value_or(true);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    byte_token_[b] = vocab_.find(name);
  }
  split_words_ = true;
  for (int32_t id = 0; id < vocab_.size() && split_words_; ++id) {
    const std::string& t = vocab_.text(id);
    size_t lead = 0;
    while (t.compare(lead, kSpaceMark.size(), kSpaceMark) == 0) lead += kSpaceMark.size();
    if (mergeable(t) >= 0 && t.find(kSpaceMark, lead) != std::string::npos) split_words_ = false;
  }

  std::vector<std::string> pieces(vocab_.size());
  for (int32_t id = 0; id < vocab_.size(); ++id) {
    const std::string& t = vocab_.text(id);
    switch (vocab_.type(id)) {
      case TokenType::kByte: {
        const int b = parse_byte_token(t);
        pieces[id] = b >= 0 ? std::string(1, static_cast<char>(b)) : t;
        break;
      }
      case TokenType::kUnused:
        break;
      case TokenType::kControl:
      case TokenType::kUnknown:
      case TokenType::kUserDefined:
        pieces[id] = t;
        break;
      case TokenType::kNormal:
      case TokenType::kUndefined:
        pieces[id] = unescape_spaces(t);
        break;
    }
  }
  set_pieces(std::move(pieces));
}

int32_t SpmTokenizer::mergeable(std::string_view piece) const {
  const int32_t id = vocab_.find(piece);
  if (id < 0) return -1;
  const TokenType t = vocab_.type(id);
  return t == TokenType::kNormal || t == TokenType::kUserDefined || t == TokenType::kUndefined ? id
                                                                                                : -1;
}

void SpmTokenizer::byte_fallback(std::string_view bytes, std::vector<int32_t>& out) const {
  for (unsigned char b : bytes) {
    const int32_t id = byte_token_[b] >= 0 ? byte_token_[b] : vocab_.unk;
    if (id < 0) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", b);
      throw TokenizerError(std::string("cannot encode byte ") + hex +
                           ": the vocabulary has neither a byte token for it nor an unknown token");
    }
    out.push_back(id);
  }
}

struct SpmTokenizer::Scratch {
  std::vector<Symbol> sym;
  std::vector<Bigram> heap;
};

void SpmTokenizer::encode_raw(std::string_view text, bool at_start,
                              std::vector<int32_t>& out) const {
  std::string s;
  s.reserve(text.size() + text.size() / 2 + 3);
  if (add_space_prefix_ && at_start) s += kSpaceMark;
  for (char c : text) {
    if (c == ' ') {
      s += kSpaceMark;
    } else {
      s += c;
    }
  }
  Scratch sc;
  if (!split_words_) {
    encode_segment(s, sc, out);
    return;
  }
  // Cut before every "▁" that follows some other character.
  size_t word = 0;
  for (size_t pos = s.find(kSpaceMark); pos != std::string::npos; pos = s.find(kSpaceMark, pos)) {
    if (pos > word && s.compare(pos - kSpaceMark.size(), kSpaceMark.size(), kSpaceMark) != 0) {
      encode_segment(std::string_view(s).substr(word, pos - word), sc, out);
      word = pos;
    }
    pos += kSpaceMark.size();
  }
  encode_segment(std::string_view(s).substr(word), sc, out);
}

void SpmTokenizer::encode_segment(std::string_view s, Scratch& sc, std::vector<int32_t>& out) const {
  // One symbol per character (an invalid byte is a character of its own).
  auto& sym = sc.sym;
  sym.clear();
  for (size_t pos = 0; pos < s.size();) {
    size_t len = 0;
    unicode::decode(s, pos, len);
    const auto n = static_cast<int32_t>(sym.size());
    sym.push_back({static_cast<uint32_t>(pos), static_cast<uint32_t>(len), n - 1, -1});
    if (n > 0) sym[n - 1].next = n;
    pos += len;
  }

  auto& heap = sc.heap;
  heap.clear();
  const size_t max_len = vocab_.max_token_len();
  auto try_add = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const uint32_t len = sym[l].len + sym[r].len;
    if (len > max_len) return;
    const int32_t id = mergeable(s.substr(sym[l].off, len));
    if (id < 0) return;
    heap.push_back({vocab_.score(id), l, len});
    std::push_heap(heap.begin(), heap.end(), BigramLess{});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(sym.size()); ++i) try_add(i - 1, i);

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), BigramLess{});
    const Bigram b = heap.back();
    heap.pop_back();
    Symbol& left = sym[b.left];
    // Stale entries: the left symbol was merged away, or either side has grown since.
    if (left.len == 0 || left.next < 0 || left.len + sym[left.next].len != b.len) continue;
    Symbol& right = sym[left.next];
    left.len += right.len;
    right.len = 0;
    left.next = right.next;
    if (right.next >= 0) sym[right.next].prev = b.left;
    try_add(left.prev, b.left);
    try_add(b.left, left.next);
  }

  for (int32_t i = sym.empty() ? -1 : 0; i >= 0; i = sym[i].next) {
    const std::string_view piece = s.substr(sym[i].off, sym[i].len);
    const int32_t id = mergeable(piece);
    if (id >= 0) {
      out.push_back(id);
    } else {
      byte_fallback(piece, out);
    }
  }
}

}  // namespace pagoda::tok
