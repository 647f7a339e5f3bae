// End to end: LoRA adapters on the real `pagoda serve` over loopback HTTP, with an f32
// random-weight model of pagoda's own byte vocabulary and adapters written by `pagoda make-model --lora-for`.
// Checked: /v1/models lists the adapter with its parent; a request naming the adapter gets the
// merged model's greedy text and logprobs (served by a second server on the merged file); an
// unknown model is 404; runtime load and unload in vLLM's shape, behind the API key; a bad
// adapter file is refused naming the key; the routes are 404 without --allow-runtime-lora; the
// lora_requests_info gauge names max_lora.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>

#include "tests/support/http_test_util.h"
#include "tests/support/test_files.h"

using namespace pagoda::testing;
using json = nlohmann::json;

namespace {

const pagoda::testing::ScratchDir& dir() {
  static const pagoda::testing::ScratchDir d("lora-e2e");
  return d;
}

void run(const std::string& cmd) {
  if (std::system(cmd.c_str()) != 0) throw std::runtime_error("failed: " + cmd);
}

// base.gguf, ad1.gguf / merged1.gguf, ad2.gguf (made once).
const std::string& files() {
  static const std::string base = [] {
    const std::string bin = PAGODA_BINARY;
    const std::string b = dir().file("base.gguf");
    run(bin + " make-model --output " + b + " --layers 2 --dim 64 --ff 128 --heads 4 --kv-heads 2 --ctx 512 --seed 7 --type f32 --quiet");
    run(bin + " make-model --lora-for " + b + " --output " + dir().file("ad1.gguf") + " --merged-output " +
        dir().file("merged1.gguf") + " --lora-rank 16 --lora-alpha 32 --seed 1 --lora-targets q,k,v,o,gate,up,down,output --quiet");
    run(bin + " make-model --lora-for " + b + " --output " + dir().file("ad2.gguf") + " --lora-rank 8 --seed 2 --quiet");
    return b;
  }();
  return base;
}

std::unique_ptr<ServerProcess> start(std::vector<std::string> args) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto p = std::make_unique<ServerProcess>(PAGODA_BINARY, args, free_port());
    if (p->wait_ready(60)) return p;
    if (p->log().find("cannot listen") == std::string::npos)
      throw std::runtime_error("pagoda serve did not become ready:\n" + p->log());
  }
  throw std::runtime_error("pagoda serve: no free port");
}

std::vector<std::string> common(const std::string& model) {
  return {model, "-c", "512", "-np", "8", "-t", "1", "--kv-cache-memory", "16MiB", "--served-model-name", "base"};
}

json complete(int port, const std::string& model, const std::string& key = "") {
  const HttpResult r = http_post(port, "/v1/completions",
                                 json{{"model", model}, {"prompt", "Once upon a time"}, {"max_tokens", 12},
                                      {"temperature", 0}, {"logprobs", 1}},
                                 key);
  INFO(r.body);
  REQUIRE(r.status == 200);
  return r.j()["choices"][0];
}

}  // namespace

TEST_CASE("e2e LoRA: listing, the merged model's output by adapter name, runtime load/unload", "[e2e]") {
  files();
  std::vector<std::string> args = common(files());
  for (const std::string& x : {std::string("--lora"), "one=" + dir().file("ad1.gguf"), std::string("--allow-runtime-lora"),
                               std::string("on"), std::string("--api-key"), std::string("sekret")})
    args.push_back(x);
  auto server = start(args);
  auto merged = start(common(dir().file("merged1.gguf")));
  const int port = server->port();
  const std::string key = "sekret";

  const HttpResult models = http_get(port, "/v1/models", key);
  REQUIRE(models.status == 200);
  const json data = models.j()["data"];
  REQUIRE(data.size() == 2);
  CHECK(data[0]["id"] == "base");
  CHECK(data[1]["id"] == "one");
  CHECK(data[1]["parent"] == "base");
  CHECK(data[1]["root"] == dir().file("ad1.gguf"));
  CHECK(http_get(port, "/v1/models/one", key).j()["parent"] == "base");

  const json got = complete(port, "one", key);
  const json want = complete(merged->port(), "base");
  const json base = complete(port, "base", key);
  CHECK(got["text"] == want["text"]);
  CHECK(got["text"] != base["text"]);
  const json& gl = got["logprobs"]["token_logprobs"];
  const json& wl = want["logprobs"]["token_logprobs"];
  REQUIRE(gl.size() == wl.size());
  for (size_t i = 0; i < gl.size(); ++i) CHECK(std::fabs(gl[i].get<double>() - wl[i].get<double>()) < 1e-3);

  CHECK(http_post(port, "/v1/completions", json{{"model", "two"}, {"prompt", "x"}}, key).status == 404);

  // Runtime loading: behind the key, vLLM's body and answers.
  const json load2 = {{"lora_name", "two"}, {"lora_path", dir().file("ad2.gguf")}};
  CHECK(http_post(port, "/v1/load_lora_adapter", load2).status == 401);
  const HttpResult loaded = http_post(port, "/v1/load_lora_adapter", load2, key);
  CHECK(loaded.status == 200);
  CHECK(loaded.body == "Success: LoRA adapter 'two' added successfully.");
  CHECK(http_post(port, "/v1/load_lora_adapter", load2, key).status == 400);  // already loaded
  const json two = complete(port, "two", key);
  CHECK(two["text"] != base["text"]);
  CHECK(http_get(port, "/v1/models", key).j()["data"].size() == 3);

  const HttpResult bad = http_post(port, "/v1/load_lora_adapter",
                                   json{{"lora_name", "bad"}, {"lora_path", files()}}, key);
  CHECK(bad.status == 400);
  CHECK_THAT(bad.body, Catch::Contains("general.type"));
  CHECK(http_post(port, "/v1/load_lora_adapter", json{{"lora_name", "base"}, {"lora_path", dir().file("ad2.gguf")}}, key)
            .status == 400);

  const HttpResult unloaded = http_post(port, "/v1/unload_lora_adapter", json{{"lora_name", "two"}}, key);
  CHECK(unloaded.status == 200);
  CHECK(unloaded.body == "Success: LoRA adapter 'two' removed successfully.");
  CHECK(http_post(port, "/v1/unload_lora_adapter", json{{"lora_name", "two"}}, key).status == 404);
  CHECK(http_post(port, "/v1/completions", json{{"model", "two"}, {"prompt", "x"}}, key).status == 404);
  CHECK(complete(port, "one", key)["text"] == want["text"]);  // the other adapter is untouched

  const HttpResult metrics = http_get(port, "/metrics", key);
  CHECK_THAT(metrics.body, Catch::Contains("max_lora=\"4\""));
}

TEST_CASE("e2e LoRA: the runtime routes are off without --allow-runtime-lora; a bad --lora stops the start", "[e2e]") {
  files();
  auto server = start(common(files()));
  const HttpResult r = http_post(server->port(), "/v1/load_lora_adapter",
                                 json{{"lora_name", "two"}, {"lora_path", dir().file("ad2.gguf")}});
  CHECK(r.status == 404);
  CHECK_THAT(r.body, Catch::Contains("--allow-runtime-lora"));

  auto args = common(files());
  args.push_back("--lora");
  args.push_back("bad=" + files());
  ServerProcess p(PAGODA_BINARY, args, free_port());
  CHECK_FALSE(p.wait_ready(30));
  CHECK_THAT(p.log(), Catch::Contains("general.type"));
}
