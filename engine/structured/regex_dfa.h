// Deterministic automata over Unicode code points, built from parsed regexes: what the JSON
// Schema converter needs to write exact key and string languages that a regex tree alone
// cannot say: a pattern with anchors anywhere (search semantics, `^` and `$` as assertions),
// a pattern intersected with length bounds, property names matching one pattern and none of
// the others, names other than a fixed list. Automata are complete (every state has an edge
// for every code point, possibly to a dead state) until `trimmed` removes dead and unreachable
// states for writing out. Every construction stops with RegexError past `max_states`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/structured/regex.h"

namespace pagoda::structured {

struct CharDfa {
  struct Edge {
    CodepointSet chars;
    int target;
  };
  struct State {
    std::vector<Edge> edges;  // disjoint sets
    bool accepting = false;
  };
  std::vector<State> states;  // state 0 is the start

  bool accepts(const std::vector<uint32_t>& codepoints) const;
  bool empty() const;  // accepts no string at all
};

inline constexpr size_t kMaxDfaStates = 4000;

// The strings `node` matches. search: JSON Schema `pattern` semantics (a match anywhere in the
// string; `^` and `$` assert the string's start and end). Otherwise the whole string must match
// (anchors are then assertions too).
CharDfa dfa_from_regex(const RegexNode& node, bool search, size_t max_states = kMaxDfaStates);
// Exactly the given strings (UTF-8).
CharDfa dfa_from_strings(const std::vector<std::string>& strings, size_t max_states = kMaxDfaStates);
CharDfa dfa_intersect(const CharDfa& a, const CharDfa& b, size_t max_states = kMaxDfaStates);
CharDfa dfa_complement(const CharDfa& a);
// Strings of `a` with min..max code points (max nullopt = unbounded).
CharDfa dfa_with_length(const CharDfa& a, uint64_t min, std::optional<uint64_t> max,
                        size_t max_states = kMaxDfaStates);
// Minimal, without dead or unreachable states (state 0 still the start; an empty language
// gives a single non-accepting state with no edges).
CharDfa dfa_trimmed(const CharDfa& a);

// Without dead or unreachable states, not minimized (linear time; state 0 still the start;
// an empty language gives a single non-accepting state with no edges).
CharDfa dfa_pruned(const CharDfa& a);

// Every string of a finite language (UTF-8, sorted by bytes), or nullopt when the
// language is infinite or has more than `max_strings` strings.
std::optional<std::vector<std::string>> dfa_finite_strings(const CharDfa& a, size_t max_strings);

std::vector<uint32_t> utf8_codepoints(const std::string& s);

}  // namespace pagoda::structured
