// Internal: token masks for one parse stack, through the grammar's adaptive cache.
//
// A stack's key is its top node plus the return frames below it down to the first frame whose
// remaining elements cannot all be skipped (so most tokens end or fail before they could pop
// below the key). Per key, one walk of the whole vocabulary from just those frames splits the
// tokens into accepted (whatever lies below), rejected, and dependent (they would pop below
// the key mid-token); only the dependent ones are walked again from the full stack at each
// step. Entries are computed on first use and shared by every matcher of the grammar; a key
// whose start is a loop over a character class takes most of its entry from the vocabulary's
// precomputed split for that loop (loop_split.h) and walks only the tokens that leave it.
#pragma once

#include <memory>

#include "engine/structured/compiled_grammar.h"
#include "engine/structured/stack_set.h"

namespace pagoda::structured {

// Key of stack frames f[0, n), n > 0: {1 if it covers the whole stack else 0, frames...}.
void stack_key(const CompiledGrammar::Impl& g, const uint32_t* f, size_t n,
               std::vector<uint32_t>& key);

// The cached entry for `key` (computing and caching it on a miss). Thread-safe.
std::shared_ptr<const MaskEntry> mask_entry(const CompiledGrammar::Impl& g,
                                            const std::vector<uint32_t>& key);

// ORs into bits every token accepted from the single stack f[0, n) (n > 0).
void add_stack_mask(const CompiledGrammar::Impl& g, const uint32_t* f, size_t n, uint32_t* bits,
                    std::vector<uint32_t>* last_key);

}  // namespace pagoda::structured
