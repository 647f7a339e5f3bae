// End to end: /v1/embeddings on the real `pagoda serve` over loopback HTTP, started the way vLLM
// and llama-server users start theirs (positional model, -c, -np, --max-num-batched-tokens),
// with two served names. A random-weight model with pagoda's own byte vocabulary, so nothing
// from ../shared is needed. Checked: OpenAI's response shape field by field, unit norm, text ==
// its token ids, alone == in a batch of inputs == beside streaming generation traffic, base64 ==
// the floats, `dimensions` (truncated, renormalized), usage, 400 over the context, 404 for a
// model that is not served, the model_name label on /metrics.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>

#include "tests/support/http_test_util.h"
#include "tests/support/test_files.h"

using namespace pagoda::testing;
using json = nlohmann::json;

namespace {

// Written once per process into a scratch directory removed at exit (after the server, which
// is started later and so stopped first).
const std::string& model_path() {
  static const pagoda::testing::ScratchDir dir("embed-e2e");
  static const std::string path = [] {
    const std::string p = dir.file("model.gguf");
    const std::string cmd = std::string(PAGODA_BINARY) + " make-model --output " + p +
                            " --layers 2 --dim 64 --ff 128 --heads 4 --kv-heads 2 --ctx 256 --seed 5 --quiet";
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
          std::vector<std::string>{model_path(), "-c", "256", "-np", "8", "--max-num-batched-tokens", "64",
                                   "-t", "1", "--kv-cache-memory", "16MiB", "--served-model-name", "embedder,alias"},
          free_port());
      if (p->wait_ready(60)) return p;
      if (p->log().find("cannot listen") == std::string::npos)
        throw std::runtime_error("pagoda serve did not become ready:\n" + p->log());
    }
    throw std::runtime_error("pagoda serve: no free port");
  }();
  return *s;
}

std::vector<float> floats(const json& v) { return v.get<std::vector<float>>(); }

std::vector<float> decode_base64(const std::string& s) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
  };
  std::string bytes;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : s) {
    const int v = value(c);
    if (v < 0) break;  // '=' padding
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      bytes += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  REQUIRE(bytes.size() % 4 == 0);
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), bytes.size());  // little-endian float32, as on x86
  return out;
}

void check_close(const std::vector<float>& a, const std::vector<float>& b, double tol) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("component " << i);
    CHECK(std::fabs(a[i] - b[i]) <= tol);
  }
}

double norm(const std::vector<float>& v) {
  double ss = 0;
  for (float x : v) ss += static_cast<double>(x) * x;
  return std::sqrt(ss);
}

HttpResult embed(const json& body) { return http_post(server().port(), "/v1/embeddings", body); }

}  // namespace

TEST_CASE("e2e embeddings: OpenAI's shape, one vector per input, batch and traffic invariant", "[e2e]") {
  const int port = server().port();
  const std::string text = "The quick brown fox jumps over the lazy dog";
  const HttpResult one = embed({{"model", "embedder"}, {"input", text}});
  INFO(one.body);
  REQUIRE(one.status == 200);
  const json j = one.j();
  CHECK(j["object"] == "list");
  CHECK(j["model"] == "embedder");
  REQUIRE(j["data"].size() == 1);
  CHECK(j["data"][0]["object"] == "embedding");
  CHECK(j["data"][0]["index"] == 0);
  const std::vector<float> alone = floats(j["data"][0]["embedding"]);
  CHECK(alone.size() == 64);
  CHECK(norm(alone) == Approx(1.0).margin(1e-5));
  const json tok = http_post(port, "/tokenize", {{"content", text}}).j();
  CHECK(j["usage"]["prompt_tokens"] == tok["count"]);
  CHECK(j["usage"]["total_tokens"] == tok["count"]);

  // Its token ids give the same vector; so does a list of inputs, beside streaming generation.
  auto traffic = std::async(std::launch::async, [&] {
    return http_post(port, "/v1/completions",
                     {{"prompt", "Once upon a time"}, {"max_tokens", 40}, {"stream", true}, {"ignore_eos", true}});
  });
  const HttpResult many =
      embed({{"model", "alias"}, {"input", {"a short one", text, std::string(150, 'x'), text}}});
  const HttpResult ids = embed({{"input", tok["tokens"]}});
  const HttpResult id_lists = embed({{"input", {tok["tokens"], {1, 2, 3}}}});
  CHECK(traffic.get().status == 200);
  REQUIRE(many.status == 200);
  const json m = many.j();
  CHECK(m["model"] == "alias");
  REQUIRE(m["data"].size() == 4);
  for (int i = 0; i < 4; ++i) CHECK(m["data"][i]["index"] == i);
  check_close(floats(m["data"][1]["embedding"]), alone, 1e-6);
  check_close(floats(m["data"][3]["embedding"]), alone, 1e-6);
  CHECK(floats(m["data"][0]["embedding"]) != alone);
  REQUIRE(ids.status == 200);
  check_close(floats(ids.j()["data"][0]["embedding"]), alone, 1e-6);
  REQUIRE(id_lists.status == 200);
  CHECK(id_lists.j()["data"].size() == 2);
  CHECK(id_lists.j()["usage"]["prompt_tokens"] == tok["count"].get<int>() + 3);

  // base64: the same floats, little-endian; dimensions: truncated, then unit norm again.
  const HttpResult b64 = embed({{"input", text}, {"encoding_format", "base64"}});
  REQUIRE(b64.status == 200);
  REQUIRE(b64.j()["data"][0]["embedding"].is_string());
  check_close(decode_base64(b64.j()["data"][0]["embedding"]), alone, 0);
  const HttpResult cut = embed({{"input", text}, {"dimensions", 16}});
  REQUIRE(cut.status == 200);
  const std::vector<float> short_vec = floats(cut.j()["data"][0]["embedding"]);
  REQUIRE(short_vec.size() == 16);
  CHECK(norm(short_vec) == Approx(1.0).margin(1e-5));
  const double head = norm(std::vector<float>(alone.begin(), alone.begin() + 16));
  for (int i = 0; i < 16; ++i) CHECK(short_vec[i] == Approx(alone[i] / head).margin(1e-6));

  // More inputs than the engine admits at once (8 running + 256 queued): the rest wait for
  // this request's earlier ones, and the answer keeps the input order.
  json inputs = json::array();
  for (int i = 0; i < 300; ++i) inputs.push_back(i == 299 ? text : "input " + std::to_string(i));
  const HttpResult big = embed({{"input", inputs}});
  REQUIRE(big.status == 200);
  REQUIRE(big.j()["data"].size() == 300);
  for (int i = 0; i < 300; ++i) CHECK(big.j()["data"][i]["index"] == i);
  check_close(floats(big.j()["data"][299]["embedding"]), alone, 1e-6);

  const std::string metrics = http_get(port, "/metrics").body;
  CHECK(metrics.find("pagoda_requests_running{model_name=\"embedder\"}") != std::string::npos);
  CHECK(metric_value(metrics, "pagoda_request_prompt_tokens_count") >= 5);
}

