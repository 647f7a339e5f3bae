#include "engine/tokenizer/vocab.h"

#include <string>

#include "engine/gguf.h"

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

  v.ids_.reserve(static_cast<size_t>(n) * 2);
  for (int32_t i = 0; i < n; ++i) v.ids_.emplace(v.text_[i], i);

  v.bos = read_id(f, "tokenizer.ggml.bos_token_id", spm ? 1 : -1, n, false);
  v.eos = read_id(f, "tokenizer.ggml.eos_token_id", spm ? 2 : -1, n, false);
  v.unk = read_id(f, "tokenizer.ggml.unknown_token_id", spm ? 0 : -1, n, false);
  v.eot = read_id(f, "tokenizer.ggml.eot_token_id", -1, n, false);
  v.eom = read_id(f, "tokenizer.ggml.eom_token_id", -1, n, false);
  v.pad = read_id(f, "tokenizer.ggml.padding_token_id", -1, n, true);
  v.add_bos = f.get_bool("tokenizer.ggml.add_bos_token").value_or(spm);
  v.add_eos = f.get_bool("tokenizer.ggml.add_eos_token").value_or(false);
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
  return v;
}

int32_t Vocab::find(std::string_view text) const {
  const auto it = ids_.find(text);
  return it == ids_.end() ? -1 : it->second;
}

void Vocab::partition(std::string_view text, bool parse_special, std::vector<Fragment>& out) const {
  const TokenTextMatcher& m = parse_special ? all_special_ : user_defined_;
  if (m.empty()) {
    if (!text.empty()) out.push_back({-1, text});
    return;
  }
  size_t raw_start = 0;
  for (size_t pos = 0; pos < text.size();) {
    const auto [len, id] = m.match_at(text, pos);
    if (len == 0) {
      ++pos;
      continue;
    }
    if (raw_start < pos) out.push_back({-1, text.substr(raw_start, pos - raw_start)});
    out.push_back({id, text.substr(pos, len)});
    pos += len;
    raw_start = pos;
  }
  if (raw_start < text.size()) out.push_back({-1, text.substr(raw_start)});
}

}  // namespace pagoda::tok
