// POST /v1/rerank (also /rerank and /v2/rerank, as Jina's, Cohere's and vLLM's clients call it)
// and vLLM's POST /v1/score: the request side, the ordering and the answers' shapes. No HTTP and
// no engine here, so every rule is unit-testable; Handlers::rerank and Handlers::score
// (rerank.cpp) compute the scores.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/openai/request_parse.h"

namespace pagoda::server {

// The most documents (or text pairs) one request may score.
constexpr size_t kMaxRerankDocuments = 2048;

// Texts scored in pairs: left[0] against every right[i] when left has one text (a query and
// its documents), else left[i] against right[i]. `left_param` / `right_param` name the fields
// the texts came from, for errors ("query" / "documents", "text_1" / "text_2").
struct ScorePairs {
  std::vector<std::string> left, right;
  std::string left_param, right_param;
  size_t size() const { return right.size(); }
  const std::string& left_of(size_t i) const { return left.size() == 1 ? left[0] : left[i]; }
  // The field name of one text, indexed when the field held a list.
  std::string left_name(size_t i) const;
  std::string right_name(size_t i) const;
  bool left_is_list = false, right_is_list = true;
};

struct RerankRequest {
  std::string model;          // as sent (may be empty)
  ScorePairs pairs;           // left: the query; right: the documents
  std::optional<size_t> top_n;  // >= 1; the best top_n results only
  bool return_documents = true;  // each result carries its document's text
};

struct ScoreRequest {
  std::string model;
  ScorePairs pairs;           // text_1, text_2
};

// Validate a body; ApiError(400) naming the bad field.
RerankRequest parse_rerank_request(const RequestJson& body);
ScoreRequest parse_score_request(const RequestJson& body);

// The indices of `scores`, best first (ties keep their order), the first top_n only when set.
std::vector<size_t> rank_order(const std::vector<double>& scores, std::optional<size_t> top_n);

// A generative reranker's relevance: the probability of "yes" against "no", the softmax over
// the two tokens' logprobs at the prompt's last position (any shared normalization cancels).
double yes_no_score(double logprob_yes, double logprob_no);

// The cosine similarity of two vectors (0 when either is zero or their sizes differ).
double cosine_similarity(const std::vector<float>& a, const std::vector<float>& b);

// The answers: rerank's {id, model, results (best first), usage}; score's {id, object, created,
// model, data (in pair order), usage}.
nlohmann::json rerank_response(const RerankRequest& r, const std::string& id, const std::string& model,
                               const std::vector<double>& scores, int total_tokens);
nlohmann::json score_response(const std::string& id, const std::string& model, int64_t created,
                              const std::vector<double>& scores, int total_tokens);

}  // namespace pagoda::server
