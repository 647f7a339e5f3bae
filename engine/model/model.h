// The transformer forward (llama, qwen2) over a StepPlan, written once against Backend.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/model/model_config.h"
#include "engine/backend/step_plan.h"

namespace pagoda::gguf { class GgufFile; }

namespace pagoda {

class Model {
 public:
  // Uploads the weights of `file` (which must outlive the model) to `backend`. Throws with a
  // clear message for unsupported architectures or tensor types. `max_batch_tokens` sizes the
  // activation buffers: a StepPlan may carry at most that many tokens.
  Model(const gguf::GgufFile& file, std::unique_ptr<Backend> backend, int max_batch_tokens);
  ~Model();

  const ModelConfig& config() const;
  Backend& backend();
  int max_batch_tokens() const;

  // Bytes of one KV block (all layers, K and V) and cache set-up; call init once before forward.
  size_t kv_block_bytes(int block_size) const;
  void init_kv_cache(int num_blocks, int block_size);
  // The same with an explicit cache element type (F16 or F32; the overloads above use F16).
  size_t kv_block_bytes(int block_size, GgmlType kv_type) const;
  void init_kv_cache(int num_blocks, int block_size, GgmlType kv_type);

  // Applies the plan's cache edits, runs the forward pass and writes the logits of
  // plan.logit_rows (in that order) to `logits` as [logit_rows.size() x vocab_size].
  void forward(const StepPlan& plan, std::vector<float>& logits);

  // The same forward pass with sampling on the backend, so that only token ids come back for
  // the rows sampled there. draws[i].row names a logit row (an index into plan.logit_rows;
  // several draws may name one row, e.g. the n choices of a prompt) and ids[i] receives its
  // token, drawn by the rule documented at SampleRequest. The logits of the rows no draw names
  // are written to `host_logits` in logit-row order ([those rows x vocab_size]), as forward()
  // does. Non-empty draws need backend().can_sample(); with none this is forward(plan, logits).
  // Internally the sampled rows go through the LM head first, so the host rows form one tail
  // that is copied back alone, and a step without host rows waits for the device once. Such a
  // step whose rows fit one LM-head chunk is offered to the backend for recording and replay
  // (Backend::replay_recorded; CUDA graphs when enabled).
  void forward(const StepPlan& plan, const std::vector<SampleRequest>& draws,
               std::vector<int32_t>& ids, std::vector<float>& host_logits);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pagoda
