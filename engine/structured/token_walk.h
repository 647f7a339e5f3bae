// Internal: one walk over a sorted list of vocabulary strings from a parse state, classifying
// each token as accepted, rejected, or (for a walk confined to a few top stack frames)
// dependent on the frames below. Tokens sharing a prefix reuse its parse state, and every
// token under a prefix that fails is classified in one go without being walked.
#pragma once

#include <cstring>
#include <unordered_map>
#include <vector>

#include "engine/structured/stack_set.h"
#include "engine/structured/token_vocabulary.h"

namespace pagoda::structured {

enum class TokenVerdict : uint8_t { Accept, Dependent, Reject };

struct WalkScratch {
  std::vector<StackSet> levels;    // levels[d]: live stacks after d bytes of the current token
  std::vector<uint8_t> exited;     // exited[d]: the scope was left within the first d bytes
};
WalkScratch& walk_scratch();

// Verdict for a token whose byte at `fail` no stack accepts. A step that hit a StepLimits
// limit cannot be trusted either way: the full check decides (local) or the token is refused.
inline TokenVerdict failed_verdict(bool overflow, bool local, bool exited_before) {
  return (overflow ? local : exited_before) ? TokenVerdict::Dependent : TokenVerdict::Reject;
}

// Walks unique strings list[0, n) (ascending indices into v.unique) from `start` (live
// stacks only). `local`: the stacks are the top
// frames of longer stacks, and a stack emptied means the scope was left (the rest of the token
// then depends on the frames below: Dependent); otherwise an emptied stack is the grammar's end.
// Calls on_run(k_begin, k_end, verdict) for consecutive list positions sharing a verdict.
template <class OnRun>
void walk_tokens(const CompiledGrammar::Impl& g, const TokenVocabulary::Impl& v,
                 const StackSet& start, bool local, const uint32_t* list, size_t n,
                 const StepLimits& limits, OnRun&& on_run) {
  WalkScratch& ws = walk_scratch();
  if (ws.levels.empty()) ws.levels.resize(1);
  ws.levels[0] = start;
  if (ws.exited.empty()) ws.exited.resize(1);
  ws.exited[0] = 0;
  size_t valid = 0;            // levels[0..valid] hold the states of prev's prefix
  const std::string* prev = nullptr;
  size_t k = 0;
  for (size_t guard = 0; k < n && guard <= n; ++guard) {
    const std::string& s = v.unique[list[k]];
    size_t l = 0;
    if (prev) {
      size_t m = std::min(prev->size(), s.size());
      while (l < m && (*prev)[l] == s[l]) ++l;
    }
    size_t d = std::min(l, valid);
    if (ws.levels.size() < s.size() + 1) {
      ws.levels.resize(s.size() + 1);
      ws.exited.resize(s.size() + 1);
    }
    size_t fail = SIZE_MAX;
    bool overflow = false;
    for (; d < s.size(); ++d) {
      StackSet& next = ws.levels[d + 1];
      if (!advance_byte(g, ws.levels[d], static_cast<uint8_t>(s[d]), next, limits)) {
        overflow = true;
        fail = d;
        break;
      }
      if (next.empty()) {
        fail = d;
        break;
      }
      bool left = next.remove_empty();
      ws.exited[d + 1] = ws.exited[d] || (local && left);
    }
    prev = &s;
    if (fail == SIZE_MAX) {
      valid = s.size();
      on_run(k, k + 1, TokenVerdict::Accept);
      ++k;
      continue;
    }
    valid = fail;
    TokenVerdict verdict = failed_verdict(overflow, local, ws.exited[fail] != 0);
    size_t end = k + 1;
    size_t shared = fail + 1;  // every later token with this prefix fails the same way
    while (!overflow && end < n) {
      const std::string& t = v.unique[list[end]];
      if (t.size() < shared || std::memcmp(t.data(), s.data(), shared) != 0) break;
      ++end;
    }
    prev = &v.unique[list[end - 1]];
    on_run(k, end, verdict);
    k = end;
  }
}

}  // namespace pagoda::structured

namespace pagoda::structured {

// The states a walk of the whole vocabulary passes through, interned, with their byte
// transitions memoized: most tokens revisit a handful of states (inside a string every
// character leads back to the same one), so after the first visits a token costs a table
// lookup per byte. Capped; past the cap transitions are computed but not stored.
class InternedStates {
 public:
  static constexpr int32_t kDead = -1;       // no stack accepts the byte
  static constexpr int32_t kOverflow = -3;   // a StepLimits limit was hit
  static constexpr int32_t kTableFull = -4;  // no room for the new state: call restart()
  explicit InternedStates(size_t max_states) : max_states_(max_states) {}
  // The id of `s`, added when new; -1 when the table is full.
  int32_t intern(const StackSet& s);
  // Transition result: kDead, kOverflow, or (state id << 1) | (a stack emptied on the way).
  int32_t step(const CompiledGrammar::Impl& g, int32_t state, uint8_t byte, const StepLimits& limits) {
    const int32_t known = transitions_[static_cast<size_t>(state) * 256 + byte];
    return known != kUnknown ? known : compute_step(g, state, byte, limits);
  }
  bool has_live(int32_t state) const { return states_[state].has_live(); }
  const StackSet& state(int32_t id) const { return states_[id]; }
  // Empties the table but for the states in `keep`, renumbered in place.
  void restart(std::vector<int32_t>& keep, size_t count);

