// POST /v1/embeddings, the request side and the answer's encodings: `input` as a string, a list
// of strings, token ids or a list of token-id lists; `encoding_format` float | base64;
// `dimensions` (truncate, then renormalize). No HTTP and no engine here, so every rule is
// unit-testable; Handlers::embeddings (embeddings.cpp) submits and answers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/openai/request_parse.h"

namespace pagoda::server {

// OpenAI's bound on the inputs of one request.
constexpr size_t kMaxEmbeddingInputs = 2048;

struct EmbeddingRequest {
  std::string model;                 // as sent (may be empty)
  std::vector<PromptInput> inputs;   // at least one, none empty
  bool base64 = false;               // encoding_format "base64"
  std::optional<int> dimensions;     // positive
};

// Validates a body; ApiError(400) naming the bad field.
EmbeddingRequest parse_embedding_request(const RequestJson& body);

// The first `dimensions` components of an L2-normalized vector, normalized again (OpenAI's
// `dimensions` for models trained to be truncated). Unchanged without dimensions.
std::vector<float> truncate_embedding(std::vector<float> v, std::optional<int> dimensions);

// The vector's float32 values, little-endian, in standard base64 (OpenAI's encoding_format
// "base64", which the SDKs decode with Float32Array / numpy.frombuffer).
std::string embedding_base64(const std::vector<float>& v);

}  // namespace pagoda::server
