// A backend draw (SampleRequest, engine/backend/backend.h) on the host, for tests: the host
// sampler's steps 0-3 on the row (apply_token_mask, then the draw's token edits through
// edited_logit: the functions sampling.cpp itself uses), then the GPU draw rule
// (sample_reference.h), then token_logprob for the logprobs. The GPU sampler tests compare the
// device against it, and the engine tests use it in a test double of a backend that samples.
#pragma once

#include <cmath>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/sampling/grammar_masks.h"
#include "engine/sampling/sampling.h"
#include "tests/support/sample_reference.h"

namespace pagoda::test {

struct ReferenceDraw {
  int token = 0;
  bool ambiguous = false;  // float rounding could flip the draw (sample_reference.h)
  TokenLogprob logprobs;   // when the draw asks for them
};

// The row after the draw's mask and edits (the logits the draw and its logprobs read).
inline std::vector<float> edited_row(const float* raw, int vocab, const SampleRequest& d) {
  std::vector<float> x(raw, raw + vocab);
  if (d.mask) apply_token_mask(x.data(), vocab, d.mask);
  for (const TokenEdit& e : d.token_edits)
    x[static_cast<size_t>(e.token)] =
        edited_logit(x[static_cast<size_t>(e.token)], e, d.repetition_penalty, d.presence_penalty, d.frequency_penalty);
  return x;
}

inline ReferenceDraw reference_draw(const float* raw, int vocab, const SampleRequest& d) {
  const std::vector<float> x = edited_row(raw, vocab, d);
  ReferenceDraw r;
  bool any = false;
  for (float v : x) any |= v > -INFINITY;
  if (!any) return r;  // a mask left nothing: token 0, as the GPU sampler
  r.token = reference_sample(x.data(), vocab, d, &r.ambiguous);
  if (d.logprobs >= 0) r.logprobs = token_logprob(x.data(), vocab, r.token, d.logprobs);
  return r;
}

}  // namespace pagoda::test
