// End-to-end: the real `pagoda serve` binary on a loopback port, a random-weight model with
// Phi-3's real vocabulary and chat template, checked over real HTTP (the surfaces the README
// promises).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>
#include <future>

#include "tests/e2e/e2e_fixture.h"

using namespace pagoda::testing;
using json = nlohmann::json;

namespace {

json chat_body(const std::string& text, int max_tokens) {
  return {{"model", "model"},
          {"messages", {{{"role", "system"}, {"content", "You are terse."}},
                        {{"role", "user"}, {"content", text}}}},
          {"max_tokens", max_tokens},
          {"temperature", 0}};
}

void check_error(const HttpResult& r, int status, const std::string& param,
                 const std::string& code = "") {
  INFO(r.body);
  REQUIRE(r.status == status);
  json j = r.j();
  REQUIRE(j["error"].is_object());
  CHECK(j["error"]["message"].is_string());
  CHECK(!j["error"]["message"].get<std::string>().empty());
  CHECK(j["error"]["type"].is_string());
  if (param.empty())
    CHECK(j["error"]["param"].is_null());
  else
    CHECK(j["error"]["param"] == param);
  if (!code.empty()) CHECK(j["error"]["code"] == code);
}

double metric(int port, const std::string& name, const std::string& key = "") {
  return metric_value(http_get(port, "/metrics", key).body, name);
}

}  // namespace

TEST_CASE("e2e: health, models, metrics, tokenize round trip", "[e2e]") {
  int port = shared_server().port();
  auto h = http_get(port, "/health");
  CHECK(h.status == 200);
  json m = http_get(port, "/v1/models").j();
  CHECK(m["object"] == "list");
  CHECK(m["data"][0]["id"] == "model");
  CHECK(m["data"][0]["max_model_len"] == 512);
  auto t = http_post(port, "/tokenize", json{{"prompt", "Hello world"}});
  REQUIRE(t.status == 200);
  json ids = t.j()["tokens"];
  CHECK(ids.size() >= 2);
  auto d = http_post(port, "/detokenize", json{{"tokens", ids}});
  CHECK(d.j()["prompt"].get<std::string>().find("Hello world") != std::string::npos);
  auto tm = http_post(port, "/tokenize", chat_body("hi", 1));
  REQUIRE(tm.status == 200);
  CHECK(tm.j()["count"].get<int>() > 3);
  std::string metrics = http_get(port, "/metrics").body;
  for (const char* name : {"pagoda_requests_running", "pagoda_requests_waiting", "pagoda_kv_blocks_used",
                           "pagoda_kv_blocks_cached", "pagoda_prompt_tokens_total",
                           "pagoda_generation_tokens_total", "pagoda_prefix_cache_hit_tokens_total",
                           "pagoda_preemptions_total"})
    CHECK(metric_value(metrics, name) >= 0);
  CHECK(metrics.find("pagoda_time_to_first_token_seconds_bucket") != std::string::npos);
  CHECK(metrics.find("pagoda_inter_token_latency_seconds_bucket") != std::string::npos);
}

