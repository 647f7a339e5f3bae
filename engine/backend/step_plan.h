// StepPlan: everything one forward pass does, as plain data. The scheduler emits it; the
// model/backends consume it. No pointers into engine structures cross this boundary.
//
// KV-cache invariant (docs/architecture.md, "The KV cache"): the token at logical index i of a
// sequence lives in block_table[i / block_size] at offset i % block_size and its K was roped at
// position i.
// Hence a token's position is also its logical index, and a token at position p attends to the
// logical indices 0..p of its own sequence.
#pragma once

#include <cstdint>
#include <vector>

namespace pagoda {

// Copy every slot (K and V, all layers) of block `src` into block `dst`.
struct BlockCopy {
  int32_t src = 0;
  int32_t dst = 0;
};

// Re-rope the K of every slot of `block` (all layers, all KV heads) by `delta` positions,
// i.e. multiply by the rotation for angle delta*theta_i. V is untouched.
struct KShift {
  int32_t block = 0;
  int32_t delta = 0;
};

// Copy one slot (K and V, all layers) to another: a verified token tree's accepted node moved to
// the logical index its depth gives it (engine/speculative/speculative.h).
struct SlotCopy {
  int32_t src = 0;  // block * block_size + offset
  int32_t dst = 0;
};

struct SeqInStep {
  uint64_t seq_id = 0;
  int32_t first_token = 0;         // index of its first token in StepPlan::tokens
  int32_t n_tokens = 0;            // tokens of this sequence in this step (1 for decode)
  int32_t n_past = 0;              // tokens already in the cache before this step
  int32_t block_table_offset = 0;  // its block table is block_tables[offset, offset + n_blocks)
  int32_t n_blocks = 0;
  // The LoRA adapter its rows are computed under: a slot of the model (Model::set_lora), 0 for
  // the base model.
  int32_t lora = 0;
  // True for a chunk of prompt tokens (a preempted sequence's recompute of them too), false for
  // drawn tokens: a decode, a grammar's forced tail, a preempted sequence's recompute of its
  // output. The scheduler never mixes the two in one chunk (Sequence::output_begin). Backends may
  // route rows by it: CUDA with batch_invariant gives prompt tokens the prefill attention and
  // drawn tokens the decode attention whatever the chunk's length, so a token's bits do not
  // depend on how the scheduler cut (or recomputed) its sequence.
  bool prefill = false;
};

struct StepPlan {
  // One entry per token in the batch.
  std::vector<int32_t> tokens;
  std::vector<int32_t> positions;   // RoPE position == logical index in its sequence
  std::vector<int32_t> slots;       // destination: block * block_size + offset
  std::vector<int32_t> token_seq;   // index into `seqs`
  std::vector<SeqInStep> seqs;
  std::vector<int32_t> block_tables;  // -1: a block released behind a sliding window (never read)
  // Token indices whose logits are needed (the last token of each sequence that samples this
  // step), in the order the sampler will consume them.
  std::vector<int32_t> logit_rows;
  // Token indices whose final-norm hidden states are needed (embedding requests' pooling), in
  // the order the caller will read them (StepLogits::hidden_row). Costs no LM-head row.
  std::vector<int32_t> hidden_rows;
  // Token trees (speculative decoding). Empty, or one entry per token: 0 for an ordinary causal
  // row. A sequence whose rows carry masks is a tree (at most kMaxTreeTokens rows): its row j
  // (token first_token + j) has bit i set for each row i of the tree that is j itself or one of
  // its ancestors; row 0 is the root (mask 1) and every row's parent comes before it. Row j sits
  // at position n_past + depth(j) (depth = ancestors), and attends to the sequence's logical
  // indices 0..n_past-1 (the committed prefix, through its block table) followed by its
  // ancestors' and its own K/V in row order (read from those rows' slots): exactly the context
  // the same tokens would see if that path alone had been decoded. Its own slot is the caller's
  // choice (the scheduler gives row j the logical index n_past + j).
  std::vector<uint64_t> tree_masks;
  static constexpr int kMaxTreeTokens = 64;
  // Cache edits applied before the forward pass: slot copies (in order), then block copies,
  // then K shifts.
  std::vector<SlotCopy> slot_copies;
  std::vector<BlockCopy> block_copies;
  std::vector<KShift> k_shifts;

  int32_t n_tokens() const { return static_cast<int32_t>(tokens.size()); }
  bool has_tree() const { return !tree_masks.empty(); }
  bool empty() const { return tokens.empty() && block_copies.empty() && k_shifts.empty() && slot_copies.empty(); }
};

// Checks every index of `plan` against its own arrays and a cache of `num_blocks` blocks of
// `block_size` slots: slots, block ids, positions within each sequence's block table, logit
// rows, copies and shifts; each sequence's tokens contiguous from first_token; tree masks
// (a tree per sequence, positions n_past + depth). Backends call it
// before trusting a plan. Throws std::invalid_argument ("<who>: step plan: <problem>").
void validate_step_plan(const StepPlan& plan, int num_blocks, int block_size, const char* who);

// For the row at token index t of a tree sequence: the token indices of its ancestors and
// itself, in row order (the tail of its attention context). Assumes a validated plan.
std::vector<int32_t> tree_path(const StepPlan& plan, int32_t t);

}  // namespace pagoda
