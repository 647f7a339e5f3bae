// Speculative decoding: draft token trees, the n-gram (prompt lookup) drafter and acceptance.
//
// A speculating sequence's decode step verifies a tree instead of one token: node 0 (the root)
// is its last token, not yet in the cache, as in a plain decode; nodes 1.. are drafted
// continuations, each the child of an earlier node. The whole tree runs in one forward pass
// (StepPlan::tree_masks: each node sees the committed prefix and its own ancestors only), and
// every node gets a logit row: the target's distribution for the token after that node's path.
//
// Acceptance walks down from the root: at node u the target's token x is drawn from u's logits
// exactly as a plain decode would draw it (sample_token, the sequence's own Rng, one draw per
// emitted token); if a child of u holds x, that child is accepted and the walk goes on from it,
// otherwise x is the step's last token. Greedy (temperature 0) this is exact match, so the
// output is token for token the plain output. With sampling it is speculative rejection
// sampling for deterministic drafts: a drafted token is a proposal q = a point mass, accepted
// with probability min(1, p/q) = p(x), and on rejection the next token comes from the residual
// max(0, p - q) renormalised, i.e. p with the rejected children removed; drawing x from p and
// matching it against the children is that procedure with one uniform per token. The output
// distribution is therefore the target's, and because the accepted nodes' logits are bit for bit
// those of plain decoding (batch-invariant kernels, the tree mask reads the same K/V in the same
// order) a seed reproduces the very tokens plain sampling draws with it.
//
// Node order: every parent before its children, and the drafter's first choice at each depth
// (the main chain) as nodes 1, 2, ...: when the main chain is accepted its K/V already sit at
// their final logical indices (no copies); only an accepted side branch is moved (slot copies).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pagoda {

enum class SpeculativeMode { None, Ngram, Draft };

// Parses "none" | "ngram" | "draft"; false for anything else.
bool parse_speculative_mode(const std::string& text, SpeculativeMode& out);
const char* speculative_mode_name(SpeculativeMode mode);

struct DraftTree {
  std::vector<int32_t> tokens;  // per node; node 0 is the root
  std::vector<int32_t> parent;  // per node; -1 for the root, else an earlier node

  explicit DraftTree(int32_t root = 0) : tokens{root}, parent{-1} {}
  int size() const { return static_cast<int>(tokens.size()); }
  int drafted() const { return size() - 1; }
  // Appends a node under `parent_node`; returns its index.
  int add(int parent_node, int32_t token);
  // The child of `node` holding `token`, or -1.
  int child(int node, int32_t token) const;
  int depth(int node) const;
  // StepPlan::tree_masks of the nodes (bit i of node j: i is j or an ancestor of j).
  std::vector<uint64_t> masks() const;
  // Checks the shape (parents earlier, at most 64 nodes, distinct tokens among siblings).
  bool valid() const;
};

// Prompt lookup: finds the most recent earlier occurrences of the sequence's last n tokens
// (n = max_ngram down to 1, the longest that occurs) and drafts what followed them. The main
// chain follows the most frequent continuation (ties: the most recent); with branches > 1 the
// next most frequent distinct continuations become side branches at depths 1 and 2 of the main
// chain (shorter chains). At most max_draft drafted nodes; an empty tree (root only) when
// nothing matches.
struct NgramDraftConfig {
  int max_ngram = 3;
  int branches = 1;
  int max_window = 4096;  // tokens searched back from the end
};
DraftTree ngram_draft(const std::vector<int32_t>& tokens, int max_draft, const NgramDraftConfig& cfg);

// The accepted path of `tree` given the tokens a verification emitted (drafts accepted, then
// the last drawn token): the accepted nodes, root first. Throws std::logic_error when the
// tokens do not follow the tree.
std::vector<int> accepted_nodes(const DraftTree& tree, const std::vector<int32_t>& emitted);

// The acceptance walk: draw(node) draws the target's token from that node's logits (given the
// tokens drawn before it in this walk); the walk follows the child holding it, and ends with
// the first token no child holds. Returns what each draw returned, in order.
template <class Draw>
auto walk_tree(const DraftTree& tree, Draw&& draw) {
  std::vector<decltype(draw(0))> out;
  for (int node = 0; node >= 0;) {
    out.push_back(draw(node));
    node = tree.child(node, out.back().token);
  }
  return out;
}

// Per-sequence speculation state: how many tokens to draft next and when to try again after
// low acceptance (acceptance below kLowAcceptance over recent verifications pauses the
// sequence's speculation for a doubling number of steps).
struct SpecState {
  double acceptance = 0.5;  // exponential average of accepted / drafted depth
  int verifications = 0;
  int paused_steps = 0;     // decode steps left without speculation
  int backoff = 8;          // the next pause's length
  static constexpr double kLowAcceptance = 0.15;
  // The step-cost gate (spec_cost.h) decides from `acceptance`, which only verifications
  // update: a sequence it keeps from drafting drafts anyway every kProbeEvery-th decode, so the
  // estimate follows the text (a passage being copied) instead of freezing at its prior.
  int gated = 0;  // decodes in a row the gate kept from drafting
  int drafted_total = 0, accepted_total = 0;  // over the sequence's life (its Usage)
  static constexpr int kProbeEvery = 16;

  // After a verification that drafted a main-chain depth of `depth` and accepted `accepted`.
  void observe(int depth, int accepted);
  // Called per decode step: true when this step may speculate (counts a paused step down).
  bool allowed();
  // The cost gate said no drafts this decode: true when it drafts anyway (a probe).
  bool probe_despite_cost();
};

}  // namespace pagoda
