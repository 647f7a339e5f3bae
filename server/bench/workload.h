// The requests a benchmark sends: synthetic prompts with a chosen length spread and an optional
// shared system prompt, prompts from a ShareGPT file (sharegpt.h), or prompts read from a JSONL
// file (whose lines may carry any other request fields, e.g. response_format). Seeded, so a
// workload repeats.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/bench/bench_options.h"

namespace pagoda::bench {

struct BenchPrompt {
  std::string system;            // may be empty
  std::string user;              // completions: the prompt; chat: the user message
  nlohmann::json messages;       // from a prompts file: used as-is for chat when not null
  int max_tokens = 128;
  // From a prompts file: every other field of the line (response_format, temperature, ...),
  // copied into the request body as it is, over the defaults.
  nlohmann::json extra = nlohmann::json::object();
};

// Builds the request body for `endpoint` (always streaming, with usage in the last chunk).
nlohmann::json make_request_body(const BenchOptions& opt, const std::string& model,
                                 const BenchPrompt& p);

class Workload {
 public:
  // Throws std::runtime_error when the prompts file cannot be read or parsed.
  explicit Workload(const BenchOptions& opt);
  // The i-th request of the run (cycles through a prompts file).
  const BenchPrompt& at(size_t i) const { return prompts_[i % prompts_.size()]; }
  size_t size() const { return prompts_.size(); }

 private:
  std::vector<BenchPrompt> prompts_;
};

}  // namespace pagoda::bench
