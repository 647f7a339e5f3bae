// Token masks per parse stack through the per-grammar adaptive cache (see mask_cache.h), and
// compile_gbnf / CompiledGrammar, which own that cache.
#include "engine/structured/mask_cache.h"

#include <algorithm>
#include <mutex>

#include "engine/structured/loop_split.h"
#include "engine/structured/token_walk.h"
#include "engine/structured/utf8_classes.h"

namespace pagoda::structured {

WalkScratch& walk_scratch() {
  thread_local WalkScratch scratch;
  return scratch;
}

namespace {
uint64_t hash_stack_set(const StackSet& s) {
  uint64_t h = 1469598103934665603ull ^ s.size();
  for (size_t i = 0; i < s.size(); ++i) {
    h = (h ^ (0x9E3779B97F4A7C15ull + s.length(i))) * 1099511628211ull;
    const uint32_t* f = s.begin(i);
    for (size_t j = 0; j < s.length(i); ++j) h = (h ^ f[j]) * 1099511628211ull;
  }
  return h;
}
}  // namespace

int32_t InternedStates::intern(const StackSet& s) {
  uint64_t h = hash_stack_set(s);
  auto it = by_hash_.find(h);
  if (it != by_hash_.end())
    for (int32_t id : it->second)
      if (states_[id] == s) return id;
  if (states_.size() >= max_states_) return -1;
  states_.push_back(s);
  hashes_.push_back(h);
  by_hash_[h].push_back(static_cast<int32_t>(states_.size() - 1));
  transitions_.resize(states_.size() * 256, kUnknown);
  return static_cast<int32_t>(states_.size() - 1);
}

void InternedStates::restart(std::vector<int32_t>& keep, size_t count) {
  std::vector<StackSet> kept;
  for (size_t i = 0; i < count; ++i) kept.push_back(states_[keep[i]]);
  states_.clear();
  hashes_.clear();
  by_hash_.clear();
  transitions_.clear();
  size_t cap = max_states_;
  max_states_ = std::max(cap, count + 1);  // the kept path always fits, and one more state
  for (size_t i = 0; i < count; ++i) keep[i] = intern(kept[i]);
  max_states_ = std::max(cap, count + 1);
}

int32_t InternedStates::compute_step(const CompiledGrammar::Impl& g, int32_t state, uint8_t byte,
                                     const StepLimits& limits) {
  const size_t row = static_cast<size_t>(state) * 256;
  // Every byte of the cell around `byte` steps the same way: one advance fills them all.
  uint8_t lo, hi;
  byte_cell(g, states_[state], byte, lo, hi);
  int32_t result;
  if (!advance_byte(g, states_[state], byte, scratch_, limits)) {
    result = kOverflow;
  } else if (scratch_.empty()) {
    result = kDead;
  } else {
    bool left = scratch_.remove_empty();
    int32_t id = intern(scratch_);  // may grow transitions_
    if (id < 0) return kTableFull;
    result = (id << 1) | (left ? 1 : 0);
  }
  std::fill(transitions_.begin() + static_cast<std::ptrdiff_t>(row + lo),
            transitions_.begin() + static_cast<std::ptrdiff_t>(row + hi + 1), result);
  return result;
}

namespace {

StepLimits step_limits(const CompiledGrammar::Impl& g) {
  StepLimits l;
  l.max_stacks = g.limits.max_stacks;
  return l;
}

void set_ids(const TokenVocabulary::Impl& v, uint32_t u, uint32_t* bits) {
  for (uint32_t i = v.ids_begin[u]; i < v.ids_begin[u + 1]; ++i) {
    auto id = static_cast<uint32_t>(v.ids[i]);
    bits[id >> 5] |= 1u << (id & 31);
  }
}

// The entry of a loop state (loop_split.h): the split's inside tokens, plus its other tokens
// and the tokens of the `skip` first bytes walked.
// The id of `s` in `states`, emptying the table first when it is full (a walk may have filled
// and renumbered it).
int32_t intern_again(InternedStates& states, const StackSet& s) {
  int32_t id = states.intern(s);
  if (id >= 0) return id;
  std::vector<int32_t> none;
  states.restart(none, 0);
  return states.intern(s);
}

std::shared_ptr<const MaskEntry> split_entry(const CompiledGrammar::Impl& g, const TokenVocabulary::Impl& v,
                                             const LoopSplit& split, const LoopTable& table,
                                             InternedStates& states, const std::vector<uint8_t>& skip,
                                             bool local, const StepLimits& limits) {
  auto entry = std::make_shared<MaskEntry>();
  std::vector<uint32_t> accepted;
  const bool any_skipped = std::find(skip.begin(), skip.end(), 1) != skip.end();
  auto first_skipped = [&](uint32_t u) { return any_skipped && skip[static_cast<uint8_t>(v.unique[u][0])] != 0; };
  const StackSet start_state = states.state(table.start), loop_state = states.state(table.interned[0]);
  // After a chain of counted characters, the tokens leaving after a visit of L are walked
  // whole from the start (their state at that visit need not be L).
  std::vector<std::pair<uint32_t, uint32_t>> whole;
  if (table.chain) {
    for (uint32_t u : split.rest[1].tokens) whole.emplace_back(u, 0);
    for (const auto& [u, p] : split.each[1]) whole.emplace_back(u, 0);
    walk_each(g, v, whole, states, intern_again(states, start_state), local, limits,
              [&](uint32_t u, TokenVerdict verdict) {
                if (verdict == TokenVerdict::Reject || first_skipped(u)) return;
                (verdict == TokenVerdict::Accept ? accepted : entry->dependent).push_back(u);
              });
  }
  for (size_t x = 0; x < (table.chain ? 1u : 2u); ++x) {
    const LoopSplit::Rest& rest = split.rest[x];
    SortedStrings list{rest.suffix.data(), rest.lcp.data(), rest.suffix.size(), nullptr};
    walk_sorted(g, list, states, intern_again(states, x == 0 ? start_state : loop_state), local, limits,
                [&](size_t b, size_t e, TokenVerdict verdict) {
                  if (verdict == TokenVerdict::Reject) return;
                  std::vector<uint32_t>& out = verdict == TokenVerdict::Accept ? accepted : entry->dependent;
                  for (size_t r = b; r < e; ++r)
                    for (uint32_t i = rest.begin[r]; i < rest.begin[r + 1]; ++i)
                      if (!first_skipped(rest.tokens[i])) out.push_back(rest.tokens[i]);
                });
  }
  for (size_t x = 0; x < (table.chain ? 1u : 2u); ++x)
    walk_each(g, v, split.each[x], states, intern_again(states, x == 0 ? start_state : loop_state), local, limits,
              [&](uint32_t u, TokenVerdict verdict) {
                if (verdict == TokenVerdict::Reject || first_skipped(u)) return;
                (verdict == TokenVerdict::Accept ? accepted : entry->dependent).push_back(u);
              });
  entry->accepted_bits = split.inside_bits;
  for (int b = 0; b < 256; ++b) {
    if (!skip[static_cast<size_t>(b)]) continue;
    const uint32_t lo = v.first_byte_begin[b], hi = v.first_byte_begin[b + 1];
    for (uint32_t u = lo; u < hi; ++u)
      for (uint32_t i = v.ids_begin[u]; i < v.ids_begin[u + 1]; ++i) {
        auto id = static_cast<uint32_t>(v.ids[i]);
        entry->accepted_bits[id >> 5] &= ~(1u << (id & 31));
      }
    SortedStrings group{v.unique.data() + lo, v.lcp.data() + lo, hi - lo, nullptr, v.tails.data(),
                        v.tail_begin.data() + lo, v.lcp_drop.data() + lo, lo};
    walk_sorted(g, group, states, intern_again(states, start_state), local, limits,
                [&](size_t gb, size_t ge, TokenVerdict verdict) {
                  if (verdict == TokenVerdict::Reject) return;
                  std::vector<uint32_t>& out = verdict == TokenVerdict::Accept ? accepted : entry->dependent;
                  for (size_t u = gb; u < ge; ++u) out.push_back(static_cast<uint32_t>(lo + u));
                });
  }
  std::sort(entry->dependent.begin(), entry->dependent.end());
  for (uint32_t u : accepted) set_ids(v, u, entry->accepted_bits.data());
  return entry;
}

std::shared_ptr<const MaskEntry> compute_entry(const CompiledGrammar::Impl& g,
                                               const std::vector<uint32_t>& key) {
  const TokenVocabulary::Impl& v = g.vocab->impl();
  const bool local = key[0] == 0;
  const StepLimits limits = step_limits(g);
  StackSet start;
  start.push(key.data() + 1, key.size() - 1);
  auto entry = std::make_shared<MaskEntry>();
  InternedStates states(4096);
  const int32_t s0 = states.intern(start);
  // A loop state: the tokens that stay inside its loop are accepted as precomputed, and only
  // the suffixes of the others are walked.
  LoopTable table;
  std::shared_ptr<const LoopSplit> split;
  if (build_loop_table(g, states, s0, local, limits, table)) {
    split = loop_split(v, table);
    if (!split->useful) split.reset();
  }
  std::vector<uint32_t> accepted;
  if (split) {
    // First bytes the start does not take as L does: those tokens are walked in full.
    std::vector<uint8_t> skip(256, 0);
    size_t skipped = 0;
    for (uint8_t b : table.disagree) {
      skip[b] = 1;
      skipped += v.first_byte_begin[b + 1] - v.first_byte_begin[b];
    }
    if (skipped * 4 > v.unique.size()) split.reset();  // mostly a plain walk anyway
    else
      return split_entry(g, v, *split, table, states, skip, local, limits);
  }
  if (g.folds_utf8 && !v.folded.s.empty()) {
    // The grammar steps every byte of a UTF-8 class alike: walk the folded vocabulary.
    const FoldedStrings& f = v.folded;
    SortedStrings list{f.s.data(), f.lcp.data(), f.s.size(), nullptr, nullptr, nullptr, f.lcp_drop.data(), 0};
    walk_sorted(g, list, states, s0, local, limits, [&](size_t b, size_t e, TokenVerdict verdict) {
      if (verdict == TokenVerdict::Reject) return;
      std::vector<uint32_t>& out = verdict == TokenVerdict::Accept ? accepted : entry->dependent;
      out.insert(out.end(), f.unique.begin() + f.begin[b], f.unique.begin() + f.begin[e]);
    });
    std::sort(entry->dependent.begin(), entry->dependent.end());
  } else {
    walk_all_tokens(g, v, states, s0, local, limits, [&](size_t b, size_t e, TokenVerdict verdict) {
      if (verdict == TokenVerdict::Accept) {
        for (size_t u = b; u < e; ++u) accepted.push_back(static_cast<uint32_t>(u));
      } else if (verdict == TokenVerdict::Dependent) {
        for (size_t u = b; u < e; ++u) entry->dependent.push_back(static_cast<uint32_t>(u));
      }
    });
  }
  size_t n_ids = 0;
  for (uint32_t u : accepted) n_ids += v.ids_begin[u + 1] - v.ids_begin[u];
  if (n_ids < v.words) {
    for (uint32_t u : accepted)
      for (uint32_t i = v.ids_begin[u]; i < v.ids_begin[u + 1]; ++i)
        entry->accepted_ids.push_back(v.ids[i]);
  } else {
    entry->accepted_bits.assign(v.words, 0);
    for (uint32_t u : accepted) set_ids(v, u, entry->accepted_bits.data());
  }
  return entry;
}

}  // namespace

void stack_key(const CompiledGrammar::Impl& g, const uint32_t* f, size_t n,
               std::vector<uint32_t>& key) {
  size_t lo = n - 1;
  bool open = g.nullable_from[g.nodes[f[n - 1]].element + 1] != 0;
  while (open && lo > 0) {
    --lo;
    open = g.nullable_from[f[lo]] != 0;
  }
  key.clear();
  key.push_back(lo == 0 ? 1u : 0u);
  key.insert(key.end(), f + lo, f + n);
}

std::shared_ptr<const MaskEntry> mask_entry(const CompiledGrammar::Impl& g,
                                            const std::vector<uint32_t>& key) {
  {
    std::shared_lock lock(g.cache_mutex);
    auto it = g.mask_cache.find(key);
    if (it != g.mask_cache.end()) return it->second;
  }
  std::shared_ptr<const MaskEntry> entry = compute_entry(g, key);
  std::unique_lock lock(g.cache_mutex);
  if (g.mask_cache.size() >= g.limits.max_cached_positions) return entry;
  auto [it, inserted] = g.mask_cache.try_emplace(key, entry);
  return it->second;
}

void add_stack_mask(const CompiledGrammar::Impl& g, const uint32_t* f, size_t n, uint32_t* bits,
                    std::vector<uint32_t>* last_key) {
  const TokenVocabulary::Impl& v = g.vocab->impl();
  thread_local std::vector<uint32_t> key;
  stack_key(g, f, n, key);
  std::shared_ptr<const MaskEntry> entry = mask_entry(g, key);
  // Stacks sharing a key share its accepted tokens: OR them once.
  bool same_key = last_key && *last_key == key;
  if (!same_key) {
    if (!entry->accepted_bits.empty()) {
      const uint32_t* a = entry->accepted_bits.data();
      for (size_t w = 0; w < v.words; ++w) bits[w] |= a[w];
    } else {
      for (int32_t id : entry->accepted_ids)
        bits[static_cast<uint32_t>(id) >> 5] |= 1u << (static_cast<uint32_t>(id) & 31);
    }
    if (last_key) *last_key = key;
  }
  if (entry->dependent.empty()) return;
  if (key[0] != 0) return;  // a key covering the whole stack has nothing below it
  // The dependent tokens not yet allowed, walked from the full stack.
  thread_local std::vector<uint32_t> todo;
  todo.clear();
  for (uint32_t u : entry->dependent) {
    auto id = static_cast<uint32_t>(v.ids[v.ids_begin[u]]);
    if (!(bits[id >> 5] & (1u << (id & 31)))) todo.push_back(u);
  }
  if (todo.empty()) return;
  StackSet start;
  start.push(f, n);
  walk_tokens(g, v, start, /*local=*/false, todo.data(), todo.size(), step_limits(g),
              [&](size_t b, size_t e, TokenVerdict verdict) {
                if (verdict != TokenVerdict::Accept) return;
                for (size_t k = b; k < e; ++k) set_ids(v, todo[k], bits);
              });
}

// ---- CompiledGrammar ------------------------------------------------------------------------

CompiledGrammar::CompiledGrammar(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CompiledGrammar::~CompiledGrammar() = default;
const std::shared_ptr<const TokenVocabulary>& CompiledGrammar::vocabulary() const {
  return impl_->vocab;
}
size_t CompiledGrammar::rule_count() const { return impl_->rules.size(); }
size_t CompiledGrammar::element_count() const { return impl_->elements.size(); }
size_t CompiledGrammar::cached_positions() const {
  std::shared_lock lock(impl_->cache_mutex);
  return impl_->mask_cache.size();
}

std::shared_ptr<const CompiledGrammar> compile_gbnf(std::string_view text,
                                                    std::shared_ptr<const TokenVocabulary> vocab,
                                                    const GrammarLimits& limits,
                                                    std::string_view start_rule) {
  Grammar grammar = parse_gbnf(text, limits, start_rule);
  return compile_grammar(grammar, std::move(vocab), limits);
}

std::shared_ptr<const CompiledGrammar> compile_grammar(const Grammar& grammar,
                                                       std::shared_ptr<const TokenVocabulary> vocab,
                                                       const GrammarLimits& limits) {
  if (grammar.rules.empty()) throw GrammarError("empty grammar: no rule is defined");
  if (grammar.start >= grammar.rules.size()) throw GrammarError("start rule out of range");
  if (grammar.rules.size() > limits.max_rules)
    throw GrammarError("grammar too large: more than " + std::to_string(limits.max_rules) + " rules");
  for (const GrammarRule& r : grammar.rules)
    if (!r.defined) throw GrammarError("undefined rule '" + r.name + "'");
  Grammar rewritten = grammar;
  rewrite_nullable_repeats(rewritten);
  if (rewritten.rules.size() > limits.max_rules)
    throw GrammarError("grammar too large: more than " + std::to_string(limits.max_rules) + " rules");
  std::unique_ptr<CompiledGrammar::Impl> impl = lower_grammar(rewritten, limits);
  impl->folds_utf8 = edges_fold_utf8(*impl);
  impl->vocab = std::move(vocab);
  return std::make_shared<const CompiledGrammar>(std::move(impl));
}

}  // namespace pagoda::structured
