// StepPlan: everything one forward pass does, as plain data. The scheduler emits it; the
// model/backends consume it. No pointers into engine structures cross this boundary.
//
// KV-cache invariant (README, "Architecture"): the token at logical index i of a sequence lives in
// block_table[i / block_size] at offset i % block_size and its K was roped at position i.
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

struct SeqInStep {
  uint64_t seq_id = 0;
  int32_t first_token = 0;         // index of its first token in StepPlan::tokens
  int32_t n_tokens = 0;            // tokens of this sequence in this step (1 for decode)
  int32_t n_past = 0;              // tokens already in the cache before this step
  int32_t block_table_offset = 0;  // its block table is block_tables[offset, offset + n_blocks)
  int32_t n_blocks = 0;
};

struct StepPlan {
  // One entry per token in the batch.
  std::vector<int32_t> tokens;
  std::vector<int32_t> positions;   // RoPE position == logical index in its sequence
  std::vector<int32_t> slots;       // destination: block * block_size + offset
  std::vector<int32_t> token_seq;   // index into `seqs`
  std::vector<SeqInStep> seqs;
  std::vector<int32_t> block_tables;
  // Token indices whose logits are needed (the last token of each sequence that samples this
  // step), in the order the sampler will consume them.
  std::vector<int32_t> logit_rows;
  // Token indices whose final-norm hidden states are needed (embedding requests' pooling), in
  // the order the caller will read them (StepLogits::hidden_row). Costs no LM-head row.
  std::vector<int32_t> hidden_rows;
  // Cache edits applied before the forward pass: copies first, then K shifts.
  std::vector<BlockCopy> block_copies;
  std::vector<KShift> k_shifts;

  int32_t n_tokens() const { return static_cast<int32_t>(tokens.size()); }
  bool empty() const { return tokens.empty() && block_copies.empty() && k_shifts.empty(); }
};

// Checks every index of `plan` against its own arrays and a cache of `num_blocks` blocks of
// `block_size` slots: slots, block ids, positions within each sequence's block table, logit
// rows, copies and shifts; each sequence's tokens contiguous from first_token. Backends call it
// before trusting a plan. Throws std::invalid_argument ("<who>: step plan: <problem>").
void validate_step_plan(const StepPlan& plan, int num_blocks, int block_size, const char* who);

}  // namespace pagoda
