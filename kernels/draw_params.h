// DrawParams: the knobs of one token drawn on a backend. The engine's SampleRequest
// (engine/backend/backend.h) extends it with the logit row and the host copies of its mask and
// edits, and the CUDA sampler's launchers (kernels/cuda/ops.h) take arrays of it as they are, so
// the backend uploads the engine's values without copying them field by field. Plain C++ (no
// CUDA headers), like ggml_type.h. The rule these fields drive is documented at SampleRequest
// and in kernels/cuda/sample.cu.
//
// TokenEdit and edited_logit are the one definition of logit_bias and the repetition /
// presence / frequency penalties: the host sampler (engine/sampling/sampling.cpp) and the GPU
// sampler both apply a token's edit through edited_logit, so they agree bit for bit.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define PAGODA_DRAW_HD __host__ __device__ __forceinline__
#else
#define PAGODA_DRAW_HD inline
#endif

namespace pagoda {

// One token whose logit a request edits (at most one entry per token). flags: kEditBias adds
// `bias`; kEditSeen marks a token of prompt + output (the repetition penalty's set); `count` is
// how often the token occurs in the output (presence / frequency penalties).
struct TokenEdit {
  int32_t token = 0;
  uint32_t flags = 0;
  float bias = 0.0f;
  int32_t count = 0;
};
constexpr uint32_t kEditBias = 1u, kEditSeen = 2u;

// Most alternatives a draw's logprobs carry (the OpenAI API's top_logprobs bound).
constexpr int kMaxDrawTopLogprobs = 20;

// A draw's logprobs: the log-softmax of the row's processed logits (mask, bias, penalties;
// before temperature and truncation) at the drawn token and at the n_top most likely tokens,
// most likely first (ties: lower id first; tokens a mask removed are never listed).
struct DrawLogprobs {
  float logprob = 0.0f;
  int32_t n_top = 0;
  int32_t top_id[kMaxDrawTopLogprobs] = {};
  float top_logprob[kMaxDrawTopLogprobs] = {};
};

struct DrawParams {
  float temperature = 0.0f;  // <= 0: greedy (argmax, lowest id on ties)
  int32_t top_k = 0;         // 0: off; keeps every token whose logit is >= the k-th largest
  float top_p = 1.0f;        // 1: off; keeps the smallest top set whose probability reaches top_p
  float min_p = 0.0f;        // 0: off; keeps tokens with probability >= min_p * max probability
  uint64_t seed = 0;         // Philox key (kernels/cuda/philox.h)
  uint64_t counter = 0;      // Philox counter: the sequence's number of generated tokens
  // Penalties, applied through edited_logit to the tokens of `edits`.
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int32_t n_edits = 0;
  int32_t logprobs = -1;  // -1: none; 0..kMaxDrawTopLogprobs: the drawn token's and top N
  // Device addresses, filled in by the backend (null: none): the allowed-token bitmask (bit
  // id%32 of word id/32), the n_edits edits, and where the draw's logprobs go.
  const uint32_t* allowed = nullptr;
  const TokenEdit* edits = nullptr;
  DrawLogprobs* logprobs_out = nullptr;
};

// True when repetition_penalty applies (1 and non-positive values are off).
PAGODA_DRAW_HD bool repetition_on(float repetition_penalty) {
  return repetition_penalty != 1.0f && repetition_penalty > 0.0f;
}

// Logit `l` after `e`, in the host sampler's order: bias added, then the repetition penalty
// (llama.cpp/vLLM: a positive logit divided by it, any other multiplied) for a token of prompt +
// output, then l - (frequency * count + presence) for a token of the output (OpenAI). Each
// operation rounds on its own (no fused multiply-add), on the host and on the GPU alike.
PAGODA_DRAW_HD float edited_logit(float l, const TokenEdit& e, float repetition, float presence,
                                  float frequency) {
#if defined(__CUDA_ARCH__)
  if (e.flags & kEditBias) l = __fadd_rn(l, e.bias);
  if ((e.flags & kEditSeen) && repetition_on(repetition))
    l = l > 0.0f ? __fdiv_rn(l, repetition) : __fmul_rn(l, repetition);
  if ((presence != 0.0f || frequency != 0.0f) && e.count > 0)
    l = __fsub_rn(l, __fadd_rn(__fmul_rn(frequency, static_cast<float>(e.count)), presence));
#else
  if (e.flags & kEditBias) l += e.bias;
  if ((e.flags & kEditSeen) && repetition_on(repetition)) l = l > 0.0f ? l / repetition : l * repetition;
  if ((presence != 0.0f || frequency != 0.0f) && e.count > 0) {
    volatile float scaled = frequency * static_cast<float>(e.count);  // volatile: never fused
    l -= scaled + presence;
  }
#endif
  return l;
}

}  // namespace pagoda
