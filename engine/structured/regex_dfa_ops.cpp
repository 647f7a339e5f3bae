// Operations on complete code point DFAs (regex_dfa.h): product (intersection), complement,
// product with a length counter, and Moore minimization with dead/unreachable states removed
// (or only the latter, in linear time, for automata too large to minimize quickly).
#include <algorithm>
#include <map>
#include <set>

#include "engine/structured/regex_dfa.h"

namespace pagoda::structured {

namespace {

void check_size(size_t n, size_t max_states) {
  if (n > max_states)
    throw RegexError("pattern needs an automaton of more than " + std::to_string(max_states) + " states", 0);
}

// Builds a DFA over pair-like keys by breadth-first search from `start`; `step` lists the
// (chars, next key) edges of a key, `accept` says whether it accepts.
template <class Key, class Step, class Accept>
CharDfa explore(const Key& start, Step step, Accept accept, size_t max_states) {
  CharDfa out;
  std::map<Key, int> index = {{start, 0}};
  std::vector<Key> keys = {start};
  for (size_t d = 0; d < keys.size(); ++d) {
    CharDfa::State state;
    state.accepting = accept(keys[d]);
    for (auto& [chars, next] : step(keys[d])) {
      auto found = index.find(next);
      int t;
      if (found != index.end()) {
        t = found->second;
      } else {
        t = int(keys.size());
        check_size(keys.size() + 1, max_states);
        index[next] = t;
        keys.push_back(next);
      }
      state.edges.push_back({std::move(chars), t});
    }
    out.states.push_back(std::move(state));
  }
  return out;
}

}  // namespace

CharDfa dfa_intersect(const CharDfa& a, const CharDfa& b, size_t max_states) {
  using Key = std::pair<int, int>;
  auto step = [&](const Key& k) {
    std::vector<std::pair<CodepointSet, Key>> edges;
    for (const auto& ea : a.states[size_t(k.first)].edges)
      for (const auto& eb : b.states[size_t(k.second)].edges) {
        CodepointSet both = ea.chars.intersect(eb.chars);
        if (!both.empty()) edges.push_back({std::move(both), Key{ea.target, eb.target}});
      }
    return edges;
  };
  auto accept = [&](const Key& k) {
    return a.states[size_t(k.first)].accepting && b.states[size_t(k.second)].accepting;
  };
  return explore(Key{0, 0}, step, accept, max_states);
}

CharDfa dfa_complement(const CharDfa& a) {
  CharDfa out = a;
  // Complete it first: missing code points go to a new dead (then accepting) state.
  int dead = -1;
  for (size_t s = 0; s < out.states.size(); ++s) {
    CodepointSet covered;
    for (const auto& e : out.states[s].edges) covered.add(e.chars);
    CodepointSet missing = covered.complement();
    if (missing.empty()) continue;
    if (dead < 0) {
      dead = int(out.states.size());
      out.states.push_back({{{CodepointSet::all(), dead}}, false});
    }
    out.states[s].edges.push_back({std::move(missing), dead});
  }
  for (auto& s : out.states) s.accepting = !s.accepting;
  return out;
}

CharDfa dfa_with_length(const CharDfa& a, uint64_t min, std::optional<uint64_t> max, size_t max_states) {
  // Counter c saturates at max + 1 (too long: dead) or, unbounded, at min.
  uint64_t cap = max ? *max + 1 : min;
  check_size(size_t(std::min<uint64_t>(cap, max_states + 1)), max_states);
  using Key = std::pair<int, uint64_t>;
  auto step = [&](const Key& k) {
    std::vector<std::pair<CodepointSet, Key>> edges;
    uint64_t next = std::min(k.second + 1, cap);
    for (const auto& e : a.states[size_t(k.first)].edges) edges.push_back({e.chars, Key{e.target, next}});
    return edges;
  };
  auto accept = [&](const Key& k) {
    return a.states[size_t(k.first)].accepting && k.second >= min && (!max || k.second <= *max);
  };
  return explore(Key{0, 0}, step, accept, max_states);
}

CharDfa dfa_trimmed(const CharDfa& a) {
  const size_t n = a.states.size();
  // Reachable states.
  std::vector<bool> reach(n, false);
  std::vector<int> todo = {0};
  reach[0] = true;
  while (!todo.empty()) {
    int s = todo.back();
    todo.pop_back();
    for (const auto& e : a.states[size_t(s)].edges)
      if (!reach[size_t(e.target)]) reach[size_t(e.target)] = true, todo.push_back(e.target);
  }
  // Moore refinement over the intervals all edge sets cut the alphabet into.
  std::set<uint32_t> cut_set = {0};
  for (const auto& s : a.states)
    for (const auto& e : s.edges)
      for (const auto& [lo, hi] : e.chars.ranges()) {
        cut_set.insert(lo);
        if (hi < kMaxCodepoint) cut_set.insert(hi + 1);
      }
  std::vector<uint32_t> cuts(cut_set.begin(), cut_set.end());
  std::vector<std::vector<int>> delta(n, std::vector<int>(cuts.size(), -1));
  for (size_t s = 0; s < n; ++s)
    for (const auto& e : a.states[s].edges)
      for (size_t i = 0; i < cuts.size(); ++i)
        if (e.chars.contains(cuts[i])) delta[s][i] = e.target;
  std::vector<int> cls(n);
  for (size_t s = 0; s < n; ++s) cls[s] = a.states[s].accepting ? 1 : 0;
  for (size_t round = 0; round <= n; ++round) {
    std::map<std::vector<int>, int> ids;
    std::vector<int> next(n);
    for (size_t s = 0; s < n; ++s) {
      std::vector<int> sig = {cls[s]};
      for (int t : delta[s]) sig.push_back(t < 0 ? -1 : cls[size_t(t)]);
      next[s] = ids.emplace(std::move(sig), int(ids.size())).first->second;
    }
    // Refinement only splits classes: the same count means nothing changed.
    size_t before = std::set<int>(cls.begin(), cls.end()).size();
    cls = std::move(next);
    if (ids.size() == before) break;
  }
  // Classes that can reach an accepting one.
  int classes = *std::max_element(cls.begin(), cls.end()) + 1;
  std::vector<std::set<int>> preds;
  preds.resize(size_t(classes));
  std::vector<bool> live(static_cast<size_t>(classes), false);
  for (size_t s = 0; s < n; ++s) {
    if (!reach[s]) continue;
    if (a.states[s].accepting) live[size_t(cls[s])] = true;
    for (int t : delta[s])
      if (t >= 0) preds[size_t(cls[size_t(t)])].insert(cls[s]);
  }
  std::vector<int> work;
  for (int c = 0; c < classes; ++c)
    if (live[size_t(c)]) work.push_back(c);
  while (!work.empty()) {
    int c = work.back();
    work.pop_back();
    for (int p : preds[size_t(c)])
      if (!live[size_t(p)]) live[size_t(p)] = true, work.push_back(p);
  }
  // Renumber: start first, then in order of first reachable member.
  std::vector<int> number(size_t(classes), -1);
  CharDfa out;
  number[size_t(cls[0])] = 0;
  out.states.emplace_back();
  std::vector<size_t> rep = {0};
  for (size_t s = 0; s < n; ++s)
    if (reach[s] && live[size_t(cls[s])] && number[size_t(cls[s])] < 0) {
      number[size_t(cls[s])] = int(out.states.size());
      out.states.emplace_back();
      rep.push_back(s);
    }
  if (!live[size_t(cls[0])]) return out;  // empty language
  for (size_t k = 0; k < rep.size(); ++k) {
    std::map<int, CodepointSet> by_target;
    for (size_t i = 0; i < cuts.size(); ++i) {
      int t = delta[rep[k]][i];
      if (t < 0 || !live[size_t(cls[size_t(t)])]) continue;
      uint32_t hi = i + 1 < cuts.size() ? cuts[i + 1] - 1 : kMaxCodepoint;
      by_target[number[size_t(cls[size_t(t)])]].add(cuts[i], hi);
    }
    out.states[k].accepting = a.states[rep[k]].accepting;
    for (auto& [t, chars] : by_target) out.states[k].edges.push_back({std::move(chars), t});
  }
  return out;
}

CharDfa dfa_pruned(const CharDfa& a) {
  const size_t n = a.states.size();
  std::vector<bool> reach(n, false), live(n, false);
  std::vector<std::vector<int>> preds(n);
  std::vector<int> todo = {0};
  reach[0] = true;
  while (!todo.empty()) {
    int s = todo.back();
    todo.pop_back();
    for (const auto& e : a.states[size_t(s)].edges) {
      preds[size_t(e.target)].push_back(s);
      if (!reach[size_t(e.target)]) reach[size_t(e.target)] = true, todo.push_back(e.target);
    }
  }
  for (size_t s = 0; s < n; ++s)
    if (reach[s] && a.states[s].accepting) live[s] = true, todo.push_back(int(s));
  while (!todo.empty()) {
    int s = todo.back();
    todo.pop_back();
    for (int p : preds[size_t(s)])
      if (!live[size_t(p)]) live[size_t(p)] = true, todo.push_back(p);
  }
  CharDfa out;
  if (!live[0]) {
    out.states.emplace_back();
    return out;
  }
  std::vector<int> number(n, -1);
  std::vector<size_t> kept;
  for (size_t s = 0; s < n; ++s)
    if (live[s]) number[s] = int(kept.size()), kept.push_back(s);
  for (size_t s : kept) {
    CharDfa::State state;
    state.accepting = a.states[s].accepting;
    for (const auto& e : a.states[s].edges)
      if (live[size_t(e.target)] && !e.chars.empty()) state.edges.push_back({e.chars, number[size_t(e.target)]});
    out.states.push_back(std::move(state));
  }
  return out;
}

std::optional<std::vector<std::string>> dfa_finite_strings(const CharDfa& a, size_t max_strings) {
  CharDfa t = dfa_trimmed(a);
  std::vector<std::string> out;
  // Depth-first over paths; a path longer than the state count has a cycle: infinite.
  struct Frame {
    int state;
    std::string text;
    size_t length;
  };
  std::vector<Frame> todo = {{0, "", 0}};
  if (t.empty()) return out;
  while (!todo.empty()) {
    Frame f = std::move(todo.back());
    todo.pop_back();
    if (f.length > t.states.size()) return std::nullopt;
    const CharDfa::State& s = t.states[size_t(f.state)];
    if (s.accepting) {
      out.push_back(f.text);
      if (out.size() > max_strings) return std::nullopt;
    }
    for (const auto& e : s.edges) {
      if (e.chars.count() > max_strings) return std::nullopt;
      for (const auto& [lo, hi] : e.chars.ranges())
        for (uint32_t cp = lo; cp <= hi; ++cp) {
          todo.push_back({e.target, f.text + utf8_encode(cp), f.length + 1});
          if (todo.size() > 4 * max_strings + t.states.size()) return std::nullopt;
        }
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace pagoda::structured
