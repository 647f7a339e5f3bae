// The OpenAI API served in process over loopback HTTP against the FakeEngine test double: what
// the tests of the HTTP layer (tests/unit/http/) run their requests against.
#pragma once

#include <memory>
#include <string>

#include "server/http/http_server.h"
#include "server/http/metrics.h"
#include "server/openai/handlers.h"
#include "tests/support/fake_engine.h"
#include "tests/support/http_test_util.h"
#include "tests/support/inproc_http.h"

namespace pagoda::testing {

struct FakeApiServer {
  server::Metrics metrics;
  FakeEngine engine;
  std::shared_ptr<server::Handlers> handlers;
  std::unique_ptr<InProcHttpServer> http;  // declared after what it serves: stops first
  int port = 0;
  std::string key;

  struct Config {
    std::string api_key;
    int max_inflight = 64;  // the engine's admission bound, in sequences
    double timeout_s = 60;
    double stall_s = 60;
    size_t max_body = 1 << 20;
    FakeEngine::Options engine;
    server::HttpServer::Options http = default_http();  // api_key and max_body come from above

    static server::HttpServer::Options default_http() {
      server::HttpServer::Options o;
      o.cors_origins = {"*"};
      o.worker_threads = 48;
      return o;
    }
  };

  FakeApiServer() : FakeApiServer(Config{}) {}
  static FakeEngine::Options bounded(FakeEngine::Options o, int max_seqs) {
    o.max_seqs = max_seqs;
    o.max_tokens_limit = 1 << 20;  // long generations beyond the fake's 256-token context
    return o;
  }

  explicit FakeApiServer(Config c) : engine(bounded(c.engine, c.max_inflight)), key(c.api_key) {
    server::Handlers::Options ho;
    ho.model_name = "fake-model";
    ho.model_aliases = {"fake-alias"};
    ho.timeout_s = c.timeout_s;
    ho.health_stall_s = c.stall_s;
    auto render = [](const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                     bool add_gen, const nlohmann::ordered_json&) {
      std::string s;
      // "DUMP" shows what the template would see, to check the JSON key order it gets.
      if (messages[0]["content"] == "DUMP") return messages.dump() + tools.dump();
      for (const auto& m : messages) {
        if (m["content"] == "RAISE") throw std::runtime_error("template says no");
        s += m["role"].get<std::string>() + ": " + m["content"].get<std::string>() + "\n";
      }
      if (add_gen) s += "assistant:";
      return s;
    };
    metrics.set_model_name(ho.model_name);
    handlers = std::make_shared<server::Handlers>(engine, render, metrics, ho);
    server::HttpServer::Options so = c.http;
    so.api_key = c.api_key;
    so.max_body_bytes = c.max_body;
    http = std::make_unique<InProcHttpServer>(so, metrics, handlers);
    port = http->port();
  }
  HttpResult post(const std::string& path, const json& body) { return http_post(port, path, body, key); }
  HttpResult get(const std::string& path) { return http_get(port, path, key); }
};

}  // namespace pagoda::testing
