#include "engine/tokenizer/vocab.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <string>
#include <tuple>

#include "engine/gguf/gguf.h"
#include "engine/tokenizer/unicode.h"

namespace pagoda::tok {
namespace {

// Texts of end-of-turn tokens used by common chat formats; such control tokens end generation
// even when the file names no EOT id (as llama.cpp does).
constexpr const char* kEndOfTurnTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<EOT>",
    "<|end_of_text|>", "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
};

// A special token id from the file, or `fallback` when the key is absent. Throws for an id
// outside the vocabulary (padding ids outside it are common in real files and are dropped).
int32_t read_id(const gguf::GgufFile& f, const char* key, int32_t fallback, int32_t n_vocab,
                bool lenient) {
  const auto v = f.get_int(key);
  if (!v) return fallback < n_vocab ? fallback : -1;
  if (*v < 0 || *v >= n_vocab) {
    if (lenient || *v == -1) return -1;
    throw TokenizerError("GGUF key " + std::string(key) + " = " + std::to_string(*v) +
                         " is outside the vocabulary (" + std::to_string(n_vocab) + " tokens)");
  }
  return static_cast<int32_t>(*v);
}

// Whether the file holds a Phi-3 family model (Phi-3, Phi-3.5): by architecture, or by name as
// llama.cpp detects it (a Phi-3 vocabulary may sit in a file of another architecture).
bool is_phi3_family(const gguf::GgufFile& f) {
  if (f.get_string("general.architecture").value_or("") == "phi3") return true;
  std::string name = f.get_string("general.name").value_or("");
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos;
}

// Sets the strip flags that the model family's Hugging Face tokenizer gives its added tokens.
// Phi-3's SentencePiece tokenizer marks its chat tokens ("<|user|>", "<|end|>", "<|assistant|>",
// ...) and "</s>" rstrip, but not "<unk>", "<s>" or "<|endoftext|>": the "\n" its chat template
// writes after "<|user|>" is dropped, and the message text gets SentencePiece's leading space.
// (Phi-3 GGUFs with a byte-level BPE vocabulary, e.g. Phi-4, do not strip.)
void apply_family_strip_rules(const gguf::GgufFile& f, bool spm, Vocab& v) {
  if (!spm || !is_phi3_family(f)) return;
  for (int32_t id = 0; id < v.size(); ++id) {
    const TokenType t = v.type(id);
    if (t != TokenType::kControl && t != TokenType::kUserDefined && t != TokenType::kUnknown) continue;
    const std::string& text = v.text(id);
    if (text == "<unk>" || text == "<s>" || text == "<|endoftext|>") continue;
    v.set_strip(id, kStripRight);
  }
}

}  // namespace

void TokenTextMatcher::add(std::string_view text, int32_t id) {
  if (text.empty()) return;
  int32_t node = 0;
  for (unsigned char c : text) {
    const uint64_t key = static_cast<uint64_t>(node) << 8 | c;
    auto it = edges_.find(key);
    if (it == edges_.end()) {
      nodes_.push_back(Node{});
      it = edges_.emplace(key, static_cast<int32_t>(nodes_.size() - 1)).first;
    }
    node = it->second;
  }
  if (nodes_[node].token < 0) nodes_[node].token = id;  // the first token with a text wins
  first_byte_[static_cast<unsigned char>(text[0])] = true;
}

std::pair<size_t, int32_t> TokenTextMatcher::match_at(std::string_view s, size_t pos) const {
  if (!first_byte_[static_cast<unsigned char>(s[pos])]) return {0, -1};
  std::pair<size_t, int32_t> best{0, -1};
  int32_t node = 0;
  for (size_t i = pos; i < s.size(); ++i) {
    const auto it = edges_.find(static_cast<uint64_t>(node) << 8 | static_cast<unsigned char>(s[i]));
    if (it == edges_.end()) break;
    node = it->second;
    if (nodes_[node].token >= 0) best = {i + 1 - pos, nodes_[node].token};
  }
  return best;
}

