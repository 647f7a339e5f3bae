// Prompts from a ShareGPT-format JSON file (a list of {"conversations": [{"from": "human",
// "value": ...}, {"from": "gpt", "value": ...}, ...]}): each conversation's first human turn is a
// prompt, and the reply after it sets max_tokens (its length in characters / 4, the usual
// estimate of English tokens, at least 1), so the run asks for replies of real lengths.
#pragma once

#include <string>
#include <vector>

#include "server/bench/workload.h"

namespace pagoda::bench {

// Throws std::runtime_error when the file cannot be read, is not such a list, or holds no
// conversation with a human turn followed by a reply.
std::vector<BenchPrompt> read_sharegpt(const std::string& path);

// The same from the file's text (`name` for messages).
std::vector<BenchPrompt> parse_sharegpt(const std::string& text, const std::string& name);

}  // namespace pagoda::bench
