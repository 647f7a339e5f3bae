// The BERT encoder forward on the CPU: one input (a token sequence) at a time, every token
// attending to every other (no cache: the whole input is one batch), then the pooling the file
// names (mean over the tokens, or the first token's state: CLS) and L2 normalization; or, for a
// reranker (rank pooling), the classification head's raw scores of the first token's state.
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

  // The pooled, L2-normalized embedding (config().dim values) of `tokens`; with rank pooling
  // the classification head's config().n_cls_out scores instead (not normalized). Tokens from
  // `segment_b` on have token type 1 when the model has two or more types (a pair's second
  // text, as BERT cross-encoders were trained); the others, and all with -1, type 0. Throws
  // EncoderError for an empty input, one longer than the context, or an id outside the vocabulary.
  std::vector<float> embed(const std::vector<int32_t>& tokens, int segment_b = -1) const;
  // The last layer's state of every token, [tokens x dim], before pooling (for tests).
  std::vector<float> hidden_states(const std::vector<int32_t>& tokens, int segment_b = -1) const;

 private:
  BertConfig config_;
  std::unique_ptr<cpu::ThreadPool> pool_;
};

}  // namespace pagoda::encoder
