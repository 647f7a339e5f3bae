// Internal: the set of parse stacks a matcher is in (one per live parse alternative), stored
// flat, and the byte step that advances it: match the top DFA node, and when a terminal
// completes, pop/expand rules until every stack again waits on a terminal (or is empty: the
// start rule is complete). Stacks are deduplicated so ambiguity does not multiply them.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/structured/compiled_grammar.h"

namespace pagoda::structured {

class StackSet {
 public:
  size_t size() const { return ends_.size(); }
  bool empty() const { return ends_.empty(); }
  const uint32_t* begin(size_t i) const { return data_.data() + (i ? ends_[i - 1] : 0); }
  size_t length(size_t i) const { return ends_[i] - (i ? ends_[i - 1] : 0); }
  void clear() {
    data_.clear();
    ends_.clear();
  }
  void push(const uint32_t* frames, size_t n) {
    data_.insert(data_.end(), frames, frames + n);
    ends_.push_back(static_cast<uint32_t>(data_.size()));
  }
  bool has_empty() const {
    for (size_t i = 0; i < size(); ++i)
      if (length(i) == 0) return true;
    return false;
  }
  bool has_live() const {
    for (size_t i = 0; i < size(); ++i)
      if (length(i) != 0) return true;
    return false;
  }
  // Drops duplicate stacks (keeps first occurrences' order otherwise).
  void dedup();
  // Drops empty stacks; returns whether there were any.
  bool remove_empty();
  bool operator==(const StackSet& o) const { return data_ == o.data_ && ends_ == o.ends_; }

 private:
  std::vector<uint32_t> data_;
  std::vector<uint32_t> ends_;
};

// Limits on one step's work: stacks in a set and frames in a stack.
struct StepLimits {
  size_t max_stacks = 2048;
  size_t max_depth = 4096;
};

// `frames` has an element index on top (a return position or an alternative's start): expand
// until each resulting stack has a DFA node on top, or is empty; append them to `out`.
// Returns false when a limit was hit (the output is then incomplete).
bool close_stack(const CompiledGrammar::Impl& g, std::vector<uint32_t>& frames, StackSet& out,
                 const StepLimits& limits);

// Advances every non-empty stack of `in` over `byte` into `out` (cleared first), deduplicated.
// Returns false when a limit was hit.
bool advance_byte(const CompiledGrammar::Impl& g, const StackSet& in, uint8_t byte, StackSet& out,
                  const StepLimits& limits);

// The bytes [lo, hi] around `byte` that every stack of `in` treats as it treats `byte` (each
// stack's top node takes them along the same edge, or none of them): advance_byte gives the
// same result for all of them, so a caller can compute it once for the whole range.
void byte_cell(const CompiledGrammar::Impl& g, const StackSet& in, uint8_t byte, uint8_t& lo, uint8_t& hi);

// The start state of a grammar.
StackSet initial_stacks(const CompiledGrammar::Impl& g, const StepLimits& limits);

}  // namespace pagoda::structured
