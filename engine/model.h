// The transformer forward (llama, qwen2) over a StepPlan, written once against Backend.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/model_config.h"
#include "engine/step_plan.h"

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

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pagoda