TEST_CASE("e2e: completion and chat shapes with exact usage", "[e2e]") {
  int port = shared_server().port();
  json req = {{"model", "model"}, {"prompt", "Once upon a time"}, {"max_tokens", 8},
              {"temperature", 0}, {"logprobs", 2}, {"ignore_eos", true}};
  auto r = http_post(port, "/v1/completions", req);
  REQUIRE(r.status == 200);
  json j = r.j();
  CHECK(j["object"] == "text_completion");
  CHECK(j["id"].get<std::string>().rfind("cmpl-", 0) == 0);
  CHECK(j["model"] == "model");
  json c = j["choices"][0];
  CHECK(c["index"] == 0);
  CHECK(c["finish_reason"] == "length");
  CHECK(c["logprobs"]["tokens"].size() == 8);
  CHECK(c["logprobs"]["top_logprobs"][0].size() <= 2);
  int prompt_tokens = http_post(port, "/tokenize", json{{"prompt", "Once upon a time"}}).j()["count"];
  CHECK(j["usage"]["prompt_tokens"] == prompt_tokens);
  CHECK(j["usage"]["completion_tokens"] == 8);
  CHECK(j["usage"]["total_tokens"] == prompt_tokens + 8);

  json chat = chat_body("Tell me a story", 6);
  chat["logprobs"] = true;
  chat["top_logprobs"] = 1;
  chat["ignore_eos"] = true;
  auto cr = http_post(port, "/v1/chat/completions", chat);
  REQUIRE(cr.status == 200);
  json cj = cr.j();
  CHECK(cj["object"] == "chat.completion");
  CHECK(cj["choices"][0]["message"]["role"] == "assistant");
  CHECK(cj["choices"][0]["message"]["content"].is_string());
  CHECK(cj["choices"][0]["logprobs"]["content"].size() == 6);
  CHECK(cj["usage"]["completion_tokens"] == 6);
  json tk = chat_body("Tell me a story", 1);
  CHECK(cj["usage"]["prompt_tokens"] == http_post(port, "/tokenize", tk).j()["count"]);
}

TEST_CASE("e2e: streaming equals non-streaming under greedy", "[e2e]") {
  int port = shared_server().port();
  for (bool chat : {false, true}) {
    INFO("chat=" << chat);
    json req = chat ? chat_body("Count to ten", 24)
                    : json{{"prompt", {"The sky is", "Water is"}}, {"max_tokens", 24}, {"temperature", 0}};
    req["n"] = 2;
    req["stop"] = {"\n\n"};
    std::string path = chat ? "/v1/chat/completions" : "/v1/completions";
    auto full = http_post(port, path, req);
    REQUIRE(full.status == 200);
    json fj = full.j();
    req["stream"] = true;
    req["stream_options"] = {{"include_usage", true}};
    auto st = http_post(port, path, req);
    REQUIRE(st.status == 200);
    auto ev = sse_events(st.body);
    REQUIRE(ev.size() >= 3);
    CHECK(ev.back() == "[DONE]");
    json usage = json::parse(ev[ev.size() - 2]);
    CHECK(usage["choices"].empty());
    CHECK(usage["usage"] == fj["usage"]);
    size_t n = fj["choices"].size();
    auto texts = sse_texts(ev, n);
    std::vector<std::string> finish(n);
    std::vector<bool> role_first(n, false), seen(n, false);
    for (size_t i = 0; i + 1 < ev.size(); ++i) {
      json e = json::parse(ev[i]);
      for (const json& c : e["choices"]) {
        size_t idx = c["index"];
        if (chat && !seen[idx]) role_first[idx] = c["delta"].value("role", "") == "assistant";
        seen[idx] = true;
        if (!c["finish_reason"].is_null()) finish[idx] = c["finish_reason"];
      }
    }
    for (size_t i = 0; i < n; ++i) {
      json fc = fj["choices"][i];
      CHECK(texts[i] == (chat ? fc["message"]["content"] : fc["text"]));
      CHECK(finish[i] == fc["finish_reason"]);
      if (chat) CHECK(role_first[i]);
    }
  }
}

TEST_CASE("e2e: seeds reproduce", "[e2e]") {
  int port = shared_server().port();
  json req = {{"prompt", "Random words:"}, {"max_tokens", 12}, {"temperature", 1.0},
              {"seed", 1234}, {"ignore_eos", true}};
  auto a = http_post(port, "/v1/completions", req).j();
  auto b = http_post(port, "/v1/completions", req).j();
  CHECK(a["choices"][0]["text"] == b["choices"][0]["text"]);
  req["seed"] = 99;
  req["max_tokens"] = 32;
  auto c = http_post(port, "/v1/completions", req).j();
  req["seed"] = 1234;
  auto d = http_post(port, "/v1/completions", req).j();
  CHECK(c["choices"][0]["text"] != d["choices"][0]["text"]);
}

