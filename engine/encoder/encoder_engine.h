// EncoderEngine: the EngineApi of an encoder model. It serves embedding requests only (what
// /v1/embeddings, /v1/rerank and /v1/score submit), one input at a time on its own thread, in
// arrival order; every other request is refused at submit with a clear message (400). A
// reranker (rank pooling) takes pair inputs only (rank_pair_prompt), and its "embedding" is the
// classification head's scores.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "engine/encoder/bert_model.h"
#include "engine/engine_api.h"
#include "engine/tokenizer/tokenizer.h"

namespace pagoda::encoder {

class EncoderEngine final : public EngineApi {
 public:
  // `model` and `tokenizer` must outlive the engine. `max_queue`: requests waiting or running
  // at most (beyond it submit answers queue_full); 0: no bound.
  EncoderEngine(const BertModel& model, const Tokenizer& tokenizer, int max_queue);
  ~EncoderEngine() override;

  std::shared_ptr<RequestStream> submit(GenerationRequest req, SubmitError* err) override;
  EngineStats stats() const override;
  int context_size() const override { return model_.config().ctx; }
  int admission_limit() const override { return max_queue_; }
  int inflight_seqs() const override;
  MaxTokensRule max_tokens_rule() const override { return MaxTokensRule{context_size(), 0, false}; }

  std::vector<int32_t> tokenize(std::string_view text, bool add_special, bool parse_special) const override {
    return tokenizer_.encode(text, add_special, parse_special);
  }
  std::vector<int32_t> tokenize_marked(std::string_view text, bool add_special,
                                       const std::vector<std::pair<size_t, size_t>>& plain) const override {
    return tokenizer_.encode_marked(text, add_special, plain);
  }
  std::string detokenize(const std::vector<int32_t>& ids) const override { return tokenizer_.decode(ids); }
  std::string token_piece(int32_t id, bool special) const override { return tokenizer_.token_to_piece(id, special); }
  int32_t vocab_size() const override { return tokenizer_.vocab_size(); }
  int32_t prompt_bos_id() const override { return tokenizer_.add_bos() ? tokenizer_.bos_id() : -1; }
  std::optional<pagoda::Pooling> model_pooling() const override;
  // [BOS] a [EOS] [SEP] b [EOS], each special token where the vocabulary adds it (BOS and EOS
  // by add_bos / add_eos, SEP by add_sep), as llama.cpp's server joins a rerank pair.
  std::optional<PairPrompt> rank_pair_prompt(std::string_view a, std::string_view b) const override;

 private:
  struct Job;
  void run();

  const BertModel& model_;
  const Tokenizer& tokenizer_;
  const int max_queue_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  int inflight_ = 0;
  bool stop_ = false;
  uint64_t done_requests_ = 0, tokens_ = 0;
  double compute_seconds_ = 0, last_unix_s_ = 0;
  std::thread thread_;  // last: started once everything above exists
};

}  // namespace pagoda::encoder
