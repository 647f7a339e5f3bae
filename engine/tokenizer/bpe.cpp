#include "engine/tokenizer/bpe.h"

#include <algorithm>
#include <cstdio>
#include <functional>

#include "engine/gguf/gguf.h"
#include "engine/tokenizer/unicode.h"

namespace pagoda::tok {
namespace {

// Original bytes of a byte-level token text (each code point maps back to one byte; a code
// point outside the map is kept as its UTF-8 form).
std::string decode_byte_level(std::string_view t) {
  std::string out;
  out.reserve(t.size());
  for (size_t pos = 0; pos < t.size();) {
    size_t len = 0;
    const uint32_t cp = unicode::decode(t, pos, len);
    const int b = cp == unicode::kInvalid ? -1 : unicode::cp_to_byte(cp);
    if (b >= 0) {
      out += static_cast<char>(b);
    } else {
      out.append(t.substr(pos, len));
    }
    pos += len;
  }
  return out;
}

}  // namespace

void MergeTable::build(const std::vector<std::pair<uint64_t, Merge>>& merges) {
  size_t cap = 16;
  while (cap < merges.size() * 2) cap *= 2;
  keys_.assign(cap, UINT64_MAX);
  values_.assign(cap, Merge{});
  mask_ = cap - 1;
  count_ = 0;
  for (const auto& [k, m] : merges) {
    uint64_t slot = (k * 0x9E3779B97F4A7C15ull >> 20) & mask_;
    while (keys_[slot] != UINT64_MAX && keys_[slot] != k) slot = (slot + 1) & mask_;
    if (keys_[slot] == k) continue;  // a repeated pair keeps its first (lowest) rank
    keys_[slot] = k;
    values_[slot] = m;
    ++count_;
  }
}

MergeTable::Merge MergeTable::find(int32_t left, int32_t right) const {
  if (count_ == 0) return {};
  const uint64_t k = key(left, right);
  for (uint64_t slot = (k * 0x9E3779B97F4A7C15ull >> 20) & mask_;; slot = (slot + 1) & mask_) {
    if (keys_[slot] == k) return values_[slot];
    if (keys_[slot] == UINT64_MAX) return {};
  }
}

struct BpeTokenizer::Scratch {
  std::vector<Span> words;
  std::vector<int32_t> ids, prev, next;
  std::vector<uint64_t> heap;  // (rank << 32 | left symbol index), smallest first
  std::string mapped;
};

BpeTokenizer::BpeTokenizer(const gguf::GgufFile& file) : TokenizerBase(Vocab::load(file, false)) {
  // Like llama.cpp: a file converted before tokenizer.ggml.pre existed gets the "default" rules,
  // with a warning; an unknown name is an error (by_name lists the supported ones).
  const auto pre_name = file.get_string("tokenizer.ggml.pre");
  if (!pre_name)
    warnings_.push_back("GGUF file has no tokenizer.ggml.pre; using the \"default\" pre-tokenizer, "
                        "which may split text differently from the model's own tokenizer "
                        "(re-convert the model to fix this)");
  pre_ = PreTokenizer::by_name(pre_name.value_or("default"));
  if (pre_.add_bos_by_default() && !file.get_bool("tokenizer.ggml.add_bos_token") && vocab_.bos >= 0)
    vocab_.add_bos = true;

  for (int b = 0; b < 256; ++b) {
    std::string t;
    unicode::append_utf8(t, unicode::byte_to_cp(static_cast<uint8_t>(b)));
    int32_t id = vocab_.find(t);
    if (id < 0) {  // vocabularies that spell bytes SentencePiece-style
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      id = vocab_.find(name);
    }
    // Only a normal or byte token stands for a byte: a user-defined token with the same text
    // (DeepSeek adds "ÿ" and friends) is raw text and would decode to other bytes.
    const bool usable = id >= 0 && (vocab_.type(id) == TokenType::kNormal ||
                                    vocab_.type(id) == TokenType::kByte ||
                                    vocab_.type(id) == TokenType::kUndefined);
    byte_token_[b] = usable ? id : -1;
  }
  // A byte with no token (typically one that never occurs in valid UTF-8) becomes the unknown
  // token only when there is a real one; otherwise encoding such input is an error.
  unk_for_bytes_ = vocab_.valid(vocab_.unk) && vocab_.type(vocab_.unk) == TokenType::kUnknown
                       ? vocab_.unk
                       : -1;

  if (const auto* merges = file.get_string_array("tokenizer.ggml.merges")) {
    std::vector<std::pair<uint64_t, MergeTable::Merge>> table;
    table.reserve(merges->size());
    for (size_t rank = 0; rank < merges->size(); ++rank) {
      const std::string& m = (*merges)[rank];
      const size_t sp = m.find(' ', 1);
      if (sp == std::string::npos)
        throw TokenizerError("tokenizer.ggml.merges[" + std::to_string(rank) + "] = \"" + m +
                             "\" is not of the form \"left right\"");
      const std::string_view l(m.data(), sp), r(m.data() + sp + 1, m.size() - sp - 1);
      const int32_t li = vocab_.find(l), ri = vocab_.find(r);
      const int32_t res = vocab_.find(std::string(l) + std::string(r));
      if (li < 0 || ri < 0 || res < 0) continue;  // a rule no token sequence can use
      const uint64_t key = static_cast<uint64_t>(static_cast<uint32_t>(li)) << 32 |
                           static_cast<uint32_t>(ri);
      table.push_back({key, {static_cast<int32_t>(rank), res}});
    }
    merges_.build(table);
  }

  std::vector<std::string> pieces(vocab_.size());
  for (int32_t id = 0; id < vocab_.size(); ++id) {
    const std::string& t = vocab_.text(id);
    switch (vocab_.type(id)) {
      case TokenType::kNormal:
      case TokenType::kUndefined:
        pieces[id] = decode_byte_level(t);
        break;
      case TokenType::kByte: {
        unsigned b = 0;
        pieces[id] = std::sscanf(t.c_str(), "<0x%2X>", &b) == 1 ? std::string(1, static_cast<char>(b))
                                                                : decode_byte_level(t);
        break;
      }
      case TokenType::kControl:
      case TokenType::kUnknown:
      case TokenType::kUserDefined:
        pieces[id] = t;  // stored as plain text, not byte-level encoded
        break;
      case TokenType::kUnused:
        break;
    }
  }
  set_pieces(std::move(pieces));
}

void BpeTokenizer::encode_raw(std::string_view text, bool, std::vector<int32_t>& out) const {
  Scratch sc;
  pre_.split(text, sc.words);
  for (const Span& w : sc.words) encode_word(text.substr(w.begin, w.len), sc, out);
}

void BpeTokenizer::encode_word(std::string_view word, Scratch& sc, std::vector<int32_t>& out) const {
  if (pre_.ignore_merges()) {
    sc.mapped.clear();
    for (unsigned char c : word) unicode::append_utf8(sc.mapped, unicode::byte_to_cp(c));
    const int32_t id = vocab_.find(sc.mapped);
    if (id >= 0 && vocab_.type(id) == TokenType::kNormal) {
      out.push_back(id);
      return;
    }
  }
  const auto n = static_cast<int32_t>(word.size());
  if (n == 0) return;
  sc.ids.resize(n);
  sc.prev.resize(n);
  sc.next.resize(n);
  for (int32_t i = 0; i < n; ++i) {
    const auto byte = static_cast<unsigned char>(word[i]);
    const int32_t id = byte_token_[byte] >= 0 ? byte_token_[byte] : unk_for_bytes_;
    if (id < 0) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", byte);
      throw TokenizerError(std::string("cannot encode byte ") + hex +
                           ": the vocabulary has no token for it (the input is not valid UTF-8?)");
    }
    sc.ids[i] = id;
    sc.prev[i] = i - 1;
    sc.next[i] = i + 1 < n ? i + 1 : -1;
  }

