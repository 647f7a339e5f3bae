// The pure side of rerank and score (rerank.h): request parsing, ordering, the scores' formulas
// and the answers' JSON.
#include "server/openai/rerank.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "server/http/api_error.h"

namespace pagoda::server {

namespace {

ApiError bad(const std::string& param, const std::string& why) {
  return ApiError(400, "Invalid value for '" + param + "': " + why, "invalid_request_error", param);
}

// One text: a string, or (documents' other shape, Cohere's and Jina's) an object with "text".
std::string text_of(const RequestJson& v, const std::string& param) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object()) {
    auto t = v.find("text");
    if (t != v.end() && t->is_string()) return t->get<std::string>();
  }
  throw bad(param, "expected a string or an object with a string 'text'.");
}

// A field holding one text or a non-empty list of them; none may be empty.
std::vector<std::string> texts(const RequestJson& body, const std::string& key, bool* is_list) {
  auto f = body.find(key);
  if (f == body.end() || f->is_null())
    throw ApiError(400, "Missing required parameter: '" + key + "'.", "invalid_request_error", key);
  std::vector<std::string> out;
  *is_list = f->is_array();
  if (!*is_list) {
    out.push_back(text_of(*f, key));
  } else {
    if (f->empty()) throw bad(key, "expected at least one text.");
    if (f->size() > kMaxRerankDocuments)
      throw bad(key, "at most " + std::to_string(kMaxRerankDocuments) + " texts per request.");
    for (size_t i = 0; i < f->size(); ++i) out.push_back(text_of((*f)[i], key + "[" + std::to_string(i) + "]"));
  }
  for (size_t i = 0; i < out.size(); ++i)
    if (out[i].empty()) {
      const std::string param = *is_list ? key + "[" + std::to_string(i) + "]" : key;
      throw bad(param, "the text is empty.");
    }
  return out;
}

std::string indexed(const std::string& key, bool is_list, size_t i) {
  return is_list ? key + "[" + std::to_string(i) + "]" : key;
}

}  // namespace

std::string ScorePairs::left_name(size_t i) const { return indexed(left_param, left_is_list, i); }
std::string ScorePairs::right_name(size_t i) const { return indexed(right_param, right_is_list, i); }

RerankRequest parse_rerank_request(const RequestJson& body) {
  RerankRequest r;
  r.model = parse_model_field(body);
  ScorePairs& p = r.pairs;
  p.left_param = "query";
  p.right_param = "documents";
  auto q = body.find("query");
  if (q == body.end() || q->is_null())
    throw ApiError(400, "Missing required parameter: 'query'.", "invalid_request_error", "query");
  if (!q->is_string()) throw bad("query", "expected a string.");
  if (q->get<std::string>().empty()) throw bad("query", "the text is empty.");
  p.left = {q->get<std::string>()};
  auto d = body.find("documents");
  if (d != body.end() && !d->is_null() && !d->is_array()) throw bad("documents", "expected a list.");
  p.right = texts(body, "documents", &p.right_is_list);
  if (auto t = body.find("top_n"); t != body.end() && !t->is_null()) {
    if (!t->is_number_integer() || t->get<int64_t>() < 1) throw bad("top_n", "expected an integer >= 1.");
    r.top_n = static_cast<size_t>(t->get<int64_t>());
  }
  if (auto rd = body.find("return_documents"); rd != body.end() && !rd->is_null()) {
    if (!rd->is_boolean()) throw bad("return_documents", "expected a boolean.");
    r.return_documents = rd->get<bool>();
  }
  return r;
}

ScoreRequest parse_score_request(const RequestJson& body) {
  ScoreRequest r;
  r.model = parse_model_field(body);
  ScorePairs& p = r.pairs;
  p.left_param = "text_1";
  p.right_param = "text_2";
  p.left = texts(body, "text_1", &p.left_is_list);
  p.right = texts(body, "text_2", &p.right_is_list);
  if (p.left.size() > 1 && p.left.size() != p.right.size())
    throw bad("text_2", "expected as many texts as 'text_1' (" + std::to_string(p.left.size()) +
                            "), or one text in 'text_1'.");
  return r;
}

std::vector<size_t> rank_order(const std::vector<double>& scores, std::optional<size_t> top_n) {
  std::vector<size_t> order(scores.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] > scores[b]; });
  if (top_n && *top_n < order.size()) order.resize(*top_n);
  return order;
}

double yes_no_score(double logprob_yes, double logprob_no) {
  if (std::isinf(logprob_yes) && std::isinf(logprob_no)) return 0.5;
  // 1 / (1 + e^(no - yes)), written so that neither exponent overflows.
  const double d = logprob_no - logprob_yes;
  return d >= 0 ? std::exp(-d) / (1 + std::exp(-d)) : 1 / (1 + std::exp(d));
}

double cosine_similarity(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return 0;
  double dot = 0, na = 0, nb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    dot += static_cast<double>(a[i]) * b[i];
    na += static_cast<double>(a[i]) * a[i];
    nb += static_cast<double>(b[i]) * b[i];
  }
  return na > 0 && nb > 0 ? dot / std::sqrt(na * nb) : 0;
}

nlohmann::json rerank_response(const RerankRequest& r, const std::string& id, const std::string& model,
                               const std::vector<double>& scores, int total_tokens) {
  nlohmann::json results = nlohmann::json::array();
  for (size_t i : rank_order(scores, r.top_n)) {
    nlohmann::json item = {{"index", i}, {"relevance_score", scores[i]}};
    if (r.return_documents) item["document"] = {{"text", r.pairs.right[i]}};
    results.push_back(std::move(item));
  }
  return {{"id", id},
          {"model", model},
          {"results", std::move(results)},
          {"usage", {{"prompt_tokens", total_tokens}, {"total_tokens", total_tokens}}}};
}

nlohmann::json score_response(const std::string& id, const std::string& model, int64_t created,
                              const std::vector<double>& scores, int total_tokens) {
  nlohmann::json data = nlohmann::json::array();
  for (size_t i = 0; i < scores.size(); ++i)
    data.push_back({{"index", i}, {"object", "score"}, {"score", scores[i]}});
  return {{"id", id},
          {"object", "list"},
          {"created", created},
          {"model", model},
          {"data", std::move(data)},
          {"usage", {{"prompt_tokens", total_tokens}, {"total_tokens", total_tokens}}}};
}

}  // namespace pagoda::server
