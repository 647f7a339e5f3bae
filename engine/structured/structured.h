// Public API of grammar-constrained decoding: token vocabulary, grammar compilation (GBNF),
// per-sequence matcher with the whole-vocabulary token mask, and a compiled-grammar cache.
// Everything else under engine/structured/ is internal and may change, except grammar_ir.h
// (the grammar IR, parse_gbnf, compile_grammar for grammars built in code).
//
// Typical use (server side, off the engine thread):
//   auto vocab = TokenVocabulary::build(bytes_of_each_token, is_eog, is_special);  // once per model
//   auto grammar = cache.get_or_compile_gbnf(gbnf_text, vocab);   // throws GrammarError
// Engine side, one matcher per constrained sequence:
//   GrammarMatcher m(grammar);
//   each step: m.fill_mask(bits) -> apply to logits -> sample id -> m.accept_token(id)
//
// Thread safety: TokenVocabulary and CompiledGrammar are immutable from the outside and may be
// shared by any number of threads (CompiledGrammar's internal mask cache is locked). A
// GrammarMatcher is a plain value: one thread at a time mutates it; const calls (fill_mask,
// can_end, ...) on distinct matchers run concurrently, as do const calls on the same one.
// CompiledGrammarCache is thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda::structured {

// A grammar that does not parse, refers to an undefined rule, is left-recursive, or exceeds
// GrammarLimits. what() names the line:column (1-based) and the problem.
struct GrammarError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Repetition counts up to this are unrolled by lowering; larger ones count in binary
// (O(log n) helper rules, see grammar_lowering.cpp).
constexpr uint32_t kRepeatUnrollLimit = 32;

// About how many copies of a repeated item lowering writes for a count of n: n when unrolled,
// otherwise a few per binary digit. Front ends use it to bound the grammar they produce.
inline uint64_t repeat_lowered_copies(uint64_t n) {
  if (n <= kRepeatUnrollLimit) return n;
  uint64_t bits = 0;
  while (n) ++bits, n >>= 1;
  return 3 * bits;
}

// Bounds on what a user-supplied grammar may cost; exceeding one throws GrammarError.
struct GrammarLimits {
  size_t max_text_bytes = 1u << 20;     // GBNF source size
  size_t max_rules = 20000;             // rules after lowering (groups/repetitions add rules)
  size_t max_elements = 500000;         // grammar elements after expanding {m,n} repetitions
  uint32_t max_repeat_count = 0x7FFFFFFF;  // largest m or n in {m,n} (large ones count in binary)
  size_t max_nesting = 200;             // nesting of ( ) groups in the source
  // Run time: the matcher keeps every parse alternative alive (ambiguous grammars fork); a
  // state with more stacks than this makes the step fail (accept_* returns false).
  size_t max_stacks = 2048;
  // Per-grammar cache of token masks per grammar position (an entry is at most one bit per
  // token, ~13 KB for a 100k vocabulary); beyond this, masks are computed without caching
  // (correct but slower).
  size_t max_cached_positions = 4096;
};

// Byte strings of a model's tokens, sorted and indexed for mask computation. Build once per
// model and share; immutable.
class TokenVocabulary {
 public:
  // token_bytes[i]: the bytes token i decodes to (byte-fallback tokens are their single byte).
  // is_eog[i]: end-of-generation tokens (allowed exactly when the grammar can end).
  // is_special[i]: control/special tokens, never allowed by a grammar (EOG excepted as above).
  // Tokens with empty bytes are never allowed. Throws std::invalid_argument on size mismatch.
  static std::shared_ptr<const TokenVocabulary> build(std::vector<std::string> token_bytes,
                                                      std::vector<bool> is_eog,
                                                      std::vector<bool> is_special);
  int32_t size() const;          // number of token ids
  size_t mask_words() const;     // (size() + 31) / 32: the uint32 words fill_mask writes
  const std::string& token_bytes(int32_t id) const;
  bool is_eog(int32_t id) const;
  bool is_special(int32_t id) const;
  // Whether some grammar-eligible token's bytes start with `bytes` and are longer (a token
  // ending with these bytes could merge with what follows).
  bool extends(std::string_view bytes) const;

  struct Impl;
  const Impl& impl() const { return *impl_; }
  explicit TokenVocabulary(std::unique_ptr<Impl> impl);
  ~TokenVocabulary();

 private:
  std::unique_ptr<Impl> impl_;
};

// A grammar lowered to a byte-level pushdown automaton, plus its lazily filled, thread-safe
// mask cache for one vocabulary. Obtain through compile_gbnf or CompiledGrammarCache.
class CompiledGrammar {
 public:
  struct Impl;
  const Impl& impl() const { return *impl_; }
  // The vocabulary the masks are computed over (null when compiled without one: the matcher
  // then works on bytes only and fill_mask / accept_token must not be called).
  const std::shared_ptr<const TokenVocabulary>& vocabulary() const;
  size_t rule_count() const;
  size_t element_count() const;
  // Positions whose token masks are cached so far (grows as matchers visit new states).
  size_t cached_positions() const;

  explicit CompiledGrammar(std::unique_ptr<Impl> impl);
  ~CompiledGrammar();

 private:
  std::unique_ptr<Impl> impl_;
};