  auto& heap = sc.heap;
  heap.clear();
  auto push_pair = [&](int32_t l) {
    const int32_t r = sc.next[l];
    if (r < 0) return;
    const MergeTable::Merge m = merges_.find(sc.ids[l], sc.ids[r]);
    if (m.rank < 0) return;
    heap.push_back(static_cast<uint64_t>(m.rank) << 32 | static_cast<uint32_t>(l));
    std::push_heap(heap.begin(), heap.end(), std::greater<>{});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push_pair(i);

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>{});
    const uint64_t top = heap.back();
    heap.pop_back();
    const auto rank = static_cast<int32_t>(top >> 32);
    const auto l = static_cast<int32_t>(top & 0xFFFFFFFFu);
    const int32_t r = sc.next[l];
    if (sc.ids[l] < 0 || r < 0) continue;  // merged away since it was queued
    const MergeTable::Merge m = merges_.find(sc.ids[l], sc.ids[r]);
    if (m.rank != rank) continue;  // the pair at l changed since it was queued
    sc.ids[l] = m.result;
    sc.ids[r] = -1;
    sc.next[l] = sc.next[r];
    if (sc.next[r] >= 0) sc.prev[sc.next[r]] = l;
    if (sc.prev[l] >= 0) push_pair(sc.prev[l]);
    push_pair(l);
  }
  for (int32_t i = 0; i >= 0; i = sc.next[i]) out.push_back(sc.ids[i]);
}

}  // namespace pagoda::tok
