// Sequence: one choice of a request as the scheduler sees it (tokens, progress, status, params).
// A request with n choices becomes n sequences; choices 1..n-1 wait as "siblings" of choice 0
// until its prompt is computed, then fork from it and share its blocks.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "engine/engine_api.h"
#include "engine/sampling/sampling.h"
#include "engine/speculative/speculative.h"
#include "engine/structured/structured.h"

namespace pagoda {

enum class SeqStatus {
  Waiting,     // in the queue (new, or preempted: holds no blocks)
  Running,     // holds blocks; prefilling or decoding
  PendingFork, // a sibling waiting for choice 0's prompt
  Finished,
};

struct Sequence {
  uint64_t id = 0;
  int index = 0;  // choice index within its request
  std::shared_ptr<const GenerationRequest> request;  // sampling / stop parameters, prompt

  // The tokens the cache holds (or will hold) for this sequence, in cache order: the prompt and
  // the generated tokens, minus those dropped by context shifts. The last one is usually not yet
  // computed (it is fed back in the next decode step).
  std::vector<int32_t> tokens;
  int32_t num_computed = 0;     // leading tokens whose KV is in the cache
  std::vector<int32_t> output;  // every generated token (never shifted)

  SeqStatus status = SeqStatus::Waiting;
  FinishReason finish = FinishReason::None;
  std::string error;                  // when finish == Error
  int32_t cached_prompt_tokens = -1;  // prompt tokens served from the prefix cache (first admission)
  int32_t n_shifts = 0;               // context shifts done
  int32_t n_keep = 0;                 // tokens kept on a context shift
  // Prompt logprobs (request->prompt_logprobs >= 0): the logits of positions 0..n-1 have been
  // computed and handed out, so the logprobs of prompt tokens 1..n are known. Only advances, so
  // a recompute after preemption never reports a position twice.
  int32_t prompt_logprob_rows_done = 0;
  // Embedding requests: prompt positions below this have had their hidden state pooled. Only
  // advances, like prompt_logprob_rows_done, so a recompute never pools a position twice.
  int32_t pooled_upto = 0;
  bool sample = true;                 // false: prefill only (the pinned system prompt, embeddings)
  // Where this sequence's tokens are drawn, fixed at admission (never by its batch mates):
  // device_sampling true: on the backend (Backend::sample) with the Philox draw (seed, number
  // of tokens generated so far); false: on the host by sample_token with `rng` (seeded with the
  // same seed). See LlmEngine (engine.h) for which requests take which path.
  bool device_sampling = false;
  uint64_t seed = 0;
  Rng rng;
  std::vector<std::shared_ptr<Sequence>> siblings;  // choice 0 only: choices forked from it
  // Structured output: where this choice's output stands in the request's grammar (advanced by
  // every token drawn; a recompute after preemption replays nothing, the output is kept).
  std::optional<structured::GrammarMatcher> grammar;
  // Tokens the grammar forced after the last sampled one (forced_tokens.h): the last
  // forced_tail + 1 tokens are computed as one chunk in the decode pass.
  int32_t forced_tail = 0;
  // Speculative decoding (speculative.h): set at admission when the engine speculates and the
  // request allows it; `spec` adapts how much it drafts.
  bool speculate = false;
  SpecState spec;
  // The LoRA adapter the sequence is computed under: its model slot (SeqInStep::lora) and its
  // content key, which salts the sequence's prefix-cache keys; 0 and 0 for the base model.
  int32_t lora_slot = 0;
  uint64_t lora_key = 0;

  int32_t num_tokens() const { return static_cast<int32_t>(tokens.size()); }
  int32_t prompt_len() const { return static_cast<int32_t>(request->prompt.size()); }
  // The index in `tokens` of the first generated token: the prompt's length, or after context
  // shifts the tokens not in `output` (exact while the shifts dropped prompt tokens only; once
  // they drop generated ones, kept prompt tokens may count as drawn: a shifted sequence's bits
  // differ anyway, its keys were re-roped). Tokens before it are prompt tokens, computed in
  // prompt chunks; tokens from it on were drawn, and are computed as decode rows
  // (SeqInStep::prefill), a preempted sequence's recompute included.
  int32_t output_begin() const {
    if (n_shifts == 0) return std::min(prompt_len(), num_tokens());
    return std::max(0, num_tokens() - static_cast<int32_t>(output.size()));
  }
  bool finished() const { return status == SeqStatus::Finished; }
};

}  // namespace pagoda
