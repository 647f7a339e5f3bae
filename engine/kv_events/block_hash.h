// The block hashes of the KV event stream, as llm-d's KV-cache indexer computes them from a
// prompt's token ids (its ChunkedTokenDatabase), so a router can look a prompt up by hashing it:
//   root  = low 64 bits (the last 8 bytes, big-endian) of SHA-256(CBOR(seed string))
//   block = low 64 bits of SHA-256(CBOR([parent, [token ids of the block], extra]))
// with CBOR in its canonical (shortest) form and extra = null for the base model. Blocks
// computed under a LoRA adapter chain with extra = the adapter's root key (an unsigned
// integer), so they never take a base-model block's hash.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace pagoda::kv_events {

// The root parent: the indexer's HashSeed ("" by default, vLLM's PYTHONHASHSEED when set).
uint64_t root_block_hash(std::string_view seed);
// One block after `parent`; `extra` 0 writes null (the base model), else that integer.
uint64_t block_hash(uint64_t parent, const int32_t* tokens, int n, uint64_t extra = 0);

}  // namespace pagoda::kv_events
