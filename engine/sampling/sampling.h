// The sampler: logits of one row -> one token, with its logprob and top alternatives.
//
// Pipeline, in this order (documented choices):
//  0. Structured output: with an `allowed` token mask, every token it disallows gets -inf, so
//     everything below (logprobs included) describes the constrained distribution.
//  1. logit_bias is added to the raw logits.
//  2. repetition_penalty (llama.cpp/vLLM semantics) over the distinct tokens of prompt + output:
//     a positive logit is divided by it, a negative one multiplied.
//  3. presence/frequency penalties (OpenAI semantics) over the generated tokens:
//     logit -= frequency_penalty * count + presence_penalty * (count > 0).
//  4. Logprobs are the log-softmax of these processed logits (after bias and penalties, before
//     temperature and truncation), so they describe the model's view with the request's edits.
//  5. temperature == 0: greedy (argmax, lowest token id on ties); no random draw.
//     Otherwise logits / temperature, then top_k, then top_p (smallest set of most likely tokens
//     whose probability reaches top_p), then min_p (p >= min_p * p_max), renormalise, and draw
//     one uniform number from the sequence's own Rng.
// Ties are always broken by the lower token id, and each step consumes exactly one draw (0 for
// greedy), so a seeded sequence's tokens depend only on its own logits and seed.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/engine_api.h"
#include "engine/sampling_params.h"
#include "kernels/draw_params.h"

namespace pagoda {

// xoshiro256** seeded through splitmix64: small, fast, and fully specified (unlike the standard
// library distributions), so seeded results are the same on every platform.
class Rng {
 public:
  explicit Rng(uint64_t seed = 0) { reseed(seed); }
  void reseed(uint64_t seed);
  uint64_t next();
  double uniform();  // in [0, 1), 53 random bits

 private:
  uint64_t s_[4];
};

struct Candidate {
  int32_t token = 0;
  float p = 0;  // probability after truncation and renormalisation
};

struct SampleResult {
  int32_t token = 0;
  float logprob = 0;             // of the chosen token (step 4 above)
  std::vector<TopLogprob> top;   // params.logprobs most likely tokens, most likely first
};

// Steps 1-3 as a list: one TokenEdit per token they change (tokens outside [0, vocab) are
// ignored), sorted by token, for edited_logit (kernels/draw_params.h) to apply with the
// params' penalties. The GPU sampler applies the same list on the device. Empty when the
// request has no bias and no active penalty.
std::vector<TokenEdit> token_edits(const SamplingParams& params, int vocab, const std::vector<int32_t>& prompt,
                                   const std::vector<int32_t>& output);
// `edits` (token_edits' list for some output) as token_edits would give it for that output with
// `more` appended: a token tree's node drawn after the drafted tokens above it, from the list
// of the sequence's output computed once. Meant for a few tokens (each may insert into the list).
void add_output_tokens(std::vector<TokenEdit>& edits, const SamplingParams& params, int vocab,
                       const std::vector<int32_t>& more);

// Steps 1-3 in place on `logits` (vocab entries): token_edits applied. `prompt` and `output`
// are the request's prompt and the sequence's generated tokens so far.
void apply_penalties(float* logits, int vocab, const SamplingParams& params,
                     const std::vector<int32_t>& prompt, const std::vector<int32_t>& output);

// Step 5's distribution for temperature > 0, from processed logits: the kept tokens with their
// renormalised probabilities, most likely first (ties: lower id first) when top_k/top_p/min_p
// filter, in token-id order (the whole vocabulary) when none does. Exposed for tests.
std::vector<Candidate> truncated_distribution(const float* logits, int vocab, const SamplingParams& params);

// The logprob of `token` under one row of logits (log-softmax: float max, double sum of
// exponentials) and the `top_n` most likely tokens, most likely first (ties: lower id first).
// The one implementation of token logprobs: the sampler's (on processed logits, step 4) and the
// prompt's (on raw logits), so a generated token and the same token read back as part of a
// prompt get the same value from the same logits. Throws std::invalid_argument for a token
// outside [0, vocab).
TokenLogprob token_logprob(const float* logits, int vocab, int32_t token, int top_n);

// The whole pipeline for one row of raw logits. Consumes one rng draw unless greedy.
// `allowed` (optional): step 0's mask, bit id%32 of word id/32 set for an allowed token; at
// least one token must be allowed.
SampleResult sample_token(const float* raw_logits, int vocab, const SamplingParams& params,
                          const std::vector<int32_t>& prompt, const std::vector<int32_t>& output,
                          Rng& rng, const uint32_t* allowed = nullptr);

}  // namespace pagoda
