// EncoderEngine: the EngineApi of an encoder model. It serves embedding requests only (what
// /v1/embeddings, /v1/rerank and /v1/score submit); every other request is refused at submit
// with a clear message (400). A reranker (rank pooling) takes pair inputs only
// (rank_pair_prompt), and its "embedding" is the classification head's scores.
//
// Its step loop (own thread) runs one forward pass per step over as many queued inputs as the
// step's budget takes, in arrival order: whole inputs (an encoder attends over the whole input
// at once, so nothing is chunked and no KV is kept after the step) while their tokens stay
// within max_batch_tokens and their count within max_seqs, the engine's batch limits as
// LlmEngine reads them; an input longer than the budget runs alone in its step. Inputs the
// model refuses (BertModel::check_input) finish with an error and leave the others' step.
// Results do not depend on the batching (BertModel::embed_batch).
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/encoder/bert_model.h"
#include "engine/engine_api.h"
#include "engine/tokenizer/tokenizer.h"

namespace pagoda::encoder {

// How many inputs from the front of a queue, whose token counts are `lengths` in queue order,
// one step takes: at least one (when any), then while the tokens stay within max_batch_tokens
// and the count within max_seqs (at least 1).
size_t inputs_in_step(const std::vector<int64_t>& lengths, int max_batch_tokens, int max_seqs);

class EncoderEngine final : public EngineApi {
 public:
  struct Limits {
    int max_queue = 0;           // requests waiting or running at most (beyond: queue_full); 0: no bound
    int max_batch_tokens = 512;  // tokens per step (whole inputs; one longer input runs alone)
    int max_seqs = 16;           // inputs per step
  };
  // `model` and `tokenizer` must outlive the engine.
  EncoderEngine(const BertModel& model, const Tokenizer& tokenizer, Limits limits);
  ~EncoderEngine() override;

  std::shared_ptr<RequestStream> submit(GenerationRequest req, SubmitError* err) override;
  // While paused the loop starts no step (one in flight finishes); requests queue up, and the
  // steps after resuming take them as the budgets allow (tests see the batching this way).
  void set_paused(bool paused);
  EngineStats stats() const override;
  int context_size() const override { return model_.config().ctx; }
  int admission_limit() const override { return limits_.max_queue; }
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
  // The next step's jobs, taken from the front of the queue (mu_ held).
  std::vector<std::shared_ptr<Job>> take_step();
  // One forward pass over `jobs`, each finished with its result.
  void run_step(const std::vector<std::shared_ptr<Job>>& jobs);

  const BertModel& model_;
  const Tokenizer& tokenizer_;
  const Limits limits_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  int inflight_ = 0;
  bool stop_ = false, paused_ = false;
  uint64_t tokens_ = 0, steps_ = 0;
  double compute_seconds_ = 0, last_unix_s_ = 0;
  std::thread thread_;  // last: started once everything above exists
};

}  // namespace pagoda::encoder
