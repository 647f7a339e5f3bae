// The HTTP layer and handlers over real loopback HTTP, in process, against the FakeEngine test
// double: response shapes, usage arithmetic, streaming == non-streaming, errors, auth, 429,
// disconnects freeing blocks, health, CORS, timeouts.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <catch2/catch.hpp>
#include <future>

#include "server/http/http_server.h"
#include "server/openai/handlers.h"
#include "server/http/metrics.h"
#include "tests/support/fake_engine.h"
#include "tests/support/http_test_util.h"
#include "tests/support/inproc_http.h"

using namespace pagoda;
using namespace pagoda::testing;
using json = nlohmann::json;

namespace {

struct InProcServer {
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
  };

  InProcServer() : InProcServer(Config{}) {}
  static FakeEngine::Options bounded(FakeEngine::Options o, int max_seqs) {
    o.max_seqs = max_seqs;
    return o;
  }

  explicit InProcServer(Config c) : engine(bounded(c.engine, c.max_inflight)), key(c.api_key) {
    server::Handlers::Options ho;
    ho.model_name = "fake-model";
    ho.timeout_s = c.timeout_s;
    ho.health_stall_s = c.stall_s;
    ho.max_tokens_limit = 1 << 20;  // long generations beyond the fake's 256-token context
    auto render = [](const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                     bool add_gen) {
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
    handlers = std::make_shared<server::Handlers>(engine, render, metrics, ho);
    server::HttpServer::Options so;
    so.api_key = c.api_key;
    so.cors_origins = {"*"};
    so.max_body_bytes = c.max_body;
    so.worker_threads = 48;
    http = std::make_unique<InProcHttpServer>(so, metrics, handlers);
    port = http->port();
  }
  HttpResult post(const std::string& path, const json& body) { return http_post(port, path, body, key); }
  HttpResult get(const std::string& path) { return http_get(port, path, key); }
};

bool wait_for(const std::function<bool()>& cond, double seconds = 5) {
  auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < seconds) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return cond();
}

void check_error(const HttpResult& r, int status, const std::string& param) {
  INFO(r.body);
  REQUIRE(r.status == status);
  json j = r.j();
  REQUIRE(j.contains("error"));
  CHECK(j["error"]["message"].is_string());
  CHECK(j["error"]["type"].is_string());
  CHECK(j["error"].contains("code"));
  if (param.empty())
    CHECK(j["error"]["param"].is_null());
  else
    CHECK(j["error"]["param"] == param);
}

}  // namespace

TEST_CASE("completions: shape and exact usage", "[server]") {
  InProcServer s;
  auto r = s.post("/v1/completions", {{"model", "x"}, {"prompt", "hello"}, {"max_tokens", 5},
                                      {"temperature", 0}});
  INFO(r.body);
  REQUIRE(r.status == 200);
  json j = r.j();
  CHECK(j["id"].get<std::string>().rfind("cmpl-", 0) == 0);
  CHECK(j["object"] == "text_completion");
  CHECK(j["model"] == "fake-model");
  CHECK(j["created"].is_number_integer());
  REQUIRE(j["choices"].size() == 1);
  CHECK(j["choices"][0]["index"] == 0);
  CHECK(j["choices"][0]["text"].get<std::string>().size() == 5);
  CHECK(j["choices"][0]["finish_reason"] == "length");
  CHECK(j["choices"][0]["logprobs"].is_null());
  CHECK(j["usage"]["prompt_tokens"] == 6);  // BOS + 5 bytes
  CHECK(j["usage"]["completion_tokens"] == 5);
  CHECK(j["usage"]["total_tokens"] == 11);
  CHECK(r.headers.count("X-Request-Id") == 1);
}

