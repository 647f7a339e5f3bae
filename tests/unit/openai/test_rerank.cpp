// Rerank and score, the pure side (server/openai/rerank.h): request parsing and its 400s, the
// ordering and top_n, the yes/no and cosine formulas, the answers' shapes.
#include <catch2/catch.hpp>
#include <cmath>

#include "server/http/api_error.h"
#include "server/openai/rerank.h"

using namespace pagoda::server;

namespace {

RequestJson body(const char* text) { return RequestJson::parse(text); }

// The ApiError's param for a body the parser must refuse.
std::string refused_param(const RequestJson& b, bool rerank = true) {
  try {
    if (rerank)
      parse_rerank_request(b);
    else
      parse_score_request(b);
  } catch (const ApiError& e) {
    CHECK(e.status == 400);
    return e.param;
  }
  FAIL("accepted");
  return "";
}

}  // namespace

TEST_CASE("rerank: documents as strings or {text}, top_n and return_documents") {
  RerankRequest r = parse_rerank_request(
      body(R"({"model":"m","query":"q","documents":["a",{"text":"b"}],"top_n":1,"return_documents":false})"));
  CHECK(r.model == "m");
  CHECK(r.pairs.left == std::vector<std::string>{"q"});
  CHECK(r.pairs.right == std::vector<std::string>{"a", "b"});
  CHECK(r.pairs.size() == 2);
  CHECK(r.pairs.left_of(1) == "q");
  CHECK(r.pairs.right_name(1) == "documents[1]");
  CHECK(r.top_n == size_t{1});
  CHECK_FALSE(r.return_documents);
  RerankRequest d = parse_rerank_request(body(R"({"query":"q","documents":["a"]})"));
  CHECK(d.return_documents);
  CHECK_FALSE(d.top_n);
}

TEST_CASE("rerank: clear 400s naming the field") {
  CHECK(refused_param(body(R"({"documents":["a"]})")) == "query");
  CHECK(refused_param(body(R"({"query":"","documents":["a"]})")) == "query");
  CHECK(refused_param(body(R"({"query":3,"documents":["a"]})")) == "query");
  CHECK(refused_param(body(R"({"query":"q"})")) == "documents");
  CHECK(refused_param(body(R"({"query":"q","documents":[]})")) == "documents");
  CHECK(refused_param(body(R"({"query":"q","documents":"a"})")) == "documents");
  CHECK(refused_param(body(R"({"query":"q","documents":["a",""]})")) == "documents[1]");
  CHECK(refused_param(body(R"({"query":"q","documents":["a",{"txt":"b"}]})")) == "documents[1]");
  CHECK(refused_param(body(R"({"query":"q","documents":["a"],"top_n":0})")) == "top_n");
  CHECK(refused_param(body(R"({"query":"q","documents":["a"],"top_n":1.5})")) == "top_n");
  CHECK(refused_param(body(R"({"query":"q","documents":["a"],"return_documents":"yes"})")) == "return_documents");
  CHECK(refused_param(body(R"({"model":1,"query":"q","documents":["a"]})")) == "model");
}

TEST_CASE("score: text_1 and text_2 as strings or lists, paired one to many or one to one") {
  ScoreRequest one = parse_score_request(body(R"({"text_1":"q","text_2":["a","b"]})"));
  CHECK(one.pairs.size() == 2);
  CHECK(one.pairs.left_of(1) == "q");
  CHECK(one.pairs.left_name(0) == "text_1");
  ScoreRequest same = parse_score_request(body(R"({"text_1":["x","y"],"text_2":["a","b"]})"));
  CHECK(same.pairs.left_of(1) == "y");
  CHECK(same.pairs.left_name(1) == "text_1[1]");
  ScoreRequest single = parse_score_request(body(R"({"text_1":"q","text_2":"a"})"));
  CHECK(single.pairs.size() == 1);
  CHECK(single.pairs.right_name(0) == "text_2");
  CHECK(refused_param(body(R"({"text_1":["x","y"],"text_2":["a","b","c"]})"), false) == "text_2");
  CHECK(refused_param(body(R"({"text_2":"a"})"), false) == "text_1");
  CHECK(refused_param(body(R"({"text_1":"q","text_2":[]})"), false) == "text_2");
}

TEST_CASE("rank_order: best first, ties in order, top_n cuts") {
  const std::vector<double> s = {0.2, 0.9, 0.5, 0.9};
  CHECK(rank_order(s, std::nullopt) == std::vector<size_t>{1, 3, 2, 0});
  CHECK(rank_order(s, size_t{2}) == std::vector<size_t>{1, 3});
  CHECK(rank_order(s, size_t{10}).size() == 4);
}

TEST_CASE("yes_no_score: the softmax over the two logprobs") {
  CHECK(yes_no_score(std::log(0.3), std::log(0.1)) == Approx(0.75));
  CHECK(yes_no_score(-1, -1) == Approx(0.5));
  CHECK(yes_no_score(0, -1000) == Approx(1.0));
  CHECK(yes_no_score(-1000, 0) == Approx(0.0).margin(1e-12));
  CHECK(yes_no_score(-INFINITY, -2) == 0.0);
  CHECK(yes_no_score(-2, -INFINITY) == 1.0);
}

TEST_CASE("cosine_similarity") {
  CHECK(cosine_similarity({1, 0}, {2, 0}) == Approx(1));
  CHECK(cosine_similarity({1, 0}, {0, 3}) == Approx(0));
  CHECK(cosine_similarity({1, 1}, {-1, -1}) == Approx(-1));
  CHECK(cosine_similarity({0, 0}, {1, 0}) == 0);
  CHECK(cosine_similarity({1}, {1, 0}) == 0);
}

TEST_CASE("rerank_response and score_response shapes") {
  RerankRequest r = parse_rerank_request(body(R"({"query":"q","documents":["a","b","c"],"top_n":2})"));
  const nlohmann::json j = rerank_response(r, "rerank-1", "m", {0.1, 0.7, 0.4}, 12);
  CHECK(j["id"] == "rerank-1");
  CHECK(j["model"] == "m");
  REQUIRE(j["results"].size() == 2);
  CHECK(j["results"][0]["index"] == 1);
  CHECK(j["results"][0]["relevance_score"].get<double>() == Approx(0.7));
  CHECK(j["results"][0]["document"]["text"] == "b");
  CHECK(j["results"][1]["index"] == 2);
  CHECK(j["usage"]["total_tokens"] == 12);
  r.return_documents = false;
  CHECK_FALSE(rerank_response(r, "x", "m", {0.1, 0.7, 0.4}, 1)["results"][0].contains("document"));

  const nlohmann::json s = score_response("score-1", "m", 5, {0.1, 0.7}, 9);
  CHECK(s["object"] == "list");
  REQUIRE(s["data"].size() == 2);
  CHECK(s["data"][1]["index"] == 1);
  CHECK(s["data"][1]["object"] == "score");
  CHECK(s["data"][1]["score"].get<double>() == Approx(0.7));
  CHECK(s["usage"]["total_tokens"] == 9);
}
