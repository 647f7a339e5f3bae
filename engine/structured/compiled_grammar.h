// Internal: the byte-level pushdown automaton a grammar lowers to, and the per-grammar token
// mask cache. Shared read-only by all matchers of the grammar; the cache has its own lock.
//
// Layout. Every rule alternative is a run of elements ending with End. An element is a
// Terminal (a small byte DFA: literal bytes or a UTF-8 encoded code point class) or a RuleRef.
// A parse stack is a vector of uint32: the lower entries are return positions (element indices
// to continue at once the rule above returns), the top entry is a DFA node id inside the
// terminal being matched. An empty stack means the whole start rule has been matched.
#pragma once

#include <memory>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/structured/grammar_ir.h"
#include "engine/structured/structured.h"

namespace pagoda::structured {

constexpr uint32_t kNodeAccept = UINT32_MAX;  // edge target: the terminal is complete

struct ByteEdge {
  uint8_t lo = 0, hi = 0;     // inclusive byte range
  uint32_t target = 0;        // node id, or kNodeAccept
};

struct DfaNode {
  uint32_t element = 0;       // the terminal element this node belongs to
  uint32_t first_edge = 0;    // edges[first_edge, first_edge + edge_count), sorted by lo
  uint32_t edge_count = 0;
};

struct Element {
  enum class Kind : uint8_t { End, Terminal, RuleRef };
  Kind kind = Kind::End;
  uint32_t value = 0;         // Terminal: start node; RuleRef: rule id
};

struct LoweredRule {
  std::string name;           // user rule name, or "<name>#<n>" for helpers made by lowering
  std::vector<uint32_t> alternatives;  // element index of each alternative's first element
  bool nullable = false;
};

// Token-mask knowledge for one key (a grammar position with the few stack frames above which
// nothing below can matter for most tokens; see mask_cache.cpp).
struct MaskEntry {
  std::vector<uint32_t> accepted_bits;  // token-id bitmask (empty when accepted_ids is used)
  std::vector<int32_t> accepted_ids;    // accepted token ids when few
  std::vector<uint32_t> dependent;      // unique-token indices (sorted) that need the full stack
};

struct StackKeyHash {
  size_t operator()(const std::vector<uint32_t>& v) const noexcept {
    uint64_t h = 1469598103934665603ull;
    for (uint32_t x : v) h = (h ^ x) * 1099511628211ull;
    return static_cast<size_t>(h ^ (h >> 29));
  }
};

struct CompiledGrammar::Impl {
  std::vector<Element> elements;
  std::vector<DfaNode> nodes;
  std::vector<ByteEdge> edges;
  std::vector<LoweredRule> rules;
  std::vector<uint8_t> nullable_from;   // per element: everything from here to End can be empty
  uint32_t start_element = 0;           // a RuleRef to the start rule followed by End
  bool folds_utf8 = false;              // edges on UTF-8 class boundaries (utf8_classes.h)
  GrammarLimits limits;
  std::shared_ptr<const TokenVocabulary> vocab;

  // Mask cache, filled lazily by matchers (mask_cache.cpp).
  mutable std::shared_mutex cache_mutex;
  mutable std::unordered_map<std::vector<uint32_t>, std::shared_ptr<const MaskEntry>, StackKeyHash>
      mask_cache;

  // Node transition on `byte`: target node, kNodeAccept, or kNoEdge.
  static constexpr uint32_t kNoEdge = UINT32_MAX - 1;
  uint32_t step(uint32_t node, uint8_t byte) const {
    const DfaNode& n = nodes[node];
    const ByteEdge* e = edges.data() + n.first_edge;
    for (uint32_t i = 0; i < n.edge_count; ++i) {
      if (byte < e[i].lo) return kNoEdge;
      if (byte <= e[i].hi) return e[i].target;
    }
    return kNoEdge;
  }
};

// Lowers a parsed grammar; throws GrammarError (limits, left recursion).
std::unique_ptr<CompiledGrammar::Impl> lower_grammar(const Grammar& grammar,
                                                     const GrammarLimits& limits);

// Code point set (sorted, disjoint, merged ranges; surrogates removed) -> byte DFA nodes
// appended to impl for terminal `element`; returns the start node.
uint32_t build_codepoint_dfa(CompiledGrammar::Impl& impl, uint32_t element,
                             const std::vector<CodepointRange>& set);
// Literal bytes -> chain of nodes; returns the start node. `bytes` must not be empty.
uint32_t build_literal_dfa(CompiledGrammar::Impl& impl, uint32_t element, const std::string& bytes);

}  // namespace pagoda::structured
