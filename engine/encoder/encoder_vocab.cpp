// write_wordpiece_vocab and write_unigram_vocab: the generated encoder vocabularies.
#include "engine/encoder/encoder_vocab.h"

#include <random>
#include <set>
#include <string>
#include <vector>

#include "engine/gguf/gguf.h"

namespace pagoda::encoder {

namespace {

constexpr int kTokenNormal = 1, kTokenUnknown = 2, kTokenControl = 3, kTokenUserDefined = 4;
const std::string kWordStart = "\xE2\x96\x81";  // U+2581 marks a word-initial piece

void set_tokens(gguf::GgufWriter& w, const char* model, const std::vector<std::string>& tokens,
                const std::vector<int64_t>& types) {
  w.set("tokenizer.ggml.model", gguf::Value::from_string(model));
  w.set("tokenizer.ggml.pre", gguf::Value::from_string("default"));
  w.set("tokenizer.ggml.tokens", gguf::Value::string_array(tokens));
  w.set("tokenizer.ggml.token_type", gguf::Value::i32_array(types));
}

}  // namespace

size_t write_wordpiece_vocab(gguf::GgufWriter& w) {
  std::vector<std::string> tokens = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
  std::vector<int64_t> types = {kTokenControl, kTokenUnknown, kTokenControl, kTokenControl, kTokenControl};
  for (int c = 0x21; c < 0x7F; ++c) {
    if (c >= 'A' && c <= 'Z') continue;  // the normalizer lowercases
    tokens.push_back(kWordStart + char(c)), types.push_back(kTokenNormal);
    tokens.push_back(std::string(1, char(c))), types.push_back(kTokenNormal);
  }
  for (const char* word : {"the", "hello", "world", "cat", "dog", "sat", "on", "mat", "paris", "capital",
                           "france", "is", "of", "what", "ing", "ed"}) {
    tokens.push_back(kWordStart + word), types.push_back(kTokenNormal);
  }
  set_tokens(w, "bert", tokens, types);
  w.set("tokenizer.ggml.unknown_token_id", gguf::Value::from_u32(1));
  w.set("tokenizer.ggml.cls_token_id", gguf::Value::from_u32(2));
  // llama.cpp takes a WordPiece file's BOS from bos_token_id alone (else id 101, [CLS] in the
  // real BERT vocabulary), so the generated one names [CLS] there too.
  w.set("tokenizer.ggml.bos_token_id", gguf::Value::from_u32(2));
  w.set("tokenizer.ggml.seperator_token_id", gguf::Value::from_u32(3));
  w.set("tokenizer.ggml.padding_token_id", gguf::Value::from_u32(0));
  w.set("tokenizer.ggml.mask_token_id", gguf::Value::from_u32(4));
  return tokens.size();
}

size_t write_unigram_vocab(gguf::GgufWriter& w, uint64_t seed) {
  std::vector<std::string> tokens = {"<s>", "<pad>", "</s>", "<unk>"};
  std::vector<int64_t> types = {kTokenControl, kTokenControl, kTokenControl, kTokenUnknown};
  std::vector<double> scores = {0, 0, 0, 0};
  std::mt19937_64 rng(seed ^ 0x5EED0F0A1CEull);
  std::uniform_real_distribution<double> jitter(-1.5, 1.5);
  std::set<std::string> seen(tokens.begin(), tokens.end());
  // Longer pieces are rarer: a score falling with the length, then jittered.
  auto add = [&](const std::string& t, double base) {
    if (!seen.insert(t).second) return;
    tokens.push_back(t), types.push_back(kTokenNormal), scores.push_back(base + jitter(rng));
  };
  add(kWordStart, -4);
  for (int c = 0x21; c < 0x7F; ++c) {
    add(std::string(1, char(c)), -8);
    add(kWordStart + char(c), -9);
  }
  for (const char* s : {"\xC3\xA9", "\xC3\xBC", "\xC3\xB1", "\xE4\xB8\xAD", "\xE6\x96\x87", "\xE8\xAA\x9E"})  // é ü ñ 中 文 語
    add(s, -10), add(kWordStart + s, -11);
  std::uniform_int_distribution<int> len(2, 6), letter('a', 'z'), coin(0, 2);
  for (int i = 0; i < 400; ++i) {
    std::string piece;
    for (int n = len(rng); n > 0; --n) piece += char(letter(rng));
    const bool start = coin(rng) != 0;
    add(start ? kWordStart + piece : piece, -6.0 - double(piece.size()));
  }
  for (const char* word : {"the", "hello", "world", "cat", "dog", "sat", "on", "mat", "paris", "capital"})
    add(kWordStart + word, -5);
  tokens.push_back("<|user|>"), types.push_back(kTokenUserDefined), scores.push_back(0);
  tokens.push_back("<mask>"), types.push_back(kTokenControl), scores.push_back(0);
  set_tokens(w, "t5", tokens, types);
  w.set("tokenizer.ggml.scores", gguf::Value::f32_array(scores));
  w.set("tokenizer.ggml.add_space_prefix", gguf::Value::from_bool(true));
  w.set("tokenizer.ggml.remove_extra_whitespaces", gguf::Value::from_bool(true));
  w.set("tokenizer.ggml.bos_token_id", gguf::Value::from_u32(0));
  w.set("tokenizer.ggml.padding_token_id", gguf::Value::from_u32(1));
  w.set("tokenizer.ggml.eos_token_id", gguf::Value::from_u32(2));
  w.set("tokenizer.ggml.seperator_token_id", gguf::Value::from_u32(2));
  w.set("tokenizer.ggml.cls_token_id", gguf::Value::from_u32(0));
  w.set("tokenizer.ggml.unknown_token_id", gguf::Value::from_u32(3));
  w.set("tokenizer.ggml.mask_token_id", gguf::Value::from_u32(uint32_t(tokens.size() - 1)));
  w.set("tokenizer.ggml.add_bos_token", gguf::Value::from_bool(true));
  w.set("tokenizer.ggml.add_eos_token", gguf::Value::from_bool(true));
  w.set("tokenizer.ggml.add_sep_token", gguf::Value::from_bool(true));
  return tokens.size();
}

}  // namespace pagoda::encoder
