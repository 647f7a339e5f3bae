// The BERT encoder forward on the CPU: one input (a token sequence) at a time, every token
// attending to every other (no cache: the whole input is one batch), then the pooling the file
// names (mean over the tokens, or the first token's state: CLS) and L2 normalization.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/encoder/bert_config.h"

namespace pagoda::cpu { class ThreadPool; }

namespace pagoda::encoder {

class BertModel {
 public:
  // Reads the configuration of `file` (which must outlive the model; weights are used in place
  // from its mapping). `threads` <= 0: one per hardware thread. Throws EncoderError.
  BertModel(const gguf::GgufFile& file, int threads);
  ~BertModel();

  const BertConfig& config() const { return config_; }

  // The pooled, L2-normalized embedding (config().dim values) of `tokens` (token type 0 at
  // every position). Throws EncoderError for an empty input, one longer than the context, or an
  // id outside the vocabulary.
  std::vector<float> embed(const std::vector<int32_t>& tokens) const;
  // The last layer's state of every token, [tokens x dim], before pooling (for tests).
  std::vector<float> hidden_states(const std::vector<int32_t>& tokens) const;

 private:
  BertConfig config_;
  std::unique_ptr<cpu::ThreadPool> pool_;
};

}  // namespace pagoda::encoder