 private:
  static constexpr int32_t kUnknown = -2;
  int32_t compute_step(const CompiledGrammar::Impl& g, int32_t state, uint8_t byte, const StepLimits& limits);
  size_t max_states_;
  std::vector<StackSet> states_;
  std::vector<uint64_t> hashes_;
  std::unordered_map<uint64_t, std::vector<int32_t>> by_hash_;
  std::vector<int32_t> transitions_;  // 256 per state
  StackSet scratch_;
};

// A sorted list of distinct byte strings: lcp[k] is the common prefix length of s[k-1] and
// s[k] (lcp[0] = 0); first_byte_begin (257 entries, or null) indexes the first-byte groups.
// Optionally (tails non-null) s[k] past lcp[k] is also at tails[tail_begin[k], tail_begin[k+1])
// (TokenVocabulary::Impl::tails), read in place of s[k] where it covers the walk.
struct SortedStrings {
  const std::string* s = nullptr;
  const uint32_t* lcp = nullptr;
  size_t n = 0;
  const uint32_t* first_byte_begin = nullptr;
  const char* tails = nullptr;
  const uint32_t* tail_begin = nullptr;
  // Optional: TokenVocabulary::Impl::lcp_drop for these strings, as indices into the vocabulary
  // less `drop_base` (a list that is a slice of the vocabulary from unique index drop_base).
  const uint32_t* lcp_drop = nullptr;
  size_t drop_base = 0;
};

// Same contract as walk_tokens over a sorted string list, from interned state `start` of
// `states` (whose memoized transitions it reuses and extends).
template <class OnRun>
void walk_sorted(const CompiledGrammar::Impl& g, const SortedStrings& list, InternedStates& states,
                 int32_t start, bool local, const StepLimits& limits, OnRun&& on_run) {
  std::vector<int32_t> at(1, start);  // at[d]: state after d bytes
  std::vector<uint8_t> exited(1, 0);
  size_t n = list.n;
  size_t valid = 0;
  size_t k = 0;
  for (size_t guard = 0; k < n && guard <= n; ++guard) {
    const size_t lk = list.lcp[k];
    size_t d = std::min<size_t>(k ? lk : 0, valid);
    // Byte i of the string is bytes[i - off].
    const char* bytes;
    size_t off, len;
    if (list.tails && d >= lk) {
      bytes = list.tails + list.tail_begin[k];
      off = lk;
      len = lk + (list.tail_begin[k + 1] - list.tail_begin[k]);
    } else {
      bytes = list.s[k].data();
      off = 0;
      len = list.s[k].size();
    }
    if (at.size() < len + 1) {
      at.resize(len + 1);
      exited.resize(len + 1);
    }
    size_t fail = SIZE_MAX;
    bool overflow = false;
    for (; d < len; ++d) {
      const auto c = static_cast<uint8_t>(bytes[d - off]);
      int32_t t = states.step(g, at[d], c, limits);
      if (t == InternedStates::kTableFull) {
        states.restart(at, d + 1);
        t = states.step(g, at[d], c, limits);
      }
      if (t < 0) {
        overflow = t == InternedStates::kOverflow;
        fail = d;
        break;
      }
      at[d + 1] = t >> 1;
      exited[d + 1] = exited[d] || (local && (t & 1));
    }
    if (fail == SIZE_MAX) {
      valid = len;
      on_run(k, k + 1, TokenVerdict::Accept);
      ++k;
      continue;
    }
    valid = fail;
    TokenVerdict verdict = failed_verdict(overflow, local, exited[fail] != 0);
    size_t end = k + 1;
    if (!overflow) {
      if (fail == 0 && list.first_byte_begin) end = list.first_byte_begin[static_cast<uint8_t>(bytes[0]) + 1];
      else
        while (end < n && list.lcp[end] >= fail + 1)
          end = list.lcp_drop ? std::min<size_t>(n, list.lcp_drop[end] - list.drop_base) : end + 1;
    }
    on_run(k, end, verdict);
    k = end;
  }
}

// The verdict of each (unique index u, start p) pair: unique[u] from byte p on, walked alone
// from interned state `start` (as walk_sorted, without shared prefixes). Calls on_token(u,
// verdict).
template <class OnToken>
void walk_each(const CompiledGrammar::Impl& g, const TokenVocabulary::Impl& v,
               const std::vector<std::pair<uint32_t, uint32_t>>& pairs, InternedStates& states, int32_t start,
               bool local, const StepLimits& limits, OnToken&& on_token) {
  std::vector<int32_t> keep(2);
  for (const auto& [u, p] : pairs) {
    const std::string& s = v.unique[u];
    int32_t at = start;
    bool exited = false;
    TokenVerdict verdict = TokenVerdict::Accept;
    for (size_t d = p; d < s.size(); ++d) {
      const auto c = static_cast<uint8_t>(s[d]);
      int32_t t = states.step(g, at, c, limits);
      if (t == InternedStates::kTableFull) {
        keep[0] = start;
        keep[1] = at;
        states.restart(keep, 2);
        start = keep[0];
        at = keep[1];
        t = states.step(g, at, c, limits);
      }
      if (t < 0) {
        verdict = failed_verdict(t == InternedStates::kOverflow, local, exited);
        break;
      }
      at = t >> 1;
      exited = exited || (local && (t & 1));
    }
    on_token(u, verdict);
  }
}

// walk_sorted over every unique string of the vocabulary.
template <class OnRun>
void walk_all_tokens(const CompiledGrammar::Impl& g, const TokenVocabulary::Impl& v, InternedStates& states,
                     int32_t start, bool local, const StepLimits& limits, OnRun&& on_run) {
  SortedStrings all{v.unique.data(), v.lcp.data(), v.unique.size(), v.first_byte_begin, v.tails.data(),
                    v.tail_begin.data(), v.lcp_drop.data(), 0};
  walk_sorted(g, all, states, start, local, limits, on_run);
}

}  // namespace pagoda::structured
