// Random-weight BERT / nomic-bert encoder GGUF files (`pagoda make-model --arch bert|nomic-bert`), laid out as
// llama.cpp's converter writes them, with a WordPiece vocabulary: a small generated one (the
// special tokens, every ASCII letter, digit and punctuation mark as a word start and as a
// continuation, and a few whole words) or every tokenizer.* key copied from another GGUF.
#pragma once

#include <cstdint>
#include <string>

#include "engine/encoder/bert_config.h"

namespace pagoda::encoder {

struct BertSpec {
  EncoderArch arch = EncoderArch::Bert;
  std::string name = "pagoda-random-bert";
  int n_layers = 2, dim = 64, ff_dim = 128, n_heads = 4, ctx = 128;
  Pooling pooling = Pooling::Mean;
  GgmlType type = GgmlType::F16;  // matrices and embedding tables; norms and biases are F32
  uint64_t seed = 0;
  std::string vocab_from;         // GGUF whose tokenizer.* keys are copied; empty: generated
};

// Writes the model to `path`; throws EncoderError (bad spec) or gguf::GgufError (I/O).
void write_bert_model(const BertSpec& spec, const std::string& path);

}  // namespace pagoda::encoder
