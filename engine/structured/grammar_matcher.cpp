// GrammarMatcher: one sequence's parse state (a StackSet), advanced over token bytes, with the
// whole-vocabulary mask built from the per-stack cached masks (mask_cache.h).
#include <algorithm>
#include <cstring>
#include <deque>
#include <stdexcept>

#include "engine/structured/mask_cache.h"
#include "engine/structured/token_vocabulary.h"

namespace pagoda::structured {

struct GrammarMatcher::State {
  StackSet stacks;
  bool terminated = false;
  size_t max_rollback = 0;
  struct Saved {
    StackSet stacks;
    bool terminated;
  };
  std::deque<Saved> history;  // oldest first, at most max_rollback
};

namespace {

StepLimits limits_of(const CompiledGrammar& g) {
  StepLimits l;
  l.max_stacks = g.impl().limits.max_stacks;
  return l;
}

// Advances `stacks` over `bytes`; false (stacks unspecified) when rejected.
bool advance_all(const CompiledGrammar::Impl& g, StackSet& stacks, std::string_view bytes,
                 const StepLimits& limits) {
  thread_local StackSet next;
  for (char c : bytes) {
    if (!advance_byte(g, stacks, static_cast<uint8_t>(c), next, limits)) return false;
    if (next.empty()) return false;
    std::swap(stacks, next);
  }
  return true;
}

}  // namespace

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar, size_t max_rollback)
    : grammar_(std::move(grammar)), state_(std::make_unique<State>()) {
  if (!grammar_) throw std::invalid_argument("GrammarMatcher: null grammar");
  state_->max_rollback = max_rollback;
  state_->stacks = initial_stacks(grammar_->impl(), limits_of(*grammar_));
}

GrammarMatcher::GrammarMatcher(const GrammarMatcher& o)
    : grammar_(o.grammar_), state_(std::make_unique<State>(*o.state_)) {}
GrammarMatcher& GrammarMatcher::operator=(const GrammarMatcher& o) {
  if (this != &o) {
    grammar_ = o.grammar_;
    state_ = std::make_unique<State>(*o.state_);
  }
  return *this;
}
GrammarMatcher::GrammarMatcher(GrammarMatcher&&) noexcept = default;
GrammarMatcher& GrammarMatcher::operator=(GrammarMatcher&&) noexcept = default;
GrammarMatcher::~GrammarMatcher() = default;

bool GrammarMatcher::can_end() const { return !state_->terminated && state_->stacks.has_empty(); }
bool GrammarMatcher::is_finished() const {
  return state_->terminated || !state_->stacks.has_live();
}
bool GrammarMatcher::is_terminated() const { return state_->terminated; }

void GrammarMatcher::fill_mask(uint32_t* bits) const {
  const CompiledGrammar::Impl& g = grammar_->impl();
  if (!g.vocab) throw std::logic_error("GrammarMatcher::fill_mask: grammar compiled without a vocabulary");
  const TokenVocabulary::Impl& v = g.vocab->impl();
  std::memset(bits, 0, v.words * sizeof(uint32_t));
  if (state_->terminated) return;
  const StackSet& s = state_->stacks;
  bool end = false;
  thread_local std::vector<uint32_t> last_key;
  last_key.clear();
  for (size_t i = 0; i < s.size(); ++i) {
    if (s.length(i) == 0) {
      end = true;
      continue;
    }
    add_stack_mask(g, s.begin(i), s.length(i), bits, &last_key);
  }
  if (end)
    for (int32_t id : v.eog_ids) bits[static_cast<uint32_t>(id) >> 5] |= 1u << (id & 31);
}

std::vector<uint32_t> GrammarMatcher::mask() const {
  const auto& vocab = grammar_->vocabulary();
  if (!vocab) throw std::logic_error("GrammarMatcher::mask: grammar compiled without a vocabulary");
  std::vector<uint32_t> bits(vocab->mask_words());
  fill_mask(bits.data());
  return bits;
}

bool GrammarMatcher::is_token_allowed(int32_t id) const {
  const auto& vocab = grammar_->vocabulary();
  if (!vocab || id < 0 || id >= vocab->size() || state_->terminated) return false;
  const TokenVocabulary::Impl& v = vocab->impl();
  if (v.eog[id]) return can_end();
  if (v.unique_of_id[id] < 0) return false;
  thread_local StackSet copy;  // reused: this runs once per token in brute-force checks
  copy = state_->stacks;
  return advance_all(grammar_->impl(), copy, v.token_bytes[id], limits_of(*grammar_));
}

bool GrammarMatcher::accept_token(int32_t id) {
  const auto& vocab = grammar_->vocabulary();
  if (!vocab) throw std::logic_error("GrammarMatcher::accept_token: grammar compiled without a vocabulary");
  if (id < 0 || id >= vocab->size() || state_->terminated) return false;
  const TokenVocabulary::Impl& v = vocab->impl();
  if (v.eog[id]) {
    if (!can_end()) return false;
    if (state_->max_rollback) {
      state_->history.push_back({state_->stacks, state_->terminated});
      if (state_->history.size() > state_->max_rollback) state_->history.pop_front();
    }
    state_->terminated = true;
    return true;
  }
  if (v.unique_of_id[id] < 0) return false;
  return accept_bytes(v.token_bytes[id]);
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
  if (state_->terminated) return false;
  StackSet next = state_->stacks;
  if (!advance_all(grammar_->impl(), next, bytes, limits_of(*grammar_))) return false;
  if (state_->max_rollback) {
    state_->history.push_back({std::move(state_->stacks), state_->terminated});
    if (state_->history.size() > state_->max_rollback) state_->history.pop_front();
  }
  state_->stacks = std::move(next);
  return true;
}

std::string GrammarMatcher::forced_bytes(size_t max_bytes) const {
  const CompiledGrammar::Impl& g = grammar_->impl();
  std::string out;
  if (state_->terminated) return out;
  StackSet cur = state_->stacks, next;
  StepLimits limits = limits_of(*grammar_);
  for (size_t n = 0; n < max_bytes; ++n) {
    if (cur.empty() || cur.has_empty()) break;
    int only = -1;
    bool forced = true;
    for (size_t i = 0; i < cur.size() && forced; ++i) {
      const DfaNode& node = g.nodes[cur.begin(i)[cur.length(i) - 1]];
      for (uint32_t e = 0; e < node.edge_count && forced; ++e) {
        const ByteEdge& edge = g.edges[node.first_edge + e];
        if (edge.lo != edge.hi || (only >= 0 && only != edge.lo)) forced = false;
        else only = edge.lo;
      }
    }
    if (!forced || only < 0) break;
    if (!advance_byte(g, cur, static_cast<uint8_t>(only), next, limits) || next.empty()) break;
    out += static_cast<char>(only);
    std::swap(cur, next);
  }
  return out;
}

void GrammarMatcher::reset() {
  state_->stacks = initial_stacks(grammar_->impl(), limits_of(*grammar_));
  state_->terminated = false;
  state_->history.clear();
}

bool GrammarMatcher::rollback(size_t n) {
  if (n == 0) return true;
  if (n > state_->history.size()) return false;
  for (size_t i = 1; i < n; ++i) state_->history.pop_back();
  state_->stacks = std::move(state_->history.back().stacks);
  state_->terminated = state_->history.back().terminated;
  state_->history.pop_back();
  return true;
}

}  // namespace pagoda::structured
