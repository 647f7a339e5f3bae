// A chat server for the reasoning and Responses tests: the real handlers over loopback HTTP,
// the FakeEngine playing scripted model output, and a template that writes each message as
// "role: content" lines and, like the reasoning models' templates, opens `<think>` in the
// prompt when chat_template_kwargs say {"prompt_opens": true} and closes an empty block when
// they say {"enable_thinking": false}.
#pragma once

#include <memory>
#include <string>

#include "server/http/metrics.h"
#include "server/openai/handlers.h"
#include "tests/support/fake_engine.h"
#include "tests/support/http_test_util.h"
#include "tests/support/inproc_http.h"

namespace pagoda::testing {

struct FakeChatServer {
  server::Metrics metrics;
  FakeEngine engine{FakeEngine::Options{8192}};
  std::shared_ptr<server::Handlers> handlers;
  std::unique_ptr<InProcHttpServer> http;  // declared after what it serves: stops first
  int port = 0;

  // `render`: a chat template of the test's own instead (a real model's). `api_key`: the key
  // the server asks for (--api-key), none when empty.
  explicit FakeChatServer(server::Handlers::Options ho, server::Handlers::ChatRenderer render = nullptr,
                          const std::string& api_key = "") {
    ho.model_name = "fake-model";
    if (!render) render = [](const nlohmann::ordered_json& messages, const nlohmann::ordered_json&, bool,
                     const nlohmann::ordered_json& vars) {
      std::string s;
      for (const auto& m : messages) {
        s += m["role"].get<std::string>() + ": " + m["content"].get<std::string>();
        if (m.contains("tool_calls")) s += " calls " + m["tool_calls"].dump();
        if (m.contains("tool_call_id")) s += " for " + m["tool_call_id"].get<std::string>();
        s += "\n";
      }
      s += "assistant:";
      if (vars.is_object() && vars.value("enable_thinking", true) == false) s += "<think>\n\n</think>\n\n";
      if (vars.is_object() && vars.value("prompt_opens", false)) s += "<think>\n";
      return s;
    };
    handlers = std::make_shared<server::Handlers>(engine, render, metrics, std::move(ho));
    server::HttpServer::Options so;
    so.worker_threads = 8;
    so.api_key = api_key;
    http = std::make_unique<InProcHttpServer>(so, metrics, handlers);
    port = http->port();
  }

  // The model's next answers: `text` as one token per byte.
  void script(const std::string& text) { engine.set_script(FakeEngine::script_bytes(text)); }
  // The last prompt the engine was given, as text (its byte tokens).
  std::string last_prompt_text() const {
    std::string text;
    for (int32_t id : engine.last_prompt())
      if (id < 256) text += static_cast<char>(id);
    return text;
  }
  HttpResult post(const std::string& path, const nlohmann::json& body) { return http_post(port, path, body); }
};

}  // namespace pagoda::testing