TEST_CASE("completions: prompt forms, n and usage over prompts", "[server]") {
  InProcServer s;
  auto r = s.post("/v1/completions",
                  {{"prompt", {"ab", "abc"}}, {"n", 2}, {"max_tokens", 3}, {"temperature", 0}});
  REQUIRE(r.status == 200);
  json j = r.j();
  REQUIRE(j["choices"].size() == 4);
  for (int i = 0; i < 4; ++i) CHECK(j["choices"][i]["index"] == i);
  CHECK(j["choices"][0]["text"] == j["choices"][1]["text"]);  // greedy siblings agree
  CHECK(j["usage"]["prompt_tokens"] == 3 + 4);
  CHECK(j["usage"]["completion_tokens"] == 12);

  auto t = s.post("/v1/completions", {{"prompt", {256, 'a', 'b'}}, {"max_tokens", 4}, {"temperature", 0}});
  auto txt = s.post("/v1/completions", {{"prompt", "ab"}, {"max_tokens", 4}, {"temperature", 0}});
  REQUIRE(t.status == 200);
  CHECK(t.j()["choices"][0]["text"] == txt.j()["choices"][0]["text"]);
  auto tt = s.post("/v1/completions", {{"prompt", {{256, 'a'}, {256, 'b'}}}, {"max_tokens", 2}});
  REQUIRE(tt.status == 200);
  CHECK(tt.j()["choices"].size() == 2);
  check_error(s.post("/v1/completions", {{"prompt", {256, 9999}}}), 400, "prompt");
  check_error(s.post("/v1/completions", {{"prompt", {{1}, {-1}}}}), 400, "prompt[1][0]");
}

TEST_CASE("streaming equals non-streaming; chunk protocol", "[server]") {
  InProcServer s;
  json req = {{"prompt", "stream me"}, {"max_tokens", 12}, {"temperature", 0}, {"n", 2}};
  auto full = s.post("/v1/completions", req);
  req["stream"] = true;
  req["stream_options"] = {{"include_usage", true}};
  auto st = s.post("/v1/completions", req);
  REQUIRE(st.status == 200);
  CHECK(st.headers.find("Content-Type")->second.find("text/event-stream") != std::string::npos);
  auto ev = sse_events(st.body);
  REQUIRE(ev.back() == "[DONE]");
  json usage = json::parse(ev[ev.size() - 2]);
  CHECK(usage["choices"].empty());
  CHECK(usage["usage"] == full.j()["usage"]);
  auto texts = sse_texts(ev, 2);
  CHECK(texts[0] == full.j()["choices"][0]["text"]);
  CHECK(texts[1] == full.j()["choices"][1]["text"]);

  json chat = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 7},
               {"temperature", 0}};
  auto cfull = s.post("/v1/chat/completions", chat);
  REQUIRE(cfull.status == 200);
  json cj = cfull.j();
  CHECK(cj["object"] == "chat.completion");
  CHECK(cj["id"].get<std::string>().rfind("chatcmpl-", 0) == 0);
  CHECK(cj["choices"][0]["message"]["role"] == "assistant");
  CHECK(cj["choices"][0]["finish_reason"] == "length");
  CHECK(cj["usage"]["completion_tokens"] == 7);
  chat["stream"] = true;
  auto cst = s.post("/v1/chat/completions", chat);
  auto cev = sse_events(cst.body);
  REQUIRE(cev.size() >= 4);
  json first = json::parse(cev[0]);
  CHECK(first["object"] == "chat.completion.chunk");
  CHECK(first["choices"][0]["delta"]["role"] == "assistant");
  CHECK(!first.contains("usage"));
  json fin = json::parse(cev[cev.size() - 2]);
  CHECK(fin["choices"][0]["finish_reason"] == "length");
  CHECK(fin["choices"][0]["delta"].empty());
  CHECK(cev.back() == "[DONE]");
  CHECK(sse_texts(cev, 1)[0] == cj["choices"][0]["message"]["content"]);
}

TEST_CASE("seeds reproduce; different seeds differ", "[server]") {
  InProcServer s;
  json req = {{"prompt", "x"}, {"max_tokens", 16}, {"temperature", 0.8}, {"seed", 42}};
  auto a = s.post("/v1/completions", req).j()["choices"][0]["text"];
  auto b = s.post("/v1/completions", req).j()["choices"][0]["text"];
  req["seed"] = 43;
  auto c = s.post("/v1/completions", req).j()["choices"][0]["text"];
  CHECK(a == b);
  CHECK(a != c);
}

TEST_CASE("logprobs in each endpoint's shape", "[server]") {
  InProcServer s;
  auto r = s.post("/v1/completions", {{"prompt", "a"}, {"max_tokens", 3}, {"logprobs", 2}});
  REQUIRE(r.status == 200);
  json lp = r.j()["choices"][0]["logprobs"];
  CHECK(lp["tokens"].size() == 3);
  CHECK(lp["token_logprobs"].size() == 3);
  CHECK(lp["top_logprobs"][0].size() == 2);
  CHECK(lp["text_offset"] == json({0, 1, 2}));
  auto c = s.post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "a"}}}},
                                           {"max_tokens", 2}, {"logprobs", true}, {"top_logprobs", 3}});
  REQUIRE(c.status == 200);
  json cl = c.j()["choices"][0]["logprobs"];
  REQUIRE(cl["content"].size() == 2);
  CHECK(cl["content"][0]["token"].is_string());
  CHECK(cl["content"][0]["bytes"].is_array());
  CHECK(cl["content"][0]["top_logprobs"].size() == 3);
}

