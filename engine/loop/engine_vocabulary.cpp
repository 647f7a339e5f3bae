// LlmEngine's vocabulary (EngineApi): the server's tokenizing goes through the engine's
// tokenizer, so the server never includes it; so does compiling structured-output constraints
// over that vocabulary.
#include "engine/loop/engine.h"
#include "engine/sampling/output_constraint.h"
#include "engine/tokenizer/tokenizer.h"

namespace pagoda {

std::vector<int32_t> LlmEngine::tokenize(std::string_view text, bool add_special,
                                         bool parse_special) const {
  if (!tokenizer_) throw EngineError("the engine has no tokenizer");
  return tokenizer_->encode(text, add_special, parse_special);
}

std::vector<int32_t> LlmEngine::tokenize_marked(std::string_view text, bool add_special,
                                                const std::vector<std::pair<size_t, size_t>>& plain) const {
  if (!tokenizer_) throw EngineError("the engine has no tokenizer");
  return tokenizer_->encode_marked(text, add_special, plain);
}

std::string LlmEngine::detokenize(const std::vector<int32_t>& ids) const {
  return tokenizer_ ? tokenizer_->decode(ids) : "";
}

std::string LlmEngine::token_piece(int32_t id, bool special) const {
  return tokenizer_ ? tokenizer_->token_to_piece(id, special) : "";
}

int32_t LlmEngine::vocab_size() const { return tokenizer_ ? tokenizer_->vocab_size() : 0; }

int32_t LlmEngine::prompt_bos_id() const {
  return tokenizer_ && tokenizer_->add_bos() ? tokenizer_->bos_id() : -1;
}

std::shared_ptr<const structured::CompiledGrammar> LlmEngine::compile_constraint(
    const OutputConstraint& constraint) const {
  if (!tokenizer_) return EngineApi::compile_constraint(constraint);
  std::call_once(constraints_once_, [this] { constraints_ = std::make_unique<ConstraintCompiler>(*tokenizer_); });
  return constraints_->compile(constraint);
}

}  // namespace pagoda
