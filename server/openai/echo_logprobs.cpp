#include "server/openai/echo_logprobs.h"

#include <algorithm>

namespace pagoda::server {

json prompt_logprobs_json(const std::vector<int32_t>& prompt, const std::vector<TokenLogprob>& lps,
                          const TokenText& text) {
  if (prompt.empty())
    return json{{"tokens", json::array()}, {"token_logprobs", json::array()},
                {"top_logprobs", json::array()}, {"text_offset", json::array()}};
  const std::string first = text(prompt[0]);
  const size_t n = std::min(lps.size(), prompt.size() - 1);
  json out = completion_logprobs_json(std::vector<TokenLogprob>(lps.begin(), lps.begin() + n), text, first.size());
  out["tokens"].insert(out["tokens"].begin(), first);
  out["token_logprobs"].insert(out["token_logprobs"].begin(), nullptr);
  out["top_logprobs"].insert(out["top_logprobs"].begin(), nullptr);
  out["text_offset"].insert(out["text_offset"].begin(), 0);
  return out;
}

json echo_logprobs_json(const std::vector<int32_t>& prompt, const std::vector<TokenLogprob>& prompt_lps,
                        const std::vector<TokenLogprob>& generated, size_t echo_len, const TokenText& text) {
  json out = prompt_logprobs_json(prompt, prompt_lps, text);
  const json tail = completion_logprobs_json(generated, text, echo_len);
  for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
    for (const json& v : tail[key]) out[key].push_back(v);
  return out;
}

}  // namespace pagoda::server