TEST_CASE("bad input gets 400 naming the field", "[server]") {
  InProcServer s;
  auto msgs = json::array({{{"role", "user"}, {"content", "hi"}}});
  check_error(http_post(s.port, "/v1/completions", std::string("{not json")), 400, "");
  check_error(http_post(s.port, "/v1/completions", std::string("[1,2]")), 400, "");
  check_error(s.post("/v1/completions", {{"max_tokens", 3}}), 400, "prompt");
  check_error(s.post("/v1/completions", {{"prompt", 5}}), 400, "prompt");
  check_error(s.post("/v1/completions", {{"prompt", "a"}, {"max_tokens", -1}}), 400, "max_tokens");
  check_error(s.post("/v1/completions", {{"prompt", "a"}, {"max_tokens", "3"}}), 400, "max_tokens");
  check_error(s.post("/v1/completions", {{"prompt", "a"}, {"temperature", -0.5}}), 400, "temperature");
  check_error(s.post("/v1/completions", {{"prompt", "a"}, {"top_p", 0}}), 400, "top_p");
  check_error(s.post("/v1/completions", {{"prompt", "a"}, {"top_p", 1.5}}), 400, "top_p");
  check_error(s.post("/v1/completions", {{"prompt", "a"}, {"n", 0}}), 400, "n");
  check_error(s.post("/v1/completions", {{"prompt", "a"}, {"stop", 3}}), 400, "stop");
  check_error(s.post("/v1/completions", {{"prompt", "a"}, {"logit_bias", {{"x", 1}}}}), 400, "logit_bias.x");
  check_error(s.post("/v1/completions", {{"prompt", "a"}, {"logit_bias", {{"99999", 1}}}}), 400,
              "logit_bias.99999");
  check_error(s.post("/v1/completions", {{"prompt", "a"}, {"stream", "yes"}}), 400, "stream");
  check_error(s.post("/v1/chat/completions", {{"max_tokens", 3}}), 400, "messages");
  check_error(s.post("/v1/chat/completions", {{"messages", json::array()}}), 400, "messages");
  check_error(s.post("/v1/chat/completions", {{"messages", {{{"role", "wizard"}, {"content", "x"}}}}}),
              400, "messages[0].role");
  check_error(s.post("/v1/chat/completions", {{"messages", {{{"role", "user"}}}}}), 400,
              "messages[0].content");
  check_error(s.post("/v1/chat/completions",
                     {{"messages", {{{"role", "user"}, {"content", {{{"type", "image_url"}}}}}}}}),
              400, "messages[0].content[0].type");
  check_error(s.post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "RAISE"}}}}}),
              400, "messages");
  check_error(s.post("/v1/chat/completions", {{"messages", msgs}, {"max_completion_tokens", 0}}), 400,
              "max_completion_tokens");
  check_error(s.post("/v1/chat/completions", {{"messages", msgs}, {"top_logprobs", 2}}), 400,
              "top_logprobs");
  // Too long for the fake's 256-token context.
  auto r = s.post("/v1/completions", {{"prompt", std::string(300, 'a')}});
  check_error(r, 400, "prompt");
  CHECK(r.j()["error"]["code"] == "context_length_exceeded");
  // Unknown fields are ignored; content-part arrays of text are accepted.
  auto ok = s.post("/v1/chat/completions",
                   {{"messages", {{{"role", "developer"}, {"content", {{{"type", "text"}, {"text", "a"}}}}}}},
                    {"max_tokens", 1}, {"frobnicate", true}});
  CHECK(ok.status == 200);
  // Nothing malformed reached the engine.
  CHECK(s.engine.stats().generation_tokens == 1);
}

