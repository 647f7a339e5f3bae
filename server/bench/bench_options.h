// Options of `pagoda bench`, the load generator for OpenAI-compatible servers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pagoda::bench {

enum class Endpoint { Chat, Completions };

struct BenchOptions {
  std::string url = "http://127.0.0.1:8080";  // scheme://host:port of the server
  std::string api_key;
  std::string model;             // empty: the first id GET /v1/models returns (per server)
  std::string compare_url;       // a second server: same workload, load points alternate
  Endpoint endpoint = Endpoint::Chat;

  // Load shape: closed loop with `users` (each waits for its reply, then thinks) unless
  // `rate` > 0, which makes it an open loop of Poisson arrivals at `rate` requests/s.
  int users = 1;
  double think_time_s = 0;       // mean of an exponential pause between a user's requests
  double rate = 0;
  int max_concurrency = 512;     // open loop: cap on requests in flight
  int requests = 0;              // stop after this many requests (0: use duration, or 100)
  double duration_s = 0;         // stop issuing after this many seconds
  double request_timeout_s = 600;

  // Synthetic prompts (ignored with a prompts file).
  int input_len = 128;           // words (about one token each for common BPE vocabularies)
  int output_len = 128;          // max_tokens
  double len_spread = 0.0;       // lengths drawn uniformly in [len*(1-s), len*(1+s)]
  int system_prompt_len = 0;     // words of a system prompt shared by every request
  bool ignore_eos = true;        // ask for exactly max_tokens (an extension most servers accept)
  std::string prompts_file;      // JSONL: {"prompt": "..."} or {"messages": [...]}, opt. "max_tokens"
  std::string sharegpt_file;     // ShareGPT JSON: first human turns, reply lengths as max_tokens
  uint64_t seed = 1;
  int warmup = 0;                // requests sent to each server before measuring, not counted

  // Goodput: METRIC[:pNN]=LIMIT,... (slo.h), checked when parsed.
  std::string slo_spec;

  // Output.
  std::string json_path;         // "-" for stdout
  std::string html_path;
  bool progress = true;

  // --sweep users=1,4,16 or rate=1,2,4: one run per value.
  std::string sweep_key;
  std::vector<double> sweep_values;
};

// Parses argv (argv[0] is "bench"); throws std::invalid_argument with a message on bad input.
// Returns false when --help was printed.
bool parse_bench_options(int argc, char** argv, BenchOptions& out);

}  // namespace pagoda::bench
