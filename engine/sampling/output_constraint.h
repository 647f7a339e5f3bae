// Structured output on the engine side: turns an OutputConstraint (engine_api.h: JSON Schema,
// any JSON object, GBNF, regex, a fixed choice, optionally wrapped in literal text such as a
// tool-call marker) into a compiled grammar over the model's vocabulary. Runs on the caller's
// thread (an HTTP worker), never on the engine thread; compiled grammars are cached by content
// so a schema used by many requests is compiled once and shares one token-mask cache.
#pragma once

#include <memory>
#include <string>

#include "engine/engine_api.h"
#include "engine/structured/structured.h"

namespace pagoda {

class Tokenizer;

// The bytes of every token of `tokenizer` as grammars see them: control tokens are special (never
// allowed; their text is not output), end-of-generation tokens as the tokenizer says.
std::shared_ptr<const structured::TokenVocabulary> token_vocabulary(const Tokenizer& tokenizer);

// The GBNF text a constraint stands for (start rule `root`). Throws ConstraintError.
std::string constraint_to_gbnf(const OutputConstraint& c);

class ConstraintCompiler {
 public:
  // Reads every token's bytes from `tokenizer` once (control tokens are never allowed by a
  // grammar; end-of-generation tokens only where the grammar may end).
  explicit ConstraintCompiler(const Tokenizer& tokenizer, size_t cache_capacity = 64);

  // Throws ConstraintError (bad schema / grammar / regex, or over the size limits).
  std::shared_ptr<const structured::CompiledGrammar> compile(const OutputConstraint& c);

  const std::shared_ptr<const structured::TokenVocabulary>& vocabulary() const { return vocab_; }
  const structured::CompiledGrammarCache& cache() const { return cache_; }

 private:
  std::shared_ptr<const structured::TokenVocabulary> vocab_;
  structured::CompiledGrammarCache cache_;
};

}  // namespace pagoda