TEST_CASE("e2e: every bad input gets its status and error body", "[e2e]") {
  int port = shared_server().port();
  auto msgs = json::array({{{"role", "user"}, {"content", "hi"}}});
  auto post = [&](const std::string& path, const json& body) { return http_post(port, path, body); };
  check_error(http_post(port, "/v1/chat/completions", std::string("{\"messages\": [")), 400, "");
  check_error(post("/v1/chat/completions", {{"messages", msgs}, {"max_tokens", -1}}), 400, "max_tokens");
  check_error(post("/v1/chat/completions", {{"messages", msgs}, {"temperature", -1}}), 400, "temperature");
  check_error(post("/v1/chat/completions", {{"messages", msgs}, {"top_p", 0}}), 400, "top_p");
  check_error(post("/v1/chat/completions", {{"messages", msgs}, {"top_p", 2}}), 400, "top_p");
  check_error(post("/v1/chat/completions", {{"messages", msgs}, {"n", 0}}), 400, "n");
  check_error(post("/v1/chat/completions", {{"messages", msgs}, {"n", "2"}}), 400, "n");
  check_error(post("/v1/chat/completions", {{"messages", msgs}, {"temperature", "hot"}}), 400, "temperature");
  check_error(post("/v1/chat/completions", {{"model", "model"}}), 400, "messages");
  check_error(post("/v1/chat/completions", {{"messages", json::array()}}), 400, "messages");
  check_error(post("/v1/chat/completions", {{"messages", {{{"role", "robot"}, {"content", "x"}}}}}), 400,
              "messages[0].role");
  check_error(post("/v1/completions", {{"max_tokens", 2}}), 400, "prompt");
  check_error(post("/v1/completions", {{"prompt", {1, 2, 999999}}}), 400, "prompt");
  std::string long_prompt;
  for (int i = 0; i < 600; ++i) long_prompt += "hello ";
  check_error(post("/v1/completions", {{"prompt", long_prompt}}), 400, "prompt", "context_length_exceeded");
  check_error(post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", long_prompt}}}}}),
              400, "messages", "context_length_exceeded");
  check_error(post("/v1/completions", {{"prompt", std::string(9 << 20, 'a')}}), 413, "");
  check_error(http_get(port, "/v1/nothing"), 404, "");
  check_error(http_post(port, "/v1/models", json::object()), 404, "");
  // Unknown fields are ignored.
  auto ok = post("/v1/chat/completions", {{"messages", msgs}, {"max_tokens", 1}, {"whatever", {1}}});
  CHECK(ok.status == 200);
  CHECK(http_get(port, "/health").status == 200);
}

TEST_CASE("e2e: a disconnecting client frees its blocks", "[e2e]") {
  int port = shared_server().port();
  REQUIRE(wait_for([&] { return metric(port, "pagoda_requests_running") == 0; }, 10));
  // With context shift on, this generation only ends when the client leaves.
  json body = {{"prompt", "Go on forever"}, {"max_tokens", 1000000}, {"ignore_eos", true}, {"temperature", 0}};
  SECTION("streaming") {
    body["stream"] = true;
    raw_exchange(port, raw_post("/v1/completions", body.dump()), 300, std::chrono::milliseconds(3000));
  }
  SECTION("non-streaming") {
    std::thread t([&] { raw_exchange(port, raw_post("/v1/completions", body.dump()), 1 << 20, std::chrono::milliseconds(1500)); });
    CHECK(wait_for([&] { return metric(port, "pagoda_kv_blocks_used") > 0; }, 3));
    t.join();
  }
  CHECK(wait_for([&] {
    return metric(port, "pagoda_kv_blocks_used") == 0 && metric(port, "pagoda_requests_running") == 0;
  }, 10));
  CHECK(metric(port, "pagoda_request_aborted_total") >= 1);
}

