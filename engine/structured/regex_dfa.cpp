// Regex tree -> Thompson NFA (anchors as assertion edges) -> DFA by subset construction over
// the code point intervals the NFA's sets cut the alphabet into; product, complement and
// length-counting constructions; Moore minimization and trimming.
#include "engine/structured/regex_dfa.h"

#include <algorithm>
#include <map>
#include <set>

namespace pagoda::structured {

namespace {

constexpr size_t kMaxNfaStates = 200000;

struct Nfa {
  enum class Assert { None, Start, End };
  struct State {
    std::vector<std::pair<Assert, int>> eps;
    std::vector<std::pair<CodepointSet, int>> chars;
  };
  std::vector<State> states;

  int add() {
    if (states.size() >= kMaxNfaStates) throw RegexError("pattern too large for an automaton", 0);
    states.emplace_back();
    return int(states.size()) - 1;
  }
  // Returns (entry, exit) of the fragment matching `node`.
  std::pair<int, int> build(const RegexNode& node) {
    using K = RegexNode::Kind;
    int a = add();
    switch (node.kind) {
      case K::Empty: return {a, a};
      case K::Chars: {
        int b = add();
        states[a].chars.push_back({node.chars, b});
        return {a, b};
      }
      case K::LineStart:
      case K::LineEnd: {
        int b = add();
        states[a].eps.push_back({node.kind == K::LineStart ? Assert::Start : Assert::End, b});
        return {a, b};
      }
      case K::Concat: {
        int cur = a;
        for (const auto& c : node.children) {
          auto [in, out] = build(c);
          states[cur].eps.push_back({Assert::None, in});
          cur = out;
        }
        return {a, cur};
      }
      case K::Alternation: {
        int b = add();
        for (const auto& c : node.children) {
          auto [in, out] = build(c);
          states[a].eps.push_back({Assert::None, in});
          states[out].eps.push_back({Assert::None, b});
        }
        return {a, b};
      }
      case K::Repeat: {
        int cur = a;
        for (uint32_t i = 0; i < node.min; ++i) {
          auto [in, out] = build(node.children[0]);
          states[cur].eps.push_back({Assert::None, in});
          cur = out;
        }
        if (!node.max) {
          // A loop state: nullable bodies are harmless here (closures are sets).
          auto [in, out] = build(node.children[0]);
          states[cur].eps.push_back({Assert::None, in});
          states[out].eps.push_back({Assert::None, cur});
          return {a, cur};
        }
        int end = add();
        for (uint32_t i = node.min; i < *node.max; ++i) {
          auto [in, out] = build(node.children[0]);
          states[cur].eps.push_back({Assert::None, in});
          states[cur].eps.push_back({Assert::None, end});
          cur = out;
        }
        states[cur].eps.push_back({Assert::None, end});
        return {a, end};
      }
    }
    return {a, a};
  }

  std::vector<int> closure(std::vector<int> set, bool at_start, bool at_end) const {
    std::set<int> seen(set.begin(), set.end());
    while (!set.empty()) {
      int s = set.back();
      set.pop_back();
      for (const auto& [kind, t] : states[size_t(s)].eps) {
        if ((kind == Assert::Start && !at_start) || (kind == Assert::End && !at_end)) continue;
        if (seen.insert(t).second) set.push_back(t);
      }
    }
    return {seen.begin(), seen.end()};
  }
};

// Interval starts cutting 0..kMaxCodepoint so that every given set is a union of intervals.
std::vector<uint32_t> cut_points(const std::vector<const CodepointSet*>& sets) {
  std::set<uint32_t> cuts = {0};
  for (const CodepointSet* s : sets)
    for (const auto& [lo, hi] : s->ranges()) {
      cuts.insert(lo);
      if (hi < kMaxCodepoint) cuts.insert(hi + 1);
    }
  return {cuts.begin(), cuts.end()};
}

uint32_t interval_end(const std::vector<uint32_t>& cuts, size_t i) {
  return i + 1 < cuts.size() ? cuts[i + 1] - 1 : kMaxCodepoint;
}

void too_many(size_t n, size_t max_states) {
  if (n > max_states)
    throw RegexError("pattern needs an automaton of more than " + std::to_string(max_states) + " states", 0);
}

int target_of(const CharDfa::State& s, uint32_t cp) {
  for (const auto& e : s.edges)
    if (e.chars.contains(cp)) return e.target;
  return -1;
}

}  // namespace

std::vector<uint32_t> utf8_codepoints(const std::string& s) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < s.size();) {
    unsigned char b = static_cast<unsigned char>(s[i]);
    size_t len = b < 0x80 ? 1 : (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : 4;
    uint32_t cp = len == 1 ? b : len == 2 ? (b & 0x1F) : len == 3 ? (b & 0x0F) : (b & 0x07);
    for (size_t k = 1; k < len && i + k < s.size(); ++k) cp = (cp << 6) | (s[i + k] & 0x3F);
    out.push_back(cp);
    i += len;
  }
  return out;
}

