// End to end: a random-weight bert encoder from `make-model --arch bert` served by the real
// `pagoda serve` over loopback HTTP. /v1/embeddings answers the vectors the engine's BertModel
// computes in this process for the same text; /v1/rerank and /v1/score answer the cosine of
// those vectors (the encoder's scoring path), best first; completions and chat are 400s. A
// nomic-bert file and an xlm-roberta one (Unigram vocabulary) are served the same way (their
// embeddings checked the same). Rerankers (--pooling rank, bert and xlm-roberta) answer their
// classification head's score of each pair, computed here from the pair's tokens.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>

#include "engine/encoder/bert_model.h"
#include "engine/gguf/gguf.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/support/cosine.h"
#include "tests/support/http_test_util.h"
#include "tests/support/test_files.h"

using namespace pagoda::testing;
using json = nlohmann::json;

namespace {

// The model file of `arch` (bert, nomic-bert or xlm-roberta; "ARCH:rank" for a reranker),
// written once per process.
const std::string& model_path(const std::string& arch = "bert") {
  static const ScratchDir dir("bert-e2e");
  static std::map<std::string, std::string> paths;
  auto it = paths.find(arch);
  if (it != paths.end()) return it->second;
  const size_t colon = arch.find(':');
  const std::string p = dir.file(arch.substr(0, colon) + (colon == std::string::npos ? "" : "-rank") + ".gguf");
  const std::string cmd = std::string(PAGODA_BINARY) + " make-model --arch " + arch.substr(0, colon) +
                          (colon == std::string::npos ? "" : " --pooling rank") + " --output " + p +
                          " --layers 2 --dim 64 --ff 128 --heads 4 --ctx 64 --seed 11 --quiet";
  if (std::system(cmd.c_str()) != 0) throw std::runtime_error("make-model failed: " + cmd);
  return paths.emplace(arch, p).first->second;
}

ServerProcess& server(const std::string& arch = "bert") {
  static std::map<std::string, std::unique_ptr<ServerProcess>> servers;
  auto& s = servers[arch];
  for (int attempt = 0; !s && attempt < 3; ++attempt) {
    auto p = std::make_unique<ServerProcess>(
        PAGODA_BINARY, std::vector<std::string>{model_path(arch), "-t", "1", "--served-model-name", "enc"}, free_port());
    if (p->wait_ready(60)) s = std::move(p);
    else if (p->log().find("cannot listen") == std::string::npos)
      throw std::runtime_error("pagoda serve did not become ready:\n" + p->log());
  }
  if (!s) throw std::runtime_error("pagoda serve: no free port");
  return *s;
}

// The model and tokenizer of `arch`, loaded here once.
struct Local {
  pagoda::gguf::GgufFile file;
  pagoda::encoder::BertModel model;
  std::unique_ptr<pagoda::Tokenizer> tok;
  explicit Local(const std::string& path)
      : file(pagoda::gguf::GgufFile::open(path)), model(file, 1), tok(pagoda::Tokenizer::from_gguf(file)) {}
};

Local& local(const std::string& arch) {
  static std::map<std::string, std::unique_ptr<Local>> locals;
  auto& l = locals[arch];
  if (!l) l = std::make_unique<Local>(model_path(arch));
  return *l;
}

// The embedding of `text` computed here, as the server of `arch` should.
std::vector<float> local_embedding(const std::string& text, const std::string& arch = "bert") {
  Local& l = local(arch);
  return l.model.embed(l.tok->encode(text, true, false));
}

// A reranker's score of (query, doc) computed here: `pair` lists the ids around the texts,
// e.g. {bos, -1, eos, sep, -2, eos} (-1: the query's tokens, -2: the document's).
double local_pair_score(const std::string& arch, const std::string& query, const std::string& doc,
                        const std::vector<int32_t>& pair) {
  Local& l = local(arch);
  std::vector<int32_t> ids;
  int segment_b = -1;
  for (int32_t id : pair) {
    if (id >= 0) {
      ids.push_back(id);
      continue;
    }
    if (id == -2) segment_b = int(ids.size());
    const auto text = l.tok->encode(id == -1 ? query : doc, false, false);
    ids.insert(ids.end(), text.begin(), text.end());
  }
  return l.model.embed(ids, segment_b)[0];
}

using pagoda::testing::cosine;

}  // namespace

TEST_CASE("e2e bert: /v1/embeddings answers the encoder's vectors", "[e2e][encoder]") {
  const std::vector<std::string> inputs = {"hello world", "The cat sat on the mat.", "what is the capital of france?"};
  for (const std::string arch : {"bert", "nomic-bert"}) {
    const HttpResult r = http_post(server(arch).port(), "/v1/embeddings", json{{"model", "enc"}, {"input", inputs}});
    INFO(arch << ": " << r.body);
    REQUIRE(r.status == 200);
    const json j = r.j();
    REQUIRE(j["data"].size() == inputs.size());
    CHECK(j["usage"]["prompt_tokens"].get<int>() > 0);
    for (size_t i = 0; i < inputs.size(); ++i) {
      const auto got = j["data"][i]["embedding"].get<std::vector<float>>();
      const auto want = local_embedding(inputs[i], arch);
      REQUIRE(got.size() == 64);
      double worst = 0;
      for (size_t k = 0; k < got.size(); ++k) worst = std::max(worst, double(std::abs(got[k] - want[k])));
      INFO(inputs[i] << " worst " << worst);
      CHECK(worst < 1e-6);
    }
  }
}

