// Completions logprobs for `echo` (OpenAI's legacy API, vLLM): the prompt tokens come first,
// the first of them with null logprob and null top_logprobs (nothing precedes it), then the
// generated tokens. This is how lm-evaluation-harness scores text against a server.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine_api.h"
#include "server/openai/response_build.h"

namespace pagoda::server {

// {"tokens", "token_logprobs", "top_logprobs", "text_offset"} over `prompt`. `lps[i]` is the
// engine's logprob of prompt token i + 1 (Delta::prompt_logprobs); entries it lacks (a request
// that ended early) are left out. Text offsets are the running lengths of the token pieces
// from 0, as vLLM counts them (a BOS piece such as "<s>" counts too).
json prompt_logprobs_json(const std::vector<int32_t>& prompt, const std::vector<TokenLogprob>& lps,
                          const TokenText& text);

// The logprobs object of an echoed choice: the prompt's (above), then `generated` with text
// offsets from `echo_len`, the length of the echoed text the choice's text starts with.
json echo_logprobs_json(const std::vector<int32_t>& prompt, const std::vector<TokenLogprob>& prompt_lps,
                        const std::vector<TokenLogprob>& generated, size_t echo_len, const TokenText& text);

}  // namespace pagoda::server
