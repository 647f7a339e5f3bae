// The BERT encoder forward on the CPU: a batch of inputs (token sequences) in one pass, their
// rows stacked for every matrix product, each token attending to every token of its own input
// and no other (no cache: every input is whole in its batch), then the pooling the file names
// (mean over the tokens, or the first token's state: CLS) and L2 normalization; or, for a
// reranker (rank pooling), the classification head's raw scores of the first token's state.
// An input's result does not depend on its batch mates: the matmul is batch-invariant
// (kernels/cpu/matmul.h) and every other step works on one row or one input at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/encoder/bert_config.h"

namespace pagoda::cpu { class ThreadPool; }

namespace pagoda::encoder {

// One input of a batch: its tokens and, for a pair, where the second text starts (-1: none).
struct EncoderInput {
  std::vector<int32_t> tokens;
  int segment_b = -1;
};

class BertBackendForward;

class BertModel {
 public:
  // Reads the configuration of `file` (which must outlive the model; weights are used in place
  // from its mapping). `threads` <= 0: one per hardware thread (the CPU path, and the host work
  // of the backend one). With a `backend` the layers run there instead (BertBackendForward:
  // bert files only), in passes of at most max(max_rows, context) rows. Throws EncoderError.
  BertModel(const gguf::GgufFile& file, int threads, std::unique_ptr<Backend> backend = nullptr,
            int64_t max_rows = 0);
  ~BertModel();

  const BertConfig& config() const { return config_; }

  // The pooled, L2-normalized embedding (config().dim values) of `tokens`; with rank pooling
  // the classification head's config().n_cls_out scores instead (not normalized). Tokens from
  // `segment_b` on have token type 1 when the model has two or more types (a pair's second
  // text, as BERT cross-encoders were trained); the others, and all with -1, type 0. Throws
  // EncoderError for an empty input, one longer than the context, or an id outside the vocabulary.
  std::vector<float> embed(const std::vector<int32_t>& tokens, int segment_b = -1) const;
  // embed() of every input, in one forward pass; bit-identical to one call each. Throws
  // EncoderError (naming the input) when any input is bad, computing nothing.
  std::vector<std::vector<float>> embed_batch(const std::vector<EncoderInput>& inputs) const;
  // The reason embed() would refuse this input, or empty when it is good.
  std::string check_input(const std::vector<int32_t>& tokens) const;
  // The last layer's state of every token, [tokens x dim], before pooling (for tests).
  std::vector<float> hidden_states(const std::vector<int32_t>& tokens, int segment_b = -1) const;
  // The same for a batch: the inputs' rows stacked in order, [total tokens x dim].
  std::vector<float> hidden_states_batch(const std::vector<EncoderInput>& inputs) const;

 private:
  struct Scratch;  // the forward's buffers, kept between passes (no allocation or page faults each)
  // The token + position + type embedding sums of the batch's rows (before the LayerNorm).
  std::vector<float> embedded_rows(const std::vector<EncoderInput>& inputs, const std::vector<int64_t>& starts) const;
  // hidden_states_batch through backend_, in passes that fit its buffers.
  std::vector<float> backend_hidden_states(const std::vector<EncoderInput>& inputs,
                                           const std::vector<int64_t>& starts) const;

  BertConfig config_;
  std::unique_ptr<cpu::ThreadPool> pool_;
  mutable std::mutex scratch_mu_;  // one pass at a time uses the scratch (or the backend)
  std::unique_ptr<Scratch> scratch_;
  std::unique_ptr<BertBackendForward> backend_;  // null: the layers run on the CPU path
};

}  // namespace pagoda::encoder