TEST_CASE("e2e embeddings: refusals in OpenAI's error shape", "[e2e]") {
  auto check = [](const HttpResult& r, int status, const json& param, const std::string& code = "") {
    INFO(r.body);
    REQUIRE(r.status == status);
    const json e = r.j()["error"];
    CHECK(e["message"].is_string());
    CHECK(e["type"].is_string());
    CHECK(e["param"] == param);
    if (!code.empty()) CHECK(e["code"] == code);
  };
  check(embed({{"model", "gpt-4o"}, {"input", "x"}}), 404, nullptr, "model_not_found");
  check(embed({{"input", std::string(400, 'y')}}), 400, "input", "context_length_exceeded");
  check(embed({{"input", {"ok", std::string(400, 'y')}}}), 400, "input[1]", "context_length_exceeded");
  check(embed({{"input", ""}}), 400, "input");
  check(embed({{"input", json::array()}}), 400, "input");
  check(embed({{"input", json(std::vector<std::string>(2049, "a"))}}), 400, "input");
  check(http_post(server().port(), "/tokenize", {{"model", "gpt-4o"}, {"content", "a"}}), 404, nullptr,
        "model_not_found");
  check(embed({{"model", "embedder"}}), 400, "input");
  check(embed({{"input", {1, 2, 9999999}}}), 400, "input");
  check(embed({{"input", "x"}, {"encoding_format", "int8"}}), 400, "encoding_format");
  check(embed({{"input", "x"}, {"dimensions", 0}}), 400, "dimensions");
  check(embed({{"input", "x"}, {"dimensions", 65}}), 400, "dimensions");
  // The whole context may be embedded (nothing is generated).
  CHECK(embed({{"input", std::string(255, 'z')}}).status == 200);
}

TEST_CASE("e2e: a ctx_size over the model's training context is named at start", "[e2e]") {
  const std::string cfg = std::filesystem::path(model_path()).replace_filename("ctx.json").string();
  std::ofstream(cfg) << "{\"ctx_size\": 1024, \"threads\": 1, \"kv_cache_memory\": \"16MiB\"}";
  std::unique_ptr<ServerProcess> p;
  for (int attempt = 0; attempt < 3 && !p; ++attempt) {
    auto s = std::make_unique<ServerProcess>(PAGODA_BINARY, std::vector<std::string>{"--config", cfg, model_path()},
                                             free_port());
    if (s->wait_ready(60)) p = std::move(s);
  }
  std::remove(cfg.c_str());
  REQUIRE(p);
  INFO(p->log());
  CHECK(p->log().find("ctx_size exceeds the context the model was trained on") != std::string::npos);
  CHECK(p->log().find("1024") != std::string::npos);
  CHECK(http_get(p->port(), "/v1/models").j()["data"][0]["max_model_len"] == 1024);
}
