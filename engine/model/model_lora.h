// ModelLora: the LoRA side of the forward pass. It knows which base matrices take adapters
// (targets: the separate dense projections of each layer and the output matrix, as the file
// names them), holds the adapters put in its slots (1, 2, ...; slot 0 is the base model), and
// after a target's matmul adds each adapter's update to the rows of the sequences that chose it
// (SeqInStep::lora), one Backend::lora_add per adapter present: rows grouped by adapter, as
// Punica / S-LoRA do, so sequences of different adapters and of the base model share a batch.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/lora/lora_adapter.h"

namespace pagoda::gguf { class GgufFile; }

namespace pagoda {

class ModelLora {
 public:
  // The targets of a model of `n_layers` layers read from `file`.
  void init(const gguf::GgufFile& file, int n_layers);
  const std::vector<LoraTarget>& targets() const { return targets_; }

  // Puts `adapter` (checked against targets()) in `slot` >= 1, its matrices uploaded to `be`.
  void set(int slot, std::shared_ptr<const LoraAdapter> adapter, Backend& be);
  void clear(int slot);

  // Per step: groups the plan's rows by adapter. `head_order[k]` is the logit row (index into
  // plan.logit_rows) at LM-head place k. Throws std::invalid_argument for a slot that holds no
  // adapter. True when some row has an adapter.
  bool begin_step(const StepPlan& plan, const std::vector<int32_t>& head_order);
  bool active() const { return active_; }

  // out += the adapters' updates of x's rows for layer `layer`'s projection `p` (nothing when
  // the step has no adapters or none adapts that matrix).
  void apply(Backend& be, int layer, LoraProj p, const Tensor& x, Tensor& out);
  // The same for the output matrix over LM-head places [first, first + rows) (x and out hold
  // just those rows).
  void apply_head(Backend& be, const Tensor& x, Tensor& out, int64_t first, int64_t rows);

 private:
  struct Mat {
    Tensor a, b;
    float scale = 1.0f;
    bool present = false;
  };
  struct Slot {
    std::shared_ptr<const LoraAdapter> adapter;  // keeps the host matrices the views read
    std::vector<Mat> mats;                        // by target
  };
  struct Group {
    int slot = 0;
    std::vector<int32_t> rows;
  };
  void add_group(Backend& be, int target, const Group& g, const Tensor& x, Tensor& out, int64_t first, int64_t n);

  std::vector<LoraTarget> targets_;
  std::vector<int> by_proj_;  // [layer * kCount + proj] -> target, or -1
  int output_ = -1;           // the output matrix's target, or -1
  std::vector<Slot> slots_;   // by slot; slots_[0] stays empty
  bool active_ = false;
  std::vector<Group> token_groups_, head_groups_;
  std::vector<int32_t> scratch_rows_;
};

}  // namespace pagoda