TEST_CASE("e2e: 32 concurrent streaming clients match their sequential runs", "[e2e]") {
  int port = shared_server().port();
  std::vector<json> reqs;
  for (int i = 0; i < 32; ++i)
    reqs.push_back({{"prompt", "Client " + std::to_string(i) + " says"}, {"max_tokens", 16},
                    {"temperature", 0}, {"ignore_eos", true}, {"stream", true}});
  std::vector<std::string> sequential;
  for (auto& r : reqs) {
    auto res = http_post(port, "/v1/completions", r);
    REQUIRE(res.status == 200);
    sequential.push_back(sse_texts(sse_events(res.body), 1)[0]);
  }
  std::vector<std::future<HttpResult>> fs;
  for (auto& r : reqs)
    fs.push_back(std::async(std::launch::async, [&, r] { return http_post(port, "/v1/completions", r); }));
  for (size_t i = 0; i < fs.size(); ++i) {
    HttpResult res = fs[i].get();
    INFO(res.body);
    REQUIRE(res.status == 200);
    auto ev = sse_events(res.body);
    CHECK(ev.back() == "[DONE]");
    CHECK(sse_texts(ev, 1)[0] == sequential[i]);
  }
}

TEST_CASE("e2e: API key from a file gives 401 everywhere but /health", "[e2e]") {
  std::string keyfile = e2e_dir() + "/key.txt";
  std::ofstream(keyfile) << "e2e-secret\n";
  auto s = start_server({"--api-key-file", keyfile});
  int port = s->port();
  CHECK(http_get(port, "/health").status == 200);
  check_error(http_get(port, "/v1/models"), 401, "");
  check_error(http_get(port, "/metrics"), 401, "");
  check_error(http_post(port, "/v1/chat/completions", chat_body("hi", 1)), 401, "");
  check_error(http_post(port, "/v1/completions", json{{"prompt", "a"}}, "e2e-secreT"), 401, "");
  check_error(http_post(port, "/tokenize", json{{"prompt", "a"}}), 401, "");
  check_error(http_get(port, "/nope"), 401, "");
  CHECK(http_post(port, "/v1/chat/completions", chat_body("hi", 1), "e2e-secret").status == 200);
  CHECK(s->stop() == 0);
}

TEST_CASE("e2e: a flood beyond --max-queue gets 429 with Retry-After, then recovers", "[e2e]") {
  auto s = start_server({"--max-seqs", "2", "--max-queue", "2"});
  int port = s->port();
  std::vector<std::future<HttpResult>> fs;
  for (int i = 0; i < 24; ++i)
    fs.push_back(std::async(std::launch::async, [port] {
      return http_post(port, "/v1/completions",
                       json{{"prompt", "flood"}, {"max_tokens", 48}, {"ignore_eos", true}});
    }));
  int ok = 0, limited = 0;
  for (auto& f : fs) {
    HttpResult r = f.get();
    if (r.status == 200) ++ok;
    if (r.status != 200 && r.status != 429) UNSCOPED_INFO("unexpected " << r.status << ": " << r.body);
    if (r.status == 429) {
      ++limited;
      CHECK(r.headers.count("Retry-After") == 1);
      CHECK(r.j()["error"]["type"] == "rate_limit_error");
    }
  }
  CHECK(ok >= 4);
  CHECK(limited >= 1);
  CHECK(ok + limited == 24);
  CHECK(wait_for([&] { return metric(port, "pagoda_kv_blocks_used") == 0; }, 10));
  CHECK(http_post(port, "/v1/completions", json{{"prompt", "after"}, {"max_tokens", 2}}).status == 200);
  CHECK(s->stop() == 0);
}

