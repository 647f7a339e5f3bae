// Random-weight encoder GGUF files (`pagoda make-model --arch bert|nomic-bert|xlm-roberta`),
// laid out as llama.cpp's converter writes them, with a generated vocabulary (encoder_vocab.h)
// or every tokenizer.* key copied from another GGUF. xlm-roberta is what llama.cpp makes of an
// XLM-RoBERTa model (bge-m3, bge-reranker-v2-m3): general.architecture "bert", a Unigram
// vocabulary, one token type, and position embeddings already cut to start at RoBERTa's first
// position (pad id + 1), so that row 0 serves the first token. Pooling::Rank adds the
// classification head of a cross-encoder reranker (cls.weight/bias: dim x dim, then
// cls.output.weight/bias: one score).
#pragma once

#include <cstdint>
#include <string>

#include "engine/encoder/bert_config.h"

namespace pagoda::encoder {

struct BertSpec {
  EncoderArch arch = EncoderArch::Bert;
  bool xlm_roberta = false;       // with EncoderArch::Bert: Unigram vocabulary, one token type
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
