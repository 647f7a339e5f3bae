// Draft trees, the prompt-lookup drafter and the acceptance walk (speculative.h).
#include "engine/speculative/speculative.h"

#include <algorithm>
#include <stdexcept>

#include "engine/backend/step_plan.h"

namespace pagoda {

bool parse_speculative_mode(const std::string& text, SpeculativeMode& out) {
  if (text == "none") out = SpeculativeMode::None;
  else if (text == "ngram") out = SpeculativeMode::Ngram;
  else if (text == "draft") out = SpeculativeMode::Draft;
  else return false;
  return true;
}

const char* speculative_mode_name(SpeculativeMode mode) {
  switch (mode) {
    case SpeculativeMode::Ngram: return "ngram";
    case SpeculativeMode::Draft: return "draft";
    default: return "none";
  }
}

int DraftTree::add(int parent_node, int32_t token) {
  tokens.push_back(token);
  parent.push_back(parent_node);
  return size() - 1;
}

int DraftTree::child(int node, int32_t token) const {
  for (int i = node + 1; i < size(); ++i)
    if (parent[static_cast<size_t>(i)] == node && tokens[static_cast<size_t>(i)] == token) return i;
  return -1;
}

int DraftTree::depth(int node) const {
  int d = 0;
  for (int u = node; parent[static_cast<size_t>(u)] >= 0; u = parent[static_cast<size_t>(u)]) ++d;
  return d;
}

std::vector<uint64_t> DraftTree::masks() const {
  std::vector<uint64_t> m(tokens.size());
  for (size_t i = 0; i < m.size(); ++i)
    m[i] = (parent[i] >= 0 ? m[static_cast<size_t>(parent[i])] : 0) | (uint64_t{1} << i);
  return m;
}

bool DraftTree::valid() const {
  if (tokens.empty() || tokens.size() != parent.size() || size() > StepPlan::kMaxTreeTokens) return false;
  if (parent[0] != -1) return false;
  for (int i = 1; i < size(); ++i) {
    const int p = parent[static_cast<size_t>(i)];
    if (p < 0 || p >= i || child(p, tokens[static_cast<size_t>(i)]) != i) return false;
  }
  return true;
}

namespace {

// What followed earlier occurrences of a suffix: one entry per distinct next token, with the
// most recent start of that continuation in the haystack and how often it occurred.
struct Continuation {
  int start = 0;
  int count = 0;
};

// Continuations of the last n tokens of `context` (the haystack plus a drafted path) found in
// `hay`, most frequent first (ties: the most recent). Empty when the suffix does not occur.
std::vector<Continuation> continuations(const std::vector<int32_t>& hay, const std::vector<int32_t>& context,
                                        int n, int window) {
  std::vector<Continuation> out;
  const int L = static_cast<int>(hay.size());
  if (static_cast<int>(context.size()) < n || L <= n) return out;
  const int32_t* suffix = context.data() + context.size() - static_cast<size_t>(n);
  const int lowest = std::max(0, L - window);
  // p + n <= L - 1: the continuation's first token exists; the haystack's own suffix is excluded.
  for (int p = L - n - 1; p >= lowest; --p) {
    if (!std::equal(suffix, suffix + n, hay.begin() + p)) continue;
    const int c = p + n;
    auto it = std::find_if(out.begin(), out.end(), [&](const Continuation& k) { return hay[static_cast<size_t>(k.start)] == hay[static_cast<size_t>(c)]; });
    if (it == out.end()) out.push_back({c, 1});
    else ++it->count;
  }
  // Found most recent first, so a stable sort by count keeps recency among equals.
  std::stable_sort(out.begin(), out.end(), [](const Continuation& a, const Continuation& b) { return a.count > b.count; });
  return out;
}

// The continuations of the longest suffix (max_ngram down to 1) of `context` that occurs.
std::vector<Continuation> best_continuations(const std::vector<int32_t>& hay, const std::vector<int32_t>& context,
                                             const NgramDraftConfig& cfg) {
  for (int n = cfg.max_ngram; n >= 1; --n) {
    auto c = continuations(hay, context, n, cfg.max_window);
    if (!c.empty()) return c;
  }
  return {};
}

// Appends up to `len` nodes under `node`: the haystack's tokens from `start` on, one chain.
// Returns the nodes added.
std::vector<int> add_chain(DraftTree& tree, int node, const std::vector<int32_t>& hay, int start, int len) {
  std::vector<int> added;
  for (int i = start; i < static_cast<int>(hay.size()) && static_cast<int>(added.size()) < len; ++i) {
    const int32_t tok = hay[static_cast<size_t>(i)];
    if (tree.child(node, tok) >= 0) break;  // siblings hold distinct tokens
    node = tree.add(node, tok);
    added.push_back(node);
  }
  return added;
}

}  // namespace

DraftTree ngram_draft(const std::vector<int32_t>& tokens, int max_draft, const NgramDraftConfig& cfg) {
  DraftTree tree(tokens.empty() ? 0 : tokens.back());
  max_draft = std::min(max_draft, StepPlan::kMaxTreeTokens - 1);
  if (tokens.empty() || max_draft <= 0) return tree;
  const auto root = best_continuations(tokens, tokens, cfg);
  if (root.empty()) return tree;
  const int branches = std::max(1, cfg.branches);
  const int side_len = branches > 1 ? std::max(1, max_draft / (2 * branches)) : 0;
  // Side branches at depths 1 and 2 are budgeted before the main chain takes the rest.
  const int main_len = std::max(1, max_draft - 2 * (branches - 1) * side_len);
  const std::vector<int> main = add_chain(tree, 0, tokens, root[0].start, main_len);
  if (branches == 1) return tree;
  // Depth 1: the root's other continuations; depth 2: those after the main chain's first node.
  std::vector<int32_t> context = tokens;
  for (int level = 0; level < 2 && level <= static_cast<int>(main.size()); ++level) {
    const int at = level == 0 ? 0 : main[0];
    const auto alts = level == 0 ? root : [&] {
      context.push_back(tree.tokens[static_cast<size_t>(main[0])]);
      return best_continuations(tokens, context, cfg);
    }();
    int added = 0;
    for (const Continuation& c : alts) {
      if (added == branches - 1 || tree.drafted() >= max_draft) break;
      if (tree.child(at, tokens[static_cast<size_t>(c.start)]) >= 0) continue;  // the main chain's
      add_chain(tree, at, tokens, c.start, std::min(side_len, max_draft - tree.drafted()));
      ++added;
    }
  }
  return tree;
}

std::vector<int> accepted_nodes(const DraftTree& tree, const std::vector<int32_t>& emitted) {
  std::vector<int> path{0};
  for (size_t i = 0; i + 1 < emitted.size(); ++i) {
    const int c = tree.child(path.back(), emitted[i]);
    if (c < 0) throw std::logic_error("speculative: the emitted tokens leave the draft tree");
    path.push_back(c);
  }
  return path;
}

void SpecState::observe(int depth, int accepted) {
  if (depth <= 0) return;
  acceptance = 0.7 * acceptance + 0.3 * (static_cast<double>(accepted) / depth);
  ++verifications;
  if (acceptance >= 0.5) backoff = 8;
  if (verifications >= 3 && acceptance < kLowAcceptance) {
    paused_steps = backoff;
    backoff = std::min(backoff * 2, 256);
    acceptance = 2 * kLowAcceptance;  // after the pause: a few verifications to prove itself
    verifications = 0;
  }
}

bool SpecState::probe_despite_cost() {
  if (++gated < kProbeEvery) return false;
  gated = 0;
  return true;
}

bool SpecState::allowed() {
  if (paused_steps > 0) {
    --paused_steps;
    return false;
  }
  return true;
}

}  // namespace pagoda