TEST_CASE("e2e: SIGTERM finishes in-flight requests and exits 0", "[e2e]") {
  auto s = start_server({"--shutdown-grace", "20", "--log-format", "json"});
  int port = s->port();
  auto f = std::async(std::launch::async, [port] {
    return http_post(port, "/v1/completions",
                     json{{"prompt", "last words"}, {"max_tokens", 400}, {"ignore_eos", true}});
  });
  REQUIRE(wait_for([&] { return metric(port, "pagoda_requests_running") > 0; }, 5));
  s->signal(SIGTERM);
  // Once the server has taken the signal (a fixed sleep is not enough on a loaded host: the
  // request below was once served 200 before the drain began), no new work is taken: the
  // connection is refused (status 0) or answered 503.
  REQUIRE(wait_for([&] { return http_get(port, "/health").status != 200; }, 30));
  int late = http_post(port, "/v1/completions", json{{"prompt", "too late"}, {"max_tokens", 1}}).status;
  CHECK((late == 0 || late == 503));
  int code = s->stop(0, 30);  // wait only: a second SIGTERM would cancel at once
  HttpResult r = f.get();
  CHECK(r.status == 200);
  CHECK(r.j()["usage"]["completion_tokens"] == 400);
  CHECK(code == 0);
  // JSON logs: every line is an object; the access line carries the request's numbers.
  std::string log = s->log();
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);) {
    INFO(line);
    if (!line.empty()) CHECK(!json::parse(line, nullptr, false).is_discarded());
  }
  CHECK(log.find("\"msg\":\"access\"") != std::string::npos);
  CHECK(log.find("\"completion_tokens\":400") != std::string::npos);
  CHECK(log.find("\"kv_capacity_tokens\"") != std::string::npos);
}

TEST_CASE("e2e: SIGTERM mid-flight: plain and streamed requests all finish in full", "[e2e]") {
  // A grace far beyond the work (under a second here): a loaded host must not turn it into
  // a cancel; the server stops as soon as every answer is written.
  auto s = start_server({"--shutdown-grace", "120"});
  int port = s->port();
  // Several lengths, so that answers are written while others still generate, and the last
  // one is written after the engine has nothing left (where the drain once stopped early).
  struct Sent {
    int max_tokens;
    bool stream;
    std::future<HttpResult> result;
  };
  std::vector<Sent> sent;
  for (int max_tokens : {20, 60, 120})
    for (bool stream : {false, true}) {
      json body = {{"prompt", "in flight"}, {"max_tokens", max_tokens}, {"ignore_eos", true}};
      if (stream) body.update({{"stream", true}, {"stream_options", {{"include_usage", true}}}});
      sent.push_back({max_tokens, stream, std::async(std::launch::async, [port, body] {
                        return http_post(port, "/v1/completions", body);
                      })});
    }
  REQUIRE(wait_for([&] { return metric(port, "pagoda_requests_running") >= (double)sent.size(); }, 10));
  s->signal(SIGTERM);
  int code = s->stop(0, 150);  // wait only
  for (Sent& r : sent) {
    HttpResult res = r.result.get();
    INFO("max_tokens " << r.max_tokens << (r.stream ? ", streamed: " : ": ") << res.body.substr(0, 300));
    REQUIRE(res.status == 200);
    if (!r.stream) {
      CHECK(res.j()["usage"]["completion_tokens"] == r.max_tokens);
      continue;
    }
    std::vector<std::string> events = sse_events(res.body);
    REQUIRE(events.size() >= 2);
    CHECK(events.back() == "[DONE]");
    json usage = json::parse(events[events.size() - 2])["usage"];
    CHECK(usage["completion_tokens"] == r.max_tokens);
  }
  CHECK(code == 0);
}

