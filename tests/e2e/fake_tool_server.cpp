// A pagoda HTTP server over the FakeEngine whose "model" answers every chat with the text of
// the last user message, byte by byte: clients (the Node OpenAI SDK test) script the model's
// output through the request itself. A conversation that ends with tool results is answered
// "Tool said: " and the results, so a client can check they came back. Used to test function
// calling (chat and Responses) end to end with real SDKs, which a random-weight model cannot do.
//
// usage: fake_tool_server [--tool-call-parser hermes|llama3|mistral|none] [--api-key KEY]
// Prints {"msg": "pagoda serving", "address": "http://127.0.0.1:PORT"} when ready; stops when
// its stdin closes (the test that started it ends).
#include <cstdio>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>

#include "server/http/http_server.h"
#include "server/openai/handlers.h"
#include "server/http/metrics.h"
#include "tests/support/fake_engine.h"

using namespace pagoda;

namespace {

// Scripts each request's output as its own prompt text (the last user message, see render).
class EchoEngine : public testing::FakeEngine {
 public:
  EchoEngine() : FakeEngine(Options{1 << 16, 8, 16, 1 << 16, std::chrono::microseconds(200)}) {}

  std::shared_ptr<RequestStream> submit(GenerationRequest req, SubmitError* err) override {
    std::string text;
    for (int32_t id : req.prompt)
      if (id < 256) text += (char)id;
    std::lock_guard<std::mutex> lk(script_mu_);  // the script is read at submit: set and submit together
    set_script(script_bytes(text.empty() ? "?" : text));
    return FakeEngine::submit(std::move(req), err);
  }

 private:
  std::mutex script_mu_;
};

}  // namespace

int main(int argc, char** argv) {
  server::ToolCallFormat format = server::ToolCallFormat::Hermes;
  std::string api_key;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--api-key") {
      api_key = argv[i + 1];
      continue;
    }
    if (std::string(argv[i]) != "--tool-call-parser") {
      std::fprintf(stderr, "unknown argument %s\n", argv[i]);
      return 2;
    }
    auto f = server::tool_call_format_from_name(argv[i + 1]);
    if (!f) {
      std::fprintf(stderr, "unknown tool-call parser %s\n", argv[i + 1]);
      return 2;
    }
    format = *f;
  }
  server::Metrics metrics;
  EchoEngine engine;
  server::Handlers::Options ho;
  ho.model_name = "fake-tools";
  ho.tool_call_format = format;
  auto render = [](const nlohmann::ordered_json& messages, const nlohmann::ordered_json&, bool,
                   const nlohmann::ordered_json&) {
    std::string last, results;
    for (const auto& m : messages) {
      if (m["role"] == "user") last = m["content"].get<std::string>();
      results = m["role"] == "tool" ? results + (results.empty() ? "" : ", ") + m["content"].get<std::string>() : "";
    }
    return results.empty() ? last : "Tool said: " + results;
  };
  auto handlers = std::make_shared<server::Handlers>(engine, render, metrics, ho);
  server::HttpServer::Options so;
  so.worker_threads = 8;
  so.api_key = api_key;
  server::HttpServer http(so, metrics, server::Handlers::routes());
  http.set_service(handlers);
  int port = http.bind("127.0.0.1", 0);
  std::thread run([&] { http.run(); });
  std::printf("{\"msg\": \"pagoda serving\", \"address\": \"http://127.0.0.1:%d\"}\n", port);
  std::fflush(stdout);
  // The test owns this process: it ends when the test closes our stdin (or kills us).
  std::string line;
  while (std::getline(std::cin, line)) {
  }
  http.stop();
  run.join();
  return 0;
}
