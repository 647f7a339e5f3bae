// Internal: cold token masks for "loop" parse states, the states every character of some class
// leads back to (inside a JSON string, each ordinary character returns to the same state).
// There nearly every token is accepted, so a plain walk visits the whole vocabulary trie
// (milliseconds for 100k tokens). Instead, the state's loop is written as a small byte table
// (the loop state and the states inside a multi-byte UTF-8 character); the vocabulary is split
// once per distinct table (cached on the vocabulary, so shared by every grammar and position
// with the same loop) into the tokens that stay inside the loop, accepted outright, and the
// distinct suffixes after the last return to the loop state, the only part that is walked.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/structured/token_walk.h"

namespace pagoda::structured {

// The loop of one interned state L, the state most printable ASCII bytes lead the walk's start
// to: L itself (inside a string), one character further (right after an opening quote, where
// the first character also decides whether the string closes at once), or a few characters
// further (a minimum length counts its first characters). Table state 0 is
// L, the others are inside a multi-byte UTF-8 character; next[a * 256 + b] is the state after
// byte b, or -1 when the byte leaves the table (another state, a dead end, an overflow, or, in
// a local walk, a stack emptied on the way). The table depends only on the loop's character
// class, so every position looping over the same class shares one vocabulary split.
struct LoopTable {
  std::vector<int16_t> next;
  std::vector<int32_t> interned;  // interned state of each table state (interned[0]: L)
  std::vector<uint8_t> depth;     // bytes into the current character (0 for L)
  int32_t start = -1;             // the walk's start: L, or a state one character before it
  std::vector<uint8_t> disagree;  // first bytes the start does not take where L does
  // The start reaches L only after more than one character (a minimum length counted first):
  // a leaving token's suffix after its last visit of L cannot be walked from L, so it is
  // walked whole from the start.
  bool chain = false;
  size_t states() const { return interned.size(); }
};

// Printable ASCII bytes that must lead straight back to a state for its loop to be split.
constexpr int kMinLoopBytes = 16;

// The loop table for a walk from interned state `start`; false when neither it nor the state
// most printable ASCII bytes lead it to is a wide loop (at least kMinLoopBytes of them leading
// back to it), when the start disagrees with the loop, or when the state table filled up.
bool build_loop_table(const CompiledGrammar::Impl& g, InternedStates& states, int32_t start, bool local,
                      const StepLimits& limits, LoopTable& out);

// The vocabulary as a loop table splits it.
struct LoopSplit {
  bool useful = false;                // enough tokens stay inside for the split to pay
  size_t inside = 0;                  // unique strings that stay inside
  std::vector<uint32_t> inside_bits;  // token-id bitmask of the tokens that stay inside
  // The others: rest[0] leave before coming back to L, walked whole from the start; rest[1]
  // are the suffixes after their last visit of L, walked from L.
  struct Rest {
    std::vector<std::string> suffix;  // sorted distinct suffixes
    std::vector<uint32_t> lcp;        // as SortedStrings::lcp
    std::vector<uint32_t> begin;      // suffix[i]'s tokens: tokens[begin[i], begin[i + 1])
    std::vector<uint32_t> tokens;     // unique-string indices
  };
  Rest rest[2];
  // A split derived from another (loop_split: the same loop less a few ASCII bytes) lists its
  // other leaving tokens as (unique index, suffix start) pairs, walked one by one: sorting
  // their suffixes would cost more than walking them.
  std::vector<std::pair<uint32_t, uint32_t>> each[2];
};

// The split of `v` by `table`, from the vocabulary's cache. On a miss it is derived from a
// cached split whose table differs only in sending some ASCII bytes from L back to L where this
// one leaves (a class less a few characters: a key that must not start a pattern's letter),
// through the vocabulary's per-token ASCII byte sets, else computed by a walk of the whole
// vocabulary. Thread-safe.
std::shared_ptr<const LoopSplit> loop_split(const TokenVocabulary::Impl& v, const LoopTable& table);

// Computes (and caches on `v`) the splits of JSON's string characters, met by nearly every
// JSON grammar: called once per vocabulary, so no request pays for them.
void prewarm_loop_splits(const TokenVocabulary::Impl& v);

}  // namespace pagoda::structured
