// The transformer forward (llama, qwen2, qwen3, gemma2, gemma3, phi3) over a StepPlan, written once against Backend.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/lora/lora_adapter.h"
#include "engine/model/model_config.h"
#include "engine/model/model_weights.h"  // LoadProgress
#include "engine/backend/step_plan.h"

namespace pagoda::gguf { class GgufFile; }

namespace pagoda {

// What a forward pass leaves for the caller: per draw, the token the backend drew; per logit
// row no draw names, a view of its logits on the host. Reused from step to step (the buffers
// keep their capacity); valid until the next forward into it.
class StepLogits {
 public:
  // The token of each draw, in the order of the draws given to forward().
  const std::vector<int32_t>& drawn() const { return ids_; }
  // The logprobs of each draw that asked for them (SampleRequest::logprobs >= 0), by draw.
  const std::vector<DrawLogprobs>& drawn_logprobs() const { return logprobs_; }
  // The vocab_size logits of logit row `logit_row`; throws std::out_of_range for a row outside
  // the step or one drawn on the backend (its logits never left it).
  std::span<const float> host_row(int logit_row) const;
  // The model-dim final-norm hidden state of StepPlan::hidden_rows[i]; throws
  // std::out_of_range outside them.
  std::span<const float> hidden_row(int i) const;
  // How many logit rows were read back.
  size_t host_rows() const { return vocab_ > 0 ? logits_.size() / static_cast<size_t>(vocab_) : 0; }

 private:
  friend class Model;
  std::vector<int32_t> ids_;     // by draw
  std::vector<DrawLogprobs> logprobs_;  // by draw
  std::vector<float> logits_;    // the host rows, in LM-head order
  std::vector<int32_t> place_;   // logit row -> its place in logits_, or -1 when drawn
  int64_t vocab_ = 0;
  std::vector<float> hidden_;    // the hidden rows, [hidden_rows x dim]
  std::vector<float> normed_;    // scratch: every token's final-norm state (when hidden rows)
  int64_t dim_ = 0;
};

class Model {
 public:
  // Uploads the weights of `file` (which must outlive the model) to `backend`. Throws with a
  // clear message for unsupported architectures or tensor types. `max_batch_tokens` sizes the
  // activation buffers: a StepPlan may carry at most that many tokens. `on_layer` hears the
  // upload's progress (model_weights.h).
  Model(const gguf::GgufFile& file, std::unique_ptr<Backend> backend, int max_batch_tokens,
        const LoadProgress& on_layer = {});
  ~Model();

  const ModelConfig& config() const;
  Backend& backend();
  int max_batch_tokens() const;
  // The context a sequence may reach (the engine's ctx_size). Models with LongRoPE (phi3) pick
  // their long or short RoPE factors from it, as llama.cpp does; others ignore it. Default: the
  // training context. Call before the first forward (cached K was rotated with the old choice).
  void set_context_length(int n_ctx);

  // ---- LoRA adapters (engine/model/model_lora.h) ----
  // The base matrices an adapter may adapt (what LoraAdapter::load checks a file against).
  const std::vector<LoraTarget>& lora_targets() const;
  // Puts `adapter` in `slot` (>= 1), which sequences then name in SeqInStep::lora; replaces what
  // was there. Throws std::invalid_argument when the backend cannot serve adapters. clear_lora
  // empties the slot (no step may name it afterwards).
  void set_lora(int slot, std::shared_ptr<const LoraAdapter> adapter);
  void clear_lora(int slot);

  // Bytes of one KV block (all layers, K and V) and cache set-up; call init once before forward.
  // A backend that pads recorded steps to row buckets (Backend::recorded_rows) gets
  // kv_reserved_blocks() (one) blocks more than num_blocks, for the inert rows; the caller's
  // blocks are 0..num_blocks-1 as ever. A caller sizing the cache from a memory budget of N
  // blocks passes N - kv_reserved_blocks(), so the whole cache stays within it.
  int kv_reserved_blocks() const;
  size_t kv_block_bytes(int block_size) const;
  void init_kv_cache(int num_blocks, int block_size);
  // The same with explicit cache element types (F16, F32 or Q8_0 for each of K and V; one
  // GgmlType sets both; the overloads above use F16).
  size_t kv_block_bytes(int block_size, KvTypes kv_types) const;
  void init_kv_cache(int num_blocks, int block_size, KvTypes kv_types);
  // The element types of the cache init_kv_cache made (F16 until it is called).
  KvTypes kv_cache_types() const;

  // Applies the plan's cache edits, runs the forward pass and writes the logits of
  // plan.logit_rows (in that order) to `logits` as [logit_rows.size() x vocab_size]: the
  // forward below with no draws, every row on the host. (plan.hidden_rows: use the overload
  // below.)
  void forward(const StepPlan& plan, std::vector<float>& logits);

  // The forward pass, with sampling on the backend for the rows `draws` name, so that only
  // token ids come back for them. draws[i].row names a logit row (an index into
  // plan.logit_rows; several draws may name one row, e.g. the n choices of a prompt) and
  // out.drawn()[i] is its token, drawn by the rule documented at SampleRequest; every row no
  // draw names is read back, and out.host_row(r) is its logits. The order rows take through the
  // LM head is the model's own business: callers index by logit row and by draw only. Non-empty
  // draws need backend().can_sample(). Internally the drawn rows go through the LM head first,
  // so the host rows form one tail that is copied back alone, and a step without host rows
  // waits for the device once. Such a step whose drawn rows fit one LM-head chunk and host rows
  // one more (a host-sampled verify step's tree rows) is offered to the backend for recording
  // and replay (Backend::replay_recorded; CUDA graphs when enabled), its host rows read back
  // after the recorded ops; a decode-only one with every row drawn may run padded with inert
  // rows to the backend's row bucket
  // (Backend::recorded_rows), whose draws are dropped: out holds the caller's rows only.
  // The final-norm hidden states of plan.hidden_rows come back too (out.hidden_row).
  // `before_draws` (optional) is called before the backend reads the draws' masks (their
  // contents may be unfinished until it returns): in a step that is not recorded, after the
  // layers are issued, so host work it waits for overlaps the forward on an asynchronous backend;
  // in a recordable step, before anything is issued.
  void forward(const StepPlan& plan, const std::vector<SampleRequest>& draws, StepLogits& out,
               const std::function<void()>& before_draws = {});

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pagoda
