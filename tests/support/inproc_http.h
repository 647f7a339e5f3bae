// An in-process server::HttpServer on a free loopback port, for tests of the HTTP layer and
// handlers over real HTTP without a `pagoda serve` process.
#pragma once

#include <chrono>
#include <memory>
#include <thread>

#include "server/http/http_server.h"
#include "server/openai/handlers.h"
#include "server/http/metrics.h"
#include "tests/support/http_test_util.h"

namespace pagoda::testing {

// Serves `handlers` on 127.0.0.1 (a port the kernel picks) on a thread of its own, from
// construction until destruction. Construction returns once /health answers (or after about
// two seconds, leaving the test to fail on its first request). `metrics` and `handlers` must
// outlive it.
class InProcHttpServer {
 public:
  InProcHttpServer(const server::HttpServer::Options& opts, server::Metrics& metrics,
                   std::shared_ptr<server::Handlers> handlers)
      : http_(std::make_unique<server::HttpServer>(opts, metrics, server::Handlers::routes())) {
    http_->set_service(std::move(handlers));
    port_ = http_->bind("127.0.0.1", 0);
    thread_ = std::thread([this] { http_->run(); });
    for (int i = 0; i < 200 && http_get(port_, "/health").status != 200; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ~InProcHttpServer() {
    http_->stop();
    thread_.join();
  }
  InProcHttpServer(const InProcHttpServer&) = delete;
  InProcHttpServer& operator=(const InProcHttpServer&) = delete;

  // The loopback port it listens on.
  int port() const { return port_; }
  server::HttpServer& server() { return *http_; }

 private:
  std::unique_ptr<server::HttpServer> http_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace pagoda::testing