Vocab Vocab::load(const gguf::GgufFile& f, bool spm) {
  Vocab v;
  const auto* tokens = f.get_string_array("tokenizer.ggml.tokens");
  if (tokens == nullptr || tokens->empty())
    throw TokenizerError("GGUF file has no tokenizer.ggml.tokens (a non-empty string array)");
  const auto n = static_cast<int32_t>(tokens->size());
  v.text_ = *tokens;

  v.type_.assign(n, TokenType::kNormal);
  if (const auto* types = f.get_int_array("tokenizer.ggml.token_type")) {
    if (static_cast<int32_t>(types->size()) != n)
      throw TokenizerError("tokenizer.ggml.token_type has " + std::to_string(types->size()) +
                           " entries but there are " + std::to_string(n) + " tokens");
    for (int32_t i = 0; i < n; ++i) {
      const int64_t t = (*types)[i];
      if (t < 0 || t > 6)
        throw TokenizerError("tokenizer.ggml.token_type[" + std::to_string(i) + "] = " +
                             std::to_string(t) + " is not a known token type (0..6)");
      v.type_[i] = static_cast<TokenType>(t);
    }
  }
  if (const auto* scores = f.get_float_array("tokenizer.ggml.scores")) {
    if (static_cast<int32_t>(scores->size()) != n)
      throw TokenizerError("tokenizer.ggml.scores has " + std::to_string(scores->size()) +
                           " entries but there are " + std::to_string(n) + " tokens");
    v.score_.assign(scores->begin(), scores->end());
  }

  v.ids_.build(v.text_);
  for (const auto& t : v.text_) v.max_len_ = std::max(v.max_len_, t.size());

  v.bos = read_id(f, "tokenizer.ggml.bos_token_id", spm ? 1 : -1, n, false);
  v.eos = read_id(f, "tokenizer.ggml.eos_token_id", spm ? 2 : -1, n, false);
  v.unk = read_id(f, "tokenizer.ggml.unknown_token_id", spm ? 0 : -1, n, false);
  v.eot = read_id(f, "tokenizer.ggml.eot_token_id", -1, n, false);
  v.eom = read_id(f, "tokenizer.ggml.eom_token_id", -1, n, false);
  v.pad = read_id(f, "tokenizer.ggml.padding_token_id", -1, n, true);
  v.sep = read_id(f, "tokenizer.ggml.seperator_token_id", -1, n, true);
  v.add_bos = f.get_bool("tokenizer.ggml.add_bos_token").value_or(spm);
  v.add_eos = f.get_bool("tokenizer.ggml.add_eos_token").value_or(false);
  v.add_sep = f.get_bool("tokenizer.ggml.add_sep_token").value_or(false) && v.sep >= 0;
  if (v.add_bos && v.bos < 0)
    throw TokenizerError("tokenizer.ggml.add_bos_token is set but the vocabulary has no BOS token");
  if (v.add_eos && v.eos < 0)
    throw TokenizerError("tokenizer.ggml.add_eos_token is set but the vocabulary has no EOS token");

  v.eog.assign(n, false);
  for (int32_t id : {v.eos, v.eot, v.eom})
    if (id >= 0) v.eog[id] = true;
  for (const char* t : kEndOfTurnTexts) {
    const int32_t id = v.find(t);
    if (id >= 0 && (v.type_[id] == TokenType::kControl || v.type_[id] == TokenType::kUserDefined)) {
      v.eog[id] = true;
      if (v.eot < 0 && id != v.eos) v.eot = id;
    }
  }

  for (int32_t i = 0; i < n; ++i) {
    const TokenType t = v.type_[i];
    if (t == TokenType::kUserDefined) v.user_defined_.add(v.text_[i], i);
    if (t == TokenType::kUserDefined || t == TokenType::kControl || t == TokenType::kUnknown)
      v.all_special_.add(v.text_[i], i);
  }
  apply_family_strip_rules(f, spm, v);
  return v;
}

void Vocab::set_strip(int32_t id, uint8_t flags) {
  if (!valid(id)) throw TokenizerError("set_strip: token id " + std::to_string(id) + " is outside the vocabulary");
  if (strip_.empty()) {
    if (flags == kStripNone) return;
    strip_.assign(text_.size(), kStripNone);
  }
  strip_[id] = flags;
}

