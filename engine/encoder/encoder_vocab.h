// The generated vocabularies of random encoder files (`pagoda make-model`): a small WordPiece
// one (tokenizer.ggml.model "bert") and a seeded random Unigram one ("t5", as llama.cpp's
// converter writes XLM-RoBERTa / bge-m3 vocabularies), with the special-token keys of each.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pagoda::gguf { class GgufWriter; }

namespace pagoda::encoder {

// Both set every tokenizer.* key and return the number of tokens.
// WordPiece: [PAD] [UNK] [CLS] [SEP] [MASK], every ASCII letter (lowercase), digit and mark as a
// word start and as a continuation, and a few whole words.
size_t write_wordpiece_vocab(gguf::GgufWriter& w);
// Unigram: <s> <pad> </s> <unk> first (XLM-RoBERTa's ids), every printable ASCII character
// with and without the "▁" word mark, a few accented letters and CJK ideographs, a few hundred
// random lowercase pieces of 2 to 6 letters (some with "▁"), each with a random log-probability
// score, one user-defined token and <mask> last. Adds BOS and EOS, a separator between the
// texts of a pair, the space prefix and whitespace merging, as XLM-RoBERTa files do.
size_t write_unigram_vocab(gguf::GgufWriter& w, uint64_t seed);

}  // namespace pagoda::encoder
