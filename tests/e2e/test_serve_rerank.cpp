// End to end: /v1/rerank (and its aliases) and /v1/score on the real `pagoda serve` over loopback
// HTTP, with a random-weight model of pagoda's own byte vocabulary that names no pooling type,
// so it is scored as a generative reranker (P("yes") against P("no")). Checked: the answers'
// shapes, scores in [0, 1], results best first and equal to /v1/score's for the same pairs,
// top_n, the aliases, and 400s (empty documents, top_n 0, over the context).
#include <catch2/catch.hpp>
#include <cstdlib>

#include "tests/support/http_test_util.h"
#include "tests/support/test_files.h"

using namespace pagoda::testing;
using json = nlohmann::json;

namespace {

const std::string& model_path() {
  static const pagoda::testing::ScratchDir dir("rerank-e2e");
  static const std::string path = [] {
    const std::string p = dir.file("model.gguf");
    const std::string cmd = std::string(PAGODA_BINARY) + " make-model --output " + p +
                            " --layers 2 --dim 64 --ff 128 --heads 4 --kv-heads 2 --ctx 512 --seed 7 --quiet";
    if (std::system(cmd.c_str()) != 0) throw std::runtime_error("make-model failed: " + cmd);
    return p;
  }();
  return path;
}

ServerProcess& server() {
  static std::unique_ptr<ServerProcess> s = [] {
    for (int attempt = 0; attempt < 3; ++attempt) {
      auto p = std::make_unique<ServerProcess>(
          PAGODA_BINARY,
          std::vector<std::string>{model_path(), "-c", "512", "-np", "8", "-t", "1", "--kv-cache-memory", "16MiB",
                                   "--served-model-name", "ranker"},
          free_port());
      if (p->wait_ready(60)) return p;
      if (p->log().find("cannot listen") == std::string::npos)
        throw std::runtime_error("pagoda serve did not become ready:\n" + p->log());
    }
    throw std::runtime_error("pagoda serve: no free port");
  }();
  return *s;
}

}  // namespace

TEST_CASE("e2e rerank: scores in [0, 1], best first, the same as /v1/score's", "[e2e]") {
  const int port = server().port();
  const json docs = {"The cat sat on the mat.", "Paris is the capital of France.", "Dogs bark at night.",
                     "The capital of France is a city on the Seine."};
  const HttpResult r = http_post(port, "/v1/rerank",
                                 json{{"model", "ranker"}, {"query", "What is the capital of France?"}, {"documents", docs}});
  INFO(r.body);
  REQUIRE(r.status == 200);
  const json j = r.j();
  CHECK(j["model"] == "ranker");
  CHECK(j["id"].is_string());
  CHECK(j["usage"]["total_tokens"].get<int>() > 0);
  REQUIRE(j["results"].size() == docs.size());
  const HttpResult s = http_post(port, "/v1/score", json{{"model", "ranker"}, {"text_1", "What is the capital of France?"},
                                                         {"text_2", docs}});
  INFO(s.body);
  REQUIRE(s.status == 200);
  const json sj = s.j();
  REQUIRE(sj["data"].size() == docs.size());
  double prev = 2;
  for (const json& res : j["results"]) {
    const double score = res["relevance_score"].get<double>();
    CHECK(score >= 0.0);
    CHECK(score <= 1.0);
    CHECK(score <= prev);
    prev = score;
    const size_t i = res["index"].get<size_t>();
    CHECK(res["document"]["text"] == docs[i]);
    CHECK(sj["data"][i]["object"] == "score");
    CHECK(sj["data"][i]["score"].get<double>() == Approx(score).margin(1e-6));
  }

  const HttpResult top = http_post(port, "/v2/rerank", json{{"query", "What is the capital of France?"},
                                                           {"documents", docs}, {"top_n", 2}, {"return_documents", false}});
  INFO(top.body);
  REQUIRE(top.status == 200);
  REQUIRE(top.j()["results"].size() == 2);
  CHECK(top.j()["results"][0]["index"] == j["results"][0]["index"]);
  CHECK_FALSE(top.j()["results"][0].contains("document"));
  CHECK(http_post(port, "/rerank", json{{"query", "q"}, {"documents", {"a"}}}).status == 200);
}

TEST_CASE("e2e rerank: refusals", "[e2e]") {
  const int port = server().port();
  auto param_of = [&](const std::string& path, const json& body) {
    const HttpResult r = http_post(port, path, body);
    INFO(r.body);
    CHECK(r.status == 400);
    return r.j()["error"];
  };
  CHECK(param_of("/v1/rerank", json{{"query", "q"}, {"documents", json::array()}})["param"] == "documents");
  CHECK(param_of("/v1/rerank", json{{"documents", {"a"}}})["param"] == "query");
  CHECK(param_of("/v1/rerank", json{{"query", "q"}, {"documents", {"a"}}, {"top_n", 0}})["param"] == "top_n");
  const json long_doc = param_of("/v1/rerank", json{{"query", "q"}, {"documents", {"a", std::string(600, 'x')}}});
  CHECK(long_doc["code"] == "context_length_exceeded");
  CHECK(long_doc["param"] == "documents[1]");
  CHECK(param_of("/v1/score", json{{"text_1", {"a", "b"}}, {"text_2", {"c"}}})["param"] == "text_2");
}
