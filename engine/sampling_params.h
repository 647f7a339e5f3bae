// What a request asks of the sampler and of the stop logic. Plain data, validated by the
// server before it reaches the engine.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace pagoda {

namespace structured { class CompiledGrammar; }

struct SamplingParams {
  float temperature = 1.0f;        // 0 = greedy
  float top_p = 1.0f;              // (0, 1]
  int top_k = 0;                   // 0 = off
  float min_p = 0.0f;              // 0 = off
  float presence_penalty = 0.0f;   // OpenAI semantics, over generated tokens
  float frequency_penalty = 0.0f;
  float repetition_penalty = 1.0f; // llama.cpp/vLLM semantics, over prompt + generated tokens
  std::map<int32_t, float> logit_bias;
  std::optional<uint64_t> seed;    // set: reproducible; unset: engine picks a random seed
  int logprobs = -1;               // -1: none; N >= 0: chosen token's logprob + top N alternatives
  // Structured output: every generated token must keep the output inside this grammar (from
  // EngineApi::compile_constraint); null = free text. Immutable and shared by requests.
  std::shared_ptr<const structured::CompiledGrammar> grammar;
};

struct StopParams {
  // New tokens at most; <= 0: up to the context. The engine's submit resolves it by its
  // MaxTokensRule (engine_api.h), so the scheduler always sees a positive bound. With context
  // shift off the context also ends generation (finish "length").
  int max_tokens = 16;
  std::vector<std::string> stop;        // stop strings (not included in the output)
  std::vector<int32_t> stop_token_ids;  // extra stop tokens
  bool ignore_eos = false;
};

}  // namespace pagoda