uint64_t TokenIndex::hash(std::string_view s) {
  // FNV-1a over 8-byte words then the tail, finished with a multiply-xorshift mix.
  uint64_t h = 0xCBF29CE484222325ull ^ s.size();
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = (h ^ w) * 0x100000001B3ull;
    h ^= h >> 29;
  }
  uint64_t tail = 0;
  if (i < s.size()) std::memcpy(&tail, s.data() + i, s.size() - i);
  h = (h ^ tail) * 0x9E3779B97F4A7C15ull;
  return h ^ (h >> 32);
}

void TokenIndex::build(const std::vector<std::string>& texts) {
  size_t cap = 16;
  while (cap < texts.size() * 2) cap *= 2;
  slots_.assign(cap, -1);
  tags_.assign(cap, 0);
  mask_ = cap - 1;
  for (size_t id = 0; id < texts.size(); ++id) {
    const uint64_t h = hash(texts[id]);
    for (uint64_t slot = h & mask_;; slot = (slot + 1) & mask_) {
      if (slots_[slot] < 0) {
        slots_[slot] = static_cast<int32_t>(id);
        tags_[slot] = static_cast<uint32_t>(h >> 32);
        break;
      }
      if (tags_[slot] == static_cast<uint32_t>(h >> 32) && texts[slots_[slot]] == texts[id])
        break;  // duplicate text: the lower id keeps it
    }
  }
}

int32_t TokenIndex::find(std::string_view s, const std::vector<std::string>& texts) const {
  if (slots_.empty()) return -1;
  const uint64_t h = hash(s);
  const auto tag = static_cast<uint32_t>(h >> 32);
  for (uint64_t slot = h & mask_;; slot = (slot + 1) & mask_) {
    const int32_t id = slots_[slot];
    if (id < 0) return -1;
    if (tags_[slot] == tag && texts[id] == s) return id;
  }
}

namespace {

// Byte length of the run of whitespace characters in s[begin, end) that ends at `end`.
size_t whitespace_before(std::string_view s, size_t begin, size_t end) {
  size_t p = end;
  while (p > begin) {
    // Step back to the start of the previous character (at most 3 continuation bytes).
    size_t q = p - 1;
    while (q > begin && p - q < 4 && (static_cast<unsigned char>(s[q]) & 0xC0) == 0x80) --q;
    size_t len = 0;
    const uint32_t cp = unicode::decode(s, q, len);
    if (q + len != p || cp == unicode::kInvalid || !(unicode::flags(cp) & unicode::kWhitespace)) break;
    p = q;
  }
  return end - p;
}

// Byte length of the run of whitespace characters that starts at s[begin].
size_t whitespace_after(std::string_view s, size_t begin) {
  size_t p = begin;
  while (p < s.size()) {
    size_t len = 0;
    const uint32_t cp = unicode::decode(s, p, len);
    if (cp == unicode::kInvalid || !(unicode::flags(cp) & unicode::kWhitespace)) break;
    p += len;
  }
  return p - begin;
}

}  // namespace

void Vocab::partition(std::string_view text, bool parse_special, std::vector<Fragment>& out,
                      const std::vector<std::pair<size_t, size_t>>* plain) const {
  const TokenTextMatcher& m = parse_special ? all_special_ : user_defined_;
  if (m.empty()) {
    if (!text.empty()) out.push_back({-1, text});
    return;
  }
  size_t raw_start = 0;
  size_t next_plain = 0;  // the first plain range that does not end before pos
  for (size_t pos = 0; pos < text.size();) {
    auto [len, id] = m.match_at(text, pos);
    if (len > 0 && plain) {
      while (next_plain < plain->size() && (*plain)[next_plain].second <= pos) ++next_plain;
      if (next_plain < plain->size() && (*plain)[next_plain].first < pos + len)
        std::tie(len, id) = user_defined_.match_at(text, pos);
    }
    if (len == 0) {
      ++pos;
      continue;
    }
    // Whitespace is stripped only from raw text, never from a neighbouring token.
    const uint8_t st = strip(id);
    const size_t raw_end = st & kStripLeft ? pos - whitespace_before(text, raw_start, pos) : pos;
    if (raw_start < raw_end) out.push_back({-1, text.substr(raw_start, raw_end - raw_start)});
    out.push_back({id, text.substr(pos, len)});
    pos += len;
    if (st & kStripRight) pos += whitespace_after(text, pos);
    raw_start = pos;
  }
  if (raw_start < text.size()) out.push_back({-1, text.substr(raw_start)});
}

}  // namespace pagoda::tok