TEST_CASE("e2e bert: rerank and score are the cosine of the embeddings, best first", "[e2e][encoder]") {
  const std::string query = "capital of france";
  const std::vector<std::string> docs = {"the dog sat on the mat", "paris is the capital of france", "hello world"};
  const HttpResult r = http_post(server().port(), "/v1/rerank", json{{"query", query}, {"documents", docs}});
  INFO(r.body);
  REQUIRE(r.status == 200);
  const json j = r.j();
  REQUIRE(j["results"].size() == docs.size());
  double prev = 2;
  for (const json& res : j["results"]) {
    const size_t i = res["index"].get<size_t>();
    const double score = res["relevance_score"].get<double>();
    CHECK(score == Approx(cosine(local_embedding(query), local_embedding(docs[i]))).margin(1e-5));
    CHECK(score <= prev);
    prev = score;
  }
  const HttpResult s = http_post(server().port(), "/v1/score", json{{"text_1", query}, {"text_2", docs}});
  INFO(s.body);
  REQUIRE(s.status == 200);
  for (size_t i = 0; i < docs.size(); ++i)
    CHECK(s.j()["data"][i]["score"].get<double>() ==
          Approx(cosine(local_embedding(query), local_embedding(docs[i]))).margin(1e-5));
}

TEST_CASE("e2e bert: generation endpoints refuse an encoder with a 400", "[e2e][encoder]") {
  const HttpResult c = http_post(server().port(), "/v1/completions", json{{"prompt", "hello"}, {"max_tokens", 4}});
  CHECK(c.status == 400);
  CHECK(c.body.find("encoder") != std::string::npos);
  const HttpResult m = http_post(server().port(), "/v1/chat/completions",
                                 json{{"messages", json::array({json{{"role", "user"}, {"content", "hi"}}})}});
  CHECK(m.status == 400);
  CHECK(m.body.find("model_not_generative") != std::string::npos);
  std::string long_text;
  for (int i = 0; i < 100; ++i) long_text += " cat";  // 100 words + [CLS] [SEP]
  const HttpResult long_input = http_post(server().port(), "/v1/embeddings", json{{"input", long_text}});
  CHECK(long_input.status == 400);  // over the model's context of 64
}

TEST_CASE("e2e xlm-roberta: a Unigram-vocabulary encoder answers its embeddings", "[e2e][encoder]") {
  for (const std::string text : {"hello world", "caf\xC3\xA9 \xE4\xB8\xAD\xE6\x96\x87 paris"}) {
    const HttpResult r = http_post(server("xlm-roberta").port(), "/v1/embeddings", json{{"input", text}});
    INFO(r.body);
    REQUIRE(r.status == 200);
    const auto got = r.j()["data"][0]["embedding"].get<std::vector<float>>();
    CHECK(cosine(got, local_embedding(text, "xlm-roberta")) > 0.99999);
  }
}

TEST_CASE("e2e rerankers: rerank and score answer the classification head's score", "[e2e][encoder]") {
  const std::string query = "capital of france";
  const std::vector<std::string> docs = {"the dog sat on the mat", "paris is the capital of france", "hello world"};
  // XLM-RoBERTa: <s> q </s></s> d </s> (ids 0 and 2); BERT: [CLS] q [SEP] d [SEP] (ids 2 and 3),
  // the document with token type 1.
  for (const auto& [arch, pair] : {std::pair<std::string, std::vector<int32_t>>{"xlm-roberta:rank", {0, -1, 2, 2, -2, 2}},
                                   std::pair<std::string, std::vector<int32_t>>{"bert:rank", {2, -1, 3, -2, 3}}}) {
    INFO(arch);
    const HttpResult r = http_post(server(arch).port(), "/v1/rerank", json{{"query", query}, {"documents", docs}});
    INFO(r.body);
    REQUIRE(r.status == 200);
    REQUIRE(r.j()["results"].size() == docs.size());
    double prev = 1e300;
    for (const json& res : r.j()["results"]) {
      const size_t i = res["index"].get<size_t>();
      const double score = res["relevance_score"].get<double>();
      CHECK(score == Approx(local_pair_score(arch, query, docs[i], pair)).margin(1e-5));
      CHECK(score <= prev);
      prev = score;
    }
    const HttpResult s = http_post(server(arch).port(), "/v1/score", json{{"text_1", query}, {"text_2", docs[1]}});
    REQUIRE(s.status == 200);
    CHECK(s.j()["data"][0]["score"].get<double>() == Approx(local_pair_score(arch, query, docs[1], pair)).margin(1e-5));
    const HttpResult e = http_post(server(arch).port(), "/v1/embeddings", json{{"input", "hello"}});
    CHECK(e.status == 400);
    CHECK(e.body.find("model_is_reranker") != std::string::npos);
  }
}
