// A string automaton (pattern, format, exclusions) with minLength/maxLength, written as GBNF
// without unrolling a large bound into one rule per (state, length):
// 1. the product with a length counter, where it fits the automaton size limit (exact);
// 2. else, where every cycle of the automaton is a self-loop: the product over the states
//    (each with the range of lengths it can be reached at), a loop written as a counted repeat
//    `[set]{0,b}`, and a "loop sink" (an accepting state whose only edge returns to itself, as
//    after an unanchored match) as `[set]{a,b}` of exactly the lengths still allowed. Counted
//    repeats are lowered as binary counters. Exact when no state but the sinks loops; with
//    such loops a subset: each loop gets an equal share of maxLength, and minLength must be
//    met without counting on loop repeats;
// 3. else, when maxLength is set: the strings of lengths minLength..C, C the largest count
//    below maxLength whose product has at most kSubsetStates states (a subset).
// A subset is never an invalid value; where it leaves no string, the schema is refused.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <tuple>

#include "engine/structured/json_schema_internal.h"

namespace pagoda::structured::schema_detail {

namespace {

constexpr size_t kSubsetStates = 1024;

bool is_loop_sink(const CharDfa::State& s, size_t index) {
  return s.accepting && s.edges.size() == 1 && s.edges[0].target == int(index);
}

// The state's self-loop characters (empty when it has none).
CodepointSet self_loop(const CharDfa& dfa, size_t s) {
  for (const auto& e : dfa.states[s].edges)
    if (e.target == int(s)) return e.chars;
  return {};
}

// True when every cycle is a self-loop.
bool only_self_loops(const CharDfa& dfa) {
  std::vector<int> color(dfa.states.size(), 0);  // 0 new, 1 on the path, 2 done
  std::function<bool(size_t)> visit = [&](size_t s) {
    color[s] = 1;
    for (const auto& e : dfa.states[s].edges) {
      size_t t = size_t(e.target);
      if (t == s) continue;
      if (color[t] == 1 || (color[t] == 0 && !visit(t))) return false;
    }
    color[s] = 2;
    return true;
  };
  return visit(0);  // a trimmed automaton reaches every state from 0; depth <= its states
}

}  // namespace

Expr SchemaConverter::bounded_dfa_rules(const CharDfa& dfa_in, uint64_t min_len, std::optional<uint64_t> max_len,
                                        const std::string& path) {
  const std::string hint = path + "-pattern";
  if (min_len == 0 && !max_len) return dfa_rules(dfa_in, hint);
  if (max_len && min_len > *max_len) return std::nullopt;
  CharDfa dfa = writable_dfa(dfa_in);
  if (dfa.empty()) return std::nullopt;
  try {
    return dfa_rules(dfa_with_length(dfa, min_len, max_len), hint);
  } catch (const RegexError&) {
    // Too many (state, length) pairs: below.
  }
  if (only_self_loops(dfa)) return counted_loops(dfa, min_len, max_len, path);
  if (!max_len)
    throw SchemaError(path + "/minLength", "minLength beside a pattern with repeated groups needs an automaton of "
                                           "more than " + std::to_string(kMaxDfaStates) + " states");
  // A subset: the largest maximum below max_len whose product fits (more is never less).
  std::optional<CharDfa> best;
  uint64_t lo = min_len, hi = *max_len - 1;
  while (lo <= hi) {
    uint64_t mid = lo + (hi - lo) / 2;
    try {
      best = dfa_with_length(dfa, min_len, mid, kSubsetStates);
      lo = mid + 1;
    } catch (const RegexError&) {
      if (mid == 0) break;
      hi = mid - 1;
    }
  }
  if (!best || dfa_trimmed(*best).empty())
    throw SchemaError(path + "/maxLength", "pattern with length bounds needs an automaton of more than " +
                                               std::to_string(kMaxDfaStates) + " states");
  return dfa_rules(*best, hint);
}

// Case 2 above: every cycle of `dfa` is a self-loop.
Expr SchemaConverter::counted_loops(const CharDfa& dfa, uint64_t min_len, std::optional<uint64_t> max_len,
                                    const std::string& path) {
  const std::string hint = path + "-pattern";
  std::vector<bool> sink(dfa.states.size());
  size_t loops = 0;
  for (size_t s = 0; s < dfa.states.size(); ++s) {
    sink[s] = is_loop_sink(dfa.states[s], s);
    if (!sink[s] && !self_loop(dfa, s).empty()) ++loops;
  }
  if (sink[0]) {
    // Every string over one set: a plain counted repeat.
    charge_repeat(max_len.value_or(min_len), "x", path + "/maxLength");
    return add_rule(hint, "(" + gbnf_json_string_char(dfa.states[0].edges[0].chars) + ")" +
                              repeat_suffix(min_len, max_len));
  }
  // Each loop's share of the maximum.
  const uint64_t share = max_len ? std::max<uint64_t>(1, *max_len / (loops + 1)) : 0;
  // Product states: (state, shortest and longest length it is reached at). Without a maximum
  // only the shortest matters, saturating at min_len.
  struct Key {
    int state;
    uint64_t lo, hi;
    bool operator<(const Key& o) const { return std::tie(state, lo, hi) < std::tie(o.state, o.lo, o.hi); }
  };
  struct Node {
    bool end = false;
    std::string loop;                                   // the counted self-loop, or ""
    std::vector<std::pair<std::string, size_t>> moves;  // text, next node (kTail: none)
  };
  const size_t kTail = SIZE_MAX;
  std::map<Key, size_t> index = {{Key{0, 0, 0}, 0}};
  std::vector<Key> keys = {Key{0, 0, 0}};
  std::vector<Node> nodes(1);
  for (size_t k = 0; k < keys.size(); ++k) {
    if (keys.size() > kMaxDfaStates)
      throw SchemaError(path + "/maxLength", "pattern with length bounds needs an automaton of more than " +
                                                 std::to_string(kMaxDfaStates) + " states");
    auto [state, lo, hi] = keys[k];
    const size_t s = size_t(state);
    CodepointSet looped = self_loop(dfa, s);
    if (!looped.empty()) {
      std::optional<uint64_t> count;
      if (max_len) count = std::min(share, *max_len - hi);
      if (!count || *count > 0) {
        charge_repeat(count.value_or(0), "x", path + "/maxLength");
        nodes[k].loop = "(" + gbnf_json_string_char(looped) + ")" + repeat_suffix(0, count);
        if (count) hi += *count;
      }
    }
    nodes[k].end = dfa.states[s].accepting && lo >= min_len;
    if (max_len && hi + 1 > *max_len) continue;
    for (const auto& e : dfa.states[s].edges) {
      size_t t = size_t(e.target);
      if (t == s) continue;
      std::string c = gbnf_json_string_char(e.chars);
      if (sink[t]) {
        // After this character: repeats of the sink's set, as many as the bounds still allow.
        uint64_t tail_lo = min_len > lo + 1 ? min_len - (lo + 1) : 0;
        std::optional<uint64_t> tail_hi;
        if (max_len) tail_hi = *max_len - (hi + 1);
        std::string tail;
        if (!tail_hi || *tail_hi > 0) {
          charge_repeat(tail_hi.value_or(tail_lo), "x", path + "/maxLength");
          tail = "(" + gbnf_json_string_char(dfa.states[t].edges[0].chars) + ")" + repeat_suffix(tail_lo, tail_hi);
        }
        nodes[k].moves.push_back({seq({c, tail}), kTail});
        continue;
      }
      Key next = max_len ? Key{e.target, lo + 1, hi + 1} : Key{e.target, std::min(lo + 1, min_len), 0};
      auto [it, added] = index.emplace(next, keys.size());
      if (added) keys.push_back(next), nodes.emplace_back();
      nodes[k].moves.push_back({c, it->second});
    }
  }
  // Live nodes reach an end. Moves mostly go to later nodes (breadth-first, each one longer),
  // so backward sweeps settle quickly; the part is acyclic, so at most one per node.
  std::vector<bool> live(nodes.size(), false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t k = nodes.size(); k-- > 0;) {
      bool l = nodes[k].end;
      for (const auto& [text, t] : nodes[k].moves) l = l || t == kTail || live[t];
      if (l && !live[k]) live[k] = true, changed = true;
    }
  }
  if (!live[0]) return std::nullopt;
  std::vector<std::string> names(nodes.size());
  for (size_t k = 0; k < nodes.size(); ++k)
    if (live[k]) names[k] = fresh_name(hint + "-s" + std::to_string(k));
  for (size_t k = 0; k < nodes.size(); ++k) {
    if (!live[k]) continue;
    std::vector<std::string> alts;
    if (nodes[k].end) alts.push_back("");
    for (const auto& [text, t] : nodes[k].moves)
      if (t == kTail) alts.push_back(text);
      else if (live[t]) alts.push_back(seq({text, names[t]}));
    Expr body = alternatives(alts);
    std::string text = seq({nodes[k].loop, *body});
    if (text.empty()) text = "\"\"";
    rules_.emplace_back(names[k], text);
    grammar_bytes_ += names[k].size() + text.size() + 6;
    if (grammar_bytes_ > options_.max_grammar_bytes)
      throw SchemaError(hint, "pattern needs a grammar larger than " + std::to_string(options_.max_grammar_bytes) +
                                  " bytes");
  }
  return names[0];
}

}  // namespace pagoda::structured::schema_detail