TEST_CASE("e2e: --config file with flags winning; --system-prompt-file is shared", "[e2e]") {
  std::string dir = e2e_dir();
  std::string sys_text =
      "You are a helpful assistant for the pagoda project. You answer briefly, you never make "
      "things up, and you always explain your reasoning in one or two short sentences.";
  std::ofstream(dir + "/system.txt") << sys_text;
  std::ofstream(dir + "/config.json") << json{{"cors_origins", "http://app.example"}, {"max_seqs", 3},
                                               {"system_prompt_file", dir + "/system.txt"},
                                               {"served_model_name", "from-config"},
                                               {"log_format", "json"}}
                                             .dump();
  auto s = start_server({"--config", dir + "/config.json", "--served-model-name", "from-flag"});
  int port = s->port();
  json m = http_get(port, "/v1/models").j();
  CHECK(m["data"][0]["id"] == "from-flag");       // the flag wins
  // The config applies where no flag overrides it: CORS for the configured origin only.
  httplib::Client c("127.0.0.1", port);
  auto ok = c.Get("/v1/models", {{"Origin", "http://app.example"}});
  REQUIRE(ok);
  CHECK(ok->get_header_value("Access-Control-Allow-Origin") == "http://app.example");
  auto other = c.Get("/v1/models", {{"Origin", "http://evil.example"}});
  REQUIRE(other);
  CHECK(!other->has_header("Access-Control-Allow-Origin"));
  double hits0 = metric(port, "pagoda_prefix_cache_hit_tokens_total");
  auto r = http_post(port, "/v1/completions",
                     json{{"prompt", sys_text + " Question: why?"}, {"max_tokens", 2}});
  REQUIRE(r.status == 200);
  CHECK(r.j()["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>() >= 16);
  CHECK(metric(port, "pagoda_prefix_cache_hit_tokens_total") >= hits0 + 16);
  CHECK(s->stop() == 0);
}

TEST_CASE("e2e: a second SIGTERM cancels in-flight requests and still exits 0", "[e2e]") {
  auto s = start_server({"--shutdown-grace", "60"});
  int port = s->port();
  auto f = std::async(std::launch::async, [port] {
    return http_post(port, "/v1/completions",
                     json{{"prompt", "endless"}, {"max_tokens", 1000000}, {"ignore_eos", true}});
  });
  REQUIRE(wait_for([&] { return metric(port, "pagoda_requests_running") > 0; }, 5));
  s->signal(SIGTERM);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto t0 = std::chrono::steady_clock::now();
  int code = s->stop(SIGTERM, 30);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
  HttpResult r = f.get();
  check_error(r, 503, "", "aborted");
  CHECK(code == 0);
}

TEST_CASE("e2e: stop strings cut the text, streaming and not", "[e2e]") {
  int port = shared_server().port();
  json req = {{"prompt", "A long time ago"}, {"max_tokens", 40}, {"temperature", 0}, {"ignore_eos", true}};
  std::string full = http_post(port, "/v1/completions", req).j()["choices"][0]["text"];
  REQUIRE(full.size() > 20);
  // A stop string taken from the middle of the greedy output: the answer must end just before
  // its first occurrence.
  size_t at = full.size() / 2;
  auto ascii = [&](size_t i) { return i + 3 <= full.size() && !(full[i] & 0x80) && !(full[i + 1] & 0x80) && !(full[i + 2] & 0x80); };
  while (at < full.size() && !ascii(at)) ++at;
  REQUIRE(ascii(at));
  std::string stop = full.substr(at, 3);
  std::string expect = full.substr(0, full.find(stop));
  req["stop"] = {stop};
  json r = http_post(port, "/v1/completions", req).j();
  CHECK(r["choices"][0]["text"] == expect);
  CHECK(r["choices"][0]["finish_reason"] == "stop");
  req["stream"] = true;
  auto ev = sse_events(http_post(port, "/v1/completions", req).body);
  CHECK(sse_texts(ev, 1)[0] == expect);
  // echo prepends the prompt.
  json e = http_post(port, "/v1/completions",
                     json{{"prompt", "Echo me"}, {"max_tokens", 2}, {"echo", true}}).j();
  CHECK(e["choices"][0]["text"].get<std::string>().rfind("Echo me", 0) == 0);
}