TEST_CASE("404, 413, CORS, tokenize, models, metrics", "[server]") {
  InProcServer::Config c;
  c.max_body = 4096;
  InProcServer s(c);
  check_error(s.get("/v2/nothing"), 404, "");
  check_error(s.post("/v1/completions", {{"prompt", std::string(10000, 'a')}}), 413, "");
  httplib::Client cl("127.0.0.1", s.port);
  auto pre = cl.Options("/v1/chat/completions", {{"Origin", "http://a.example"},
                                                  {"Access-Control-Request-Method", "POST"}});
  REQUIRE(pre);
  CHECK(pre->status == 204);
  CHECK(pre->get_header_value("Access-Control-Allow-Origin") == "*");
  auto missing = cl.Get("/nowhere", {{"Origin", "http://a.example"}});
  REQUIRE(missing);
  CHECK(missing->status == 404);
  CHECK(missing->get_header_value_count("Access-Control-Allow-Origin") == 1);
  auto tk = s.post("/tokenize", {{"prompt", "ab"}});
  REQUIRE(tk.status == 200);
  CHECK(tk.j()["tokens"] == json({256, 'a', 'b'}));
  CHECK(tk.j()["count"] == 3);
  auto dt = s.post("/detokenize", {{"tokens", {'h', 'i'}}});
  CHECK(dt.j()["prompt"] == "hi");
  check_error(s.post("/detokenize", {{"tokens", {-3}}}), 400, "tokens[0]");
  auto m = s.get("/v1/models").j();
  CHECK(m["object"] == "list");
  CHECK(m["data"][0]["id"] == "fake-model");
  CHECK(m["data"][0]["object"] == "model");
  s.post("/v1/completions", {{"prompt", "a"}, {"max_tokens", 2}});
  std::string text = s.get("/metrics").body;
  CHECK(metric_value(text, "pagoda_kv_blocks_total") == 1024);
  CHECK(text.find("pagoda_http_requests_total{status=\"404\"} 2") != std::string::npos);
  CHECK(text.find("pagoda_time_to_first_token_seconds_count 1") != std::string::npos);
}

TEST_CASE("chat templates see tools and tool calls in the client's key order", "[server]") {
  InProcServer s(InProcServer::Config{});
  httplib::Client cl("127.0.0.1", s.port);
  // Keys deliberately not in sorted order: nlohmann::json would sort them.
  const std::string body = R"({"messages": [{"role": "user", "content": "DUMP"},
    {"role": "assistant", "content": null, "tool_calls": [{"type": "function",
      "function": {"name": "f", "arguments": {"zeta": 1, "alpha": 2}}}]}],
    "tools": [{"type": "function", "function": {"name": "f",
      "parameters": {"type": "object", "properties": {"zulu": {}, "bravo": {}}}}}]})";
  auto r = cl.Post("/tokenize", body, "application/json");
  REQUIRE(r);
  REQUIRE(r->status == 200);
  const json reply = json::parse(r->body);
  std::string text;
  for (int id : reply["tokens"])
    if (id < 256) text += static_cast<char>(id);
  INFO(text);
  REQUIRE(text.find("zeta") != std::string::npos);
  CHECK(text.find("zeta") < text.find("alpha"));
  REQUIRE(text.find("zulu") != std::string::npos);
  CHECK(text.find("zulu") < text.find("bravo"));
}

TEST_CASE("API key: 401 everywhere but /health", "[server]") {
  InProcServer::Config c;
  c.api_key = "sekret";
  InProcServer s(c);
  CHECK(http_get(s.port, "/health").status == 200);
  check_error(http_get(s.port, "/v1/models"), 401, "");
  check_error(http_get(s.port, "/metrics"), 401, "");
  check_error(http_get(s.port, "/v1/models", "wrong"), 401, "");
  check_error(http_post(s.port, "/v1/completions", json{{"prompt", "a"}}), 401, "");
  check_error(http_get(s.port, "/nope"), 401, "");
  CHECK(http_get(s.port, "/v1/models", "sekret").status == 200);
  CHECK(!server::constant_time_equal("sekret", "sekreT"));
  CHECK(!server::constant_time_equal("sekret", "sekret1"));
  CHECK(server::constant_time_equal("sekret", "sekret"));
}

