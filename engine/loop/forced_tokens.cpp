// Forced tokens after a sampled one (forced_tokens.h).
#include "engine/loop/forced_tokens.h"

#include <algorithm>
#include <string>

#include "engine/tokenizer/tokenizer.h"

namespace pagoda {

std::vector<int32_t> forced_tokens(const structured::GrammarMatcher& after, const Tokenizer& tokenizer,
                                   int32_t sampled, int max_tokens) {
  if (max_tokens <= 0 || after.is_finished()) return {};
  const std::string forced = after.forced_bytes(256);
  if (forced.empty()) return {};
  const structured::TokenVocabulary& vocab = *after.grammar()->vocabulary();
  const std::string& head = vocab.token_bytes(sampled);
  const std::vector<int32_t> alone = tokenizer.encode(head, false, false);
  const std::vector<int32_t> with = tokenizer.encode(head + forced, false, false);
  if (with.size() <= alone.size() || !std::equal(alone.begin(), alone.end(), with.begin())) return {};
  std::vector<int32_t> out(with.begin() + static_cast<std::ptrdiff_t>(alone.size()), with.end());
  std::string spelled;
  for (int32_t id : out) {
    if (id < 0 || id >= vocab.size() || vocab.is_special(id) || vocab.is_eog(id)) return {};
    spelled += vocab.token_bytes(id);
  }
  if (spelled != forced) return {};
  if (vocab.extends(vocab.token_bytes(out.back()))) out.pop_back();
  if (out.size() > static_cast<size_t>(max_tokens)) out.resize(static_cast<size_t>(max_tokens));
  structured::GrammarMatcher m = after;
  for (size_t i = 0; i < out.size(); ++i)
    if (!m.accept_token(out[i])) {
      out.resize(i);
      break;
    }
  return out;
}

}  // namespace pagoda