bool CharDfa::accepts(const std::vector<uint32_t>& codepoints) const {
  int s = 0;
  for (uint32_t cp : codepoints) {
    s = target_of(states[size_t(s)], cp);
    if (s < 0) return false;
  }
  return states[size_t(s)].accepting;
}

bool CharDfa::empty() const {
  std::vector<bool> seen(states.size(), false);
  std::vector<int> todo = {0};
  seen[0] = true;
  while (!todo.empty()) {
    int s = todo.back();
    todo.pop_back();
    if (states[size_t(s)].accepting) return false;
    for (const auto& e : states[size_t(s)].edges)
      if (!seen[size_t(e.target)]) seen[size_t(e.target)] = true, todo.push_back(e.target);
  }
  return true;
}

CharDfa dfa_from_regex(const RegexNode& node, bool search, size_t max_states) {
  Nfa nfa;
  auto [in, out] = nfa.build(node);
  int start = in, final_state = out;
  if (search) {
    start = nfa.add();
    nfa.states[size_t(start)].chars.push_back({CodepointSet::all(), start});
    nfa.states[size_t(start)].eps.push_back({Nfa::Assert::None, in});
    final_state = nfa.add();
    nfa.states[size_t(out)].eps.push_back({Nfa::Assert::None, final_state});
    nfa.states[size_t(final_state)].chars.push_back({CodepointSet::all(), final_state});
  }
  std::vector<const CodepointSet*> sets;
  for (const auto& s : nfa.states)
    for (const auto& [chars, t] : s.chars) sets.push_back(&chars);
  std::vector<uint32_t> cuts = cut_points(sets);

  CharDfa dfa;
  std::vector<std::vector<int>> subsets;
  std::map<std::vector<int>, int> index;  // non-start subsets
  auto accepting = [&](const std::vector<int>& subset, bool at_start) {
    std::vector<int> c = nfa.closure(subset, at_start, true);
    return std::binary_search(c.begin(), c.end(), final_state);
  };
  subsets.push_back(nfa.closure({start}, true, false));
  dfa.states.emplace_back();
  dfa.states[0].accepting = accepting(subsets[0], true);
  for (size_t d = 0; d < subsets.size(); ++d) {
    std::map<int, CodepointSet> by_target;
    for (size_t i = 0; i < cuts.size(); ++i) {
      std::vector<int> next;
      for (int s : subsets[d])
        for (const auto& [chars, t] : nfa.states[size_t(s)].chars)
          if (chars.contains(cuts[i])) next.push_back(t);
      next = nfa.closure(next, false, false);
      auto found = index.find(next);
      int target;
      if (found != index.end()) {
        target = found->second;
      } else {
        target = int(subsets.size());
        too_many(subsets.size() + 1, max_states);
        index[next] = target;
        dfa.states.emplace_back();
        dfa.states.back().accepting = accepting(next, false);
        subsets.push_back(std::move(next));
      }
      by_target[target].add(cuts[i], interval_end(cuts, i));
    }
    for (auto& [t, chars] : by_target) dfa.states[d].edges.push_back({std::move(chars), t});
  }
  return dfa;
}

CharDfa dfa_from_strings(const std::vector<std::string>& strings, size_t max_states) {
  RegexNode alt;
  alt.kind = RegexNode::Kind::Alternation;
  for (const auto& s : strings) {
    RegexNode cat;
    cat.kind = RegexNode::Kind::Concat;
    for (uint32_t cp : utf8_codepoints(s)) {
      RegexNode c;
      c.kind = RegexNode::Kind::Chars;
      c.chars = CodepointSet::of(cp);
      cat.children.push_back(std::move(c));
    }
    alt.children.push_back(std::move(cat));
  }
  return dfa_from_regex(alt, false, max_states);
}

}  // namespace pagoda::structured