TEST_CASE("a flood beyond the queue bound gets 429 with Retry-After", "[server]") {
  InProcServer::Config c;
  c.max_inflight = 4;
  c.engine.step_time = std::chrono::milliseconds(5);
  InProcServer s(c);
  std::vector<std::future<HttpResult>> fs;
  for (int i = 0; i < 16; ++i)
    fs.push_back(std::async(std::launch::async, [&] {
      return s.post("/v1/completions", {{"prompt", "a"}, {"max_tokens", 40}});
    }));
  int ok = 0, busy = 0;
  for (auto& f : fs) {
    HttpResult r = f.get();
    if (r.status == 200) ++ok;
    if (r.status == 429) {
      ++busy;
      CHECK(r.headers.count("Retry-After") == 1);
      CHECK(r.j()["error"]["type"] == "rate_limit_error");
    }
  }
  CHECK(ok >= 4);
  CHECK(busy >= 1);
  CHECK(ok + busy == 16);
  CHECK(wait_for([&] { return s.engine.stats().kv_blocks_used == 0; }));
}

TEST_CASE("a client that disconnects aborts its request and frees its blocks", "[server]") {
  InProcServer::Config c;
  c.engine.step_time = std::chrono::milliseconds(20);
  InProcServer s(c);
  SECTION("streaming") {
    std::string body = json{{"prompt", "a"}, {"max_tokens", 5000}, {"stream", true}}.dump();
    std::string got = raw_exchange(s.port, raw_post("/v1/completions", body), 400,
                              std::chrono::seconds(2), std::chrono::milliseconds(200));
    CHECK(got.find("200") != std::string::npos);
  }
  SECTION("non-streaming") {
    std::string body = json{{"prompt", "a"}, {"max_tokens", 5000}}.dump();
    std::thread t([&] { raw_exchange(s.port, raw_post("/v1/completions", body), 1 << 20,
                              std::chrono::seconds(2), std::chrono::milliseconds(200)); });
    REQUIRE(wait_for([&] { return s.engine.stats().running == 1; }));
    t.join();
  }
  SECTION("queued") {
    InProcServer::Config q;
    q.engine.max_running = 1;
    q.engine.step_time = std::chrono::milliseconds(20);
    InProcServer s2(q);
    std::string body = json{{"prompt", "a"}, {"max_tokens", 5000}}.dump();
    std::thread holder([&] { raw_exchange(s2.port, raw_post("/v1/completions", body), 1 << 20,
                              std::chrono::seconds(2), std::chrono::milliseconds(200)); });
    std::thread queued([&] { raw_exchange(s2.port, raw_post("/v1/completions", body), 1 << 20,
                              std::chrono::seconds(2), std::chrono::milliseconds(200)); });
    REQUIRE(wait_for([&] { return s2.engine.stats().waiting == 1; }));
    holder.join();
    queued.join();
    CHECK(wait_for([&] { return s2.engine.stats().waiting == 0 && s2.engine.stats().running == 0; }));
  }
  CHECK(wait_for([&] { return s.engine.stats().kv_blocks_used == 0; }));
  CHECK(s.engine.stats().running == 0);
  CHECK(s.handlers->inflight_seqs() == 0);
}

TEST_CASE("health: 200 while stepping, 503 when dead or stalled", "[server]") {
  SECTION("dead") {
    InProcServer s;
    CHECK(http_get(s.port, "/health").status == 200);
    s.engine.kill();
    CHECK(http_get(s.port, "/health").status == 503);
  }
  SECTION("stalled with work pending") {
    InProcServer::Config c;
    c.stall_s = 0.3;
    InProcServer s(c);
    s.engine.pause(true);
    auto f = std::async(std::launch::async, [&] {
      return s.post("/v1/completions", {{"prompt", "a"}, {"max_tokens", 2}});
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
    CHECK(http_get(s.port, "/health").status == 503);
    s.engine.pause(false);
    CHECK(f.get().status == 200);
    CHECK(http_get(s.port, "/health").status == 200);
  }
}

TEST_CASE("per-request timeout gives 408 and frees the request", "[server]") {
  InProcServer::Config c;
  c.timeout_s = 0.3;
  c.engine.step_time = std::chrono::milliseconds(20);
  InProcServer s(c);
  auto r = s.post("/v1/completions", {{"prompt", "a"}, {"max_tokens", 1000}});
  check_error(r, 408, "");
  auto st = s.post("/v1/completions", {{"prompt", "a"}, {"max_tokens", 1000}, {"stream", true}});
  CHECK(st.status == 200);
  auto ev = sse_events(st.body);
  REQUIRE(ev.size() >= 2);
  CHECK(json::parse(ev[ev.size() - 2]).contains("error"));
  CHECK(wait_for([&] { return s.engine.stats().kv_blocks_used == 0; }));
}