// Parses llama.cpp's GBNF dialect and compiles it. `start_rule` names the rule every output
// must match ("root" by default). `vocab` may be null for byte-only matching (tests, schema
// conformance). Throws GrammarError.
std::shared_ptr<const CompiledGrammar> compile_gbnf(std::string_view text,
                                                    std::shared_ptr<const TokenVocabulary> vocab,
                                                    const GrammarLimits& limits = {},
                                                    std::string_view start_rule = "root");

// The state of one sequence's output in the grammar. Copying is cheap (a few small vectors):
// fork it for n > 1 or speculative paths.
class GrammarMatcher {
 public:
  // `max_rollback`: how many accepted tokens rollback() can undo (0 = none kept).
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar, size_t max_rollback = 0);
  GrammarMatcher(const GrammarMatcher&);
  GrammarMatcher& operator=(const GrammarMatcher&);
  GrammarMatcher(GrammarMatcher&&) noexcept;
  GrammarMatcher& operator=(GrammarMatcher&&) noexcept;
  ~GrammarMatcher();

  // Writes the allowed-token bitmask: bit (id % 32) of bits[id / 32] is set when token id may
  // be sampled next. Writes vocabulary().mask_words() words (bits past size() are 0).
  // EOG tokens are set exactly when can_end(); when is_finished(), only EOG tokens are set;
  // after an EOG token was accepted (is_terminated()) nothing is set. A reachable state
  // always allows some token, except when a grammar's ambiguity or nesting outgrew
  // GrammarLimits::max_stacks / the stack depth limit (4096 frames): then the mask may be
  // all zero and the caller should end the sequence.
  // Cost: a few microseconds once the grammar's mask cache knows the positions involved; the
  // first visit of a position walks the vocabulary once (up to a few ms for 100k tokens), or,
  // inside a loop over a character class (a string's characters), only the tokens that leave
  // it (loop_split.h; the vocabulary's split for that class is computed on its first use).
  void fill_mask(uint32_t* bits) const;
  std::vector<uint32_t> mask() const;  // same, as a new vector
  // True when token `id` is allowed by the current state (checks just this token).
  bool is_token_allowed(int32_t id) const;

  // Advances over the token's bytes; returns false and leaves the state unchanged when the
  // grammar rejects it. An EOG token is accepted when can_end() and terminates the matcher.
  // Special tokens and out-of-range ids are rejected.
  bool accept_token(int32_t id);
  // Same over raw bytes (need not be whole UTF-8 characters; the next call continues them).
  bool accept_bytes(std::string_view bytes);

  bool can_end() const;        // the output so far is a complete match of the start rule
  bool is_finished() const;    // nothing but the end is possible (only EOG may follow)
  bool is_terminated() const;  // an EOG token was accepted
  // Bytes every continuation must start with (e.g. the rest of a literal), for fast-forward;
  // stops at the first byte where alternatives differ or the grammar may end.
  std::string forced_bytes(size_t max_bytes = 256) const;

  void reset();                   // back to the start state
  // Undoes the last n accepted tokens (accept_token or accept_bytes calls); false (and no
  // change) when fewer than n are remembered.
  bool rollback(size_t n);

  const std::shared_ptr<const CompiledGrammar>& grammar() const { return grammar_; }

  struct State;

 private:
  std::shared_ptr<const CompiledGrammar> grammar_;
  std::unique_ptr<State> state_;
};

// Thread-safe, bounded LRU of compiled grammars keyed by content (kind, text, start rule,
// limits, vocabulary identity; hashed by the map, compared in full so no collision can mix
// grammars up), so each distinct grammar is compiled once and its mask cache is shared by all
// requests using it.
class CompiledGrammarCache {
 public:
  explicit CompiledGrammarCache(size_t capacity = 64);
  ~CompiledGrammarCache();
  // Compiles on a miss (in the calling thread, outside the cache lock); throws GrammarError.
  std::shared_ptr<const CompiledGrammar> get_or_compile_gbnf(
      std::string_view text, std::shared_ptr<const TokenVocabulary> vocab,
      const GrammarLimits& limits = {}, std::string_view start_rule = "root");
  // Generic form for other front ends (JSON Schema, regex): `kind` + `key_text` identify the
  // grammar; `compile` runs on a miss.
  template <class CompileFn>
  std::shared_ptr<const CompiledGrammar> get_or_compile(std::string_view kind,
                                                        std::string_view key_text,
                                                        const std::shared_ptr<const TokenVocabulary>& vocab,
                                                        CompileFn&& compile);
  size_t size() const;
  size_t hits() const;
  size_t misses() const;
  void clear();

 private:
  std::shared_ptr<const CompiledGrammar> lookup(const std::string& key);
  // Returns the cached grammar: `grammar`, or the one another thread inserted first.
  std::shared_ptr<const CompiledGrammar> insert(const std::string& key,
                                                std::shared_ptr<const CompiledGrammar> grammar);
  static std::string make_key(std::string_view kind, std::string_view key_text,
                              const TokenVocabulary* vocab);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

template <class CompileFn>
std::shared_ptr<const CompiledGrammar> CompiledGrammarCache::get_or_compile(
    std::string_view kind, std::string_view key_text,
    const std::shared_ptr<const TokenVocabulary>& vocab, CompileFn&& compile) {
  std::string key = make_key(kind, key_text, vocab.get());
  if (auto found = lookup(key)) return found;
  return insert(key, compile());
}

}  // namespace pagoda::structured
