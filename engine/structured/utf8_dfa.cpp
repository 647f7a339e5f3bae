// Terminals as byte DFAs: literal byte chains, and code point classes compiled to the UTF-8
// byte sequences that encode them (so matching runs on bytes and a token may end in the
// middle of a character).
#include <algorithm>

#include "engine/structured/compiled_grammar.h"

namespace pagoda::structured {

namespace {

// Code points of S within [a, b] (S sorted, disjoint).
uint64_t overlap(const std::vector<CodepointRange>& set, uint32_t a, uint32_t b) {
  auto it = std::lower_bound(set.begin(), set.end(), a,
                             [](const CodepointRange& r, uint32_t v) { return r.hi < v; });
  uint64_t n = 0;
  for (; it != set.end() && it->lo <= b; ++it)
    n += static_cast<uint64_t>(std::min(it->hi, b)) - std::max(it->lo, a) + 1;
  return n;
}

class CodepointDfaBuilder {
 public:
  CodepointDfaBuilder(CompiledGrammar::Impl& impl, uint32_t element,
                      const std::vector<CodepointRange>& set)
      : impl_(impl), element_(element), set_(set) {}

  uint32_t build_start() {
    uint32_t targets[256];
    for (uint32_t b = 0; b < 256; ++b) {
      targets[b] = CompiledGrammar::Impl::kNoEdge;
      if (b < 0x80) {
        if (overlap(set_, b, b)) targets[b] = kNodeAccept;
      } else if (b >= 0xC2 && b <= 0xDF) {
        targets[b] = child((b & 0x1F) << 6, 1, 0x80, 0x7FF);
      } else if (b >= 0xE0 && b <= 0xEF) {
        targets[b] = child((b & 0x0F) << 12, 2, 0x800, 0xFFFF);
      } else if (b >= 0xF0 && b <= 0xF4) {
        targets[b] = child((b & 0x07) << 18, 3, 0x10000, kMaxCodepoint);
      }
    }
    return emit(targets);
  }

 private:
  // Target for a prefix whose code points are base + [0, 64^remaining), `remaining`
  // continuation bytes still to come; only code points in [valid_lo, valid_hi] are encoded
  // with this length.
  uint32_t child(uint32_t base, int remaining, uint32_t valid_lo, uint32_t valid_hi) {
    uint32_t span = 1u << (6 * remaining);
    uint32_t lo = std::max(base, valid_lo);
    uint32_t hi = std::min(base + span - 1, valid_hi);
    if (lo > hi) return CompiledGrammar::Impl::kNoEdge;
    uint64_t n = overlap(set_, lo, hi);
    if (n == 0) return CompiledGrammar::Impl::kNoEdge;
    if (n == span) return any_node(remaining);
    uint32_t targets[256];
    for (uint32_t b = 0; b < 256; ++b) targets[b] = CompiledGrammar::Impl::kNoEdge;
    uint32_t sub = span >> 6;
    for (uint32_t c = 0; c < 64; ++c) {
      uint32_t sub_base = base + c * sub;
      if (remaining == 1) {
        if (sub_base >= valid_lo && sub_base <= valid_hi && overlap(set_, sub_base, sub_base))
          targets[0x80 + c] = kNodeAccept;
      } else {
        targets[0x80 + c] = child(sub_base, remaining - 1, valid_lo, valid_hi);
      }
    }
    return emit(targets);
  }

  // Node accepting any `remaining` continuation bytes.
  uint32_t any_node(int remaining) {
    if (any_[remaining] != UINT32_MAX) return any_[remaining];
    uint32_t next = remaining == 1 ? kNodeAccept : any_node(remaining - 1);
    uint32_t targets[256];
    for (uint32_t b = 0; b < 256; ++b)
      targets[b] = (b >= 0x80 && b <= 0xBF) ? next : CompiledGrammar::Impl::kNoEdge;
    any_[remaining] = emit(targets);
    return any_[remaining];
  }

  uint32_t emit(const uint32_t* targets) {
    DfaNode node;
    node.element = element_;
    node.first_edge = static_cast<uint32_t>(impl_.edges.size());
    for (uint32_t b = 0; b < 256;) {
      if (targets[b] == CompiledGrammar::Impl::kNoEdge) {
        ++b;
        continue;
      }
      uint32_t e = b;
      while (e + 1 < 256 && targets[e + 1] == targets[b]) ++e;
      impl_.edges.push_back({static_cast<uint8_t>(b), static_cast<uint8_t>(e), targets[b]});
      b = e + 1;
    }
    node.edge_count = static_cast<uint32_t>(impl_.edges.size()) - node.first_edge;
    impl_.nodes.push_back(node);
    return static_cast<uint32_t>(impl_.nodes.size() - 1);
  }

  CompiledGrammar::Impl& impl_;
  uint32_t element_;
  const std::vector<CodepointRange>& set_;
  uint32_t any_[4] = {UINT32_MAX, UINT32_MAX, UINT32_MAX, UINT32_MAX};
};

}  // namespace

uint32_t build_codepoint_dfa(CompiledGrammar::Impl& impl, uint32_t element,
                             const std::vector<CodepointRange>& set) {
  CodepointDfaBuilder builder(impl, element, set);
  return builder.build_start();
}

uint32_t build_literal_dfa(CompiledGrammar::Impl& impl, uint32_t element, const std::string& bytes) {
  uint32_t next = kNodeAccept;
  for (size_t i = bytes.size(); i-- > 0;) {
    DfaNode node;
    node.element = element;
    node.first_edge = static_cast<uint32_t>(impl.edges.size());
    node.edge_count = 1;
    auto b = static_cast<uint8_t>(bytes[i]);
    impl.edges.push_back({b, b, next});
    impl.nodes.push_back(node);
    next = static_cast<uint32_t>(impl.nodes.size() - 1);
  }
  return next;
}

}  // namespace pagoda::structured
