// `pagoda bench` against a misbehaving server: errors are counted by kind, the tool neither
// hangs nor crashes, and the reports are produced.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include <catch2/catch.hpp>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "tests/support/http_test_util.h"
#include "tests/support/run_command.h"
#include "tests/support/test_files.h"

using pagoda::testing::read_file;

namespace {

std::string sse(const nlohmann::json& j) { return "data: " + j.dump() + "\n\n"; }

nlohmann::json chunk(const std::string& text) {
  return {{"object", "chat.completion.chunk"}, {"choices", {{{"index", 0}, {"delta", {{"content", text}}}}}}};
}

// Request k gets, by k % 4: a 500, a 429, a stream cut after two chunks, a complete stream.
void install_routes(httplib::Server& srv, std::atomic<int>& counter) {
  srv.Get("/v1/models", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"object":"list","data":[{"id":"fake","object":"model"}]})", "application/json");
  });
  srv.Post("/v1/chat/completions", [&counter](const httplib::Request&, httplib::Response& res) {
    const int k = counter.fetch_add(1);
    if (k % 4 == 0) {
      res.status = 500;
      res.set_content(R"({"error":{"message":"boom","type":"server_error"}})", "application/json");
    } else if (k % 4 == 1) {
      res.status = 429;
      res.set_header("Retry-After", "1");
      res.set_content(R"({"error":{"message":"busy","type":"rate_limit"}})", "application/json");
    } else {
      const bool cut = k % 4 == 2;
      res.set_chunked_content_provider("text/event-stream", [cut](size_t, httplib::DataSink& sink) {
        for (const char* t : {"hel", "lo"}) {
          const std::string s = sse(chunk(t));
          sink.write(s.data(), s.size());
        }
        if (cut) return false;  // drop the connection mid-stream
        const std::string tail = sse({{"choices", nlohmann::json::array()},
                                      {"usage", {{"prompt_tokens", 7}, {"completion_tokens", 2}}}}) +
                                 "data: [DONE]\n\n";
        sink.write(tail.data(), tail.size());
        sink.done();
        return true;
      });
    }
  });
}

}  // namespace

TEST_CASE("bench counts errors by kind against a faulty server", "[bench][e2e]") {
  httplib::Server srv;
  std::atomic<int> counter{0};
  install_routes(srv, counter);
  const int port = srv.bind_to_any_port("127.0.0.1");
  REQUIRE(port > 0);
  std::thread th([&] { srv.listen_after_bind(); });

  const pagoda::testing::ScratchDir scratch("bench-faults");
  const std::string& dir = scratch.str();
  const std::string cmd = std::string("timeout 60 ") + PAGODA_BINARY + " bench --url http://127.0.0.1:" +
                          std::to_string(port) + " --requests 20 --users 4 --no-progress --json " + dir +
                          "/r.json --html " + dir + "/r.html > " + dir + "/out.txt 2>&1";
  const int rc = std::system(cmd.c_str());
  srv.stop();
  th.join();

  INFO(read_file(dir + "/out.txt"));
  REQUIRE(WIFEXITED(rc));
  CHECK(WEXITSTATUS(rc) == 3);  // finished, and says that requests failed

  const auto report = nlohmann::json::parse(read_file(dir + "/r.json"));
  const auto& p = report["points"][0];
  CHECK(p["requests"] == 20);
  CHECK(p["succeeded"] == 5);
  CHECK(p["failed"] == 15);
  CHECK(p["errors"]["http_5xx"] == 5);
  CHECK(p["errors"]["http_429"] == 5);
  CHECK(p["errors"]["incomplete_stream"] == 5);
  CHECK(p["completion_tokens"] == 10);
  CHECK(p["prompt_tokens"] == 35);

  const std::string html = read_file(dir + "/r.html");
  CHECK(html.find("<svg") != std::string::npos);
  // Self-contained: nothing is loaded from elsewhere (the page names the URL it measured only as text).
  for (const char* external : {"src=", "href=", "<link", "<script", "url(", "@import"})
    CHECK(html.find(external) == std::string::npos);
}

TEST_CASE("bench reports a server that is not there", "[bench][e2e]") {
  const int port = pagoda::testing::free_port();  // free a moment ago, no listener now
  const std::string cmd = std::string("timeout 30 ") + PAGODA_BINARY + " bench --url http://127.0.0.1:" +
                          std::to_string(port) + " --requests 3 --no-progress > /dev/null 2>&1";
  const int rc = std::system(cmd.c_str());
  REQUIRE(WIFEXITED(rc));
  CHECK(WEXITSTATUS(rc) == 1);
}

TEST_CASE("bench against a server that wants a key says so", "[bench][e2e]") {
  httplib::Server srv;
  srv.Get("/v1/models", [](const httplib::Request&, httplib::Response& res) {
    res.status = 401;
    res.set_content(R"({"error":{"message":"no key","type":"authentication_error"}})", "application/json");
  });
  const int port = srv.bind_to_any_port("127.0.0.1");
  REQUIRE(port > 0);
  std::thread th([&] { srv.listen_after_bind(); });
  const auto r = pagoda::testing::run_command(std::string("timeout 30 ") + PAGODA_BINARY +
                                              " bench --url http://127.0.0.1:" + std::to_string(port) +
                                              " --requests 3 --no-progress 2>&1");
  srv.stop();
  th.join();
  INFO(r.out);
  CHECK(r.status == 1);
  CHECK(r.out.find("401: pass --api-key") != std::string::npos);
  CHECK(r.out.find("cannot reach") == std::string::npos);
}
