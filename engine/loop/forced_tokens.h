// Forced tokens (structured output): where the grammar allows exactly one continuation (an
// object's next key, punctuation, a const), its tokens are appended after the sampled token
// without being sampled one step at a time; the sequence's next step then computes them as one
// chunk with the logits row at its end (a prefill-like chunk of the same sequence).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/structured/structured.h"

namespace pagoda {

class Tokenizer;

// The tokens to append after `sampled`, at most `max_tokens`. `after` is the grammar state once
// `sampled` was accepted. The bytes the grammar forces from there are tokenized together with
// `sampled`'s own bytes, so that a token that would merge across the boundary is not split:
// the forced tokens are those that follow `sampled`'s own tokenization, and only when they
// spell exactly the forced bytes. The last one is left to sampling when a longer token starts
// with its bytes (it could merge with what follows), and each must be allowed in turn.
std::vector<int32_t> forced_tokens(const structured::GrammarMatcher& after, const Tokenizer& tokenizer,
                                   int32_t sampled, int max_tokens);

}  // namespace pagoda
