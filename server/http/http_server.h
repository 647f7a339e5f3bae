// The HTTP front: the connection loop (connection_loop.h) owns the sockets and receives each
// request in full; a worker then runs it through cpp-httplib's routing (process_request over a
// BufferedStream) to the API's routes (api_service.h). Here: API-key auth, CORS, OpenAI-shaped
// error bodies for everything refused before a handler (404, 413, 429, ...), the access log,
// /health, /metrics and /version, and draining on shutdown.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <httplib.h>

#include "server/http/access_log.h"
#include "server/http/api_service.h"
#include "server/http/connection_loop.h"

namespace pagoda::server {

class Metrics;

class HttpServer {
 public:
  struct Options {
    std::string api_key;                    // empty: no auth
    std::vector<std::string> cors_origins;  // "*" allows any; empty: no CORS headers
    size_t max_body_bytes = 8 << 20;
    int worker_threads = 64;
    int max_connections = 4096;
    double header_timeout_s = 10;
    double body_min_rate = 1024;       // bytes/s
    double keep_alive_timeout_s = 60;
    double write_timeout_s = 30;
    size_t max_buffered_body_bytes = 0;  // 0: four times max_body_bytes
    // GET /version answers this JSON text (the server's name, version and flags) when not empty.
    std::string version_json;
  };

  // `routes`: the API's endpoints, besides the server's own /health and /metrics.
  HttpServer(Options opts, Metrics& metrics, std::vector<ApiRoute> routes);
  ~HttpServer();

  // The endpoints go live once the model is loaded; until then every route but /health (and
  // /metrics) answers 503.
  void set_service(std::shared_ptr<ApiService> service);

  // Binds (port 0 picks a free one); returns the port, or throws std::runtime_error.
  int bind(const std::string& host, int port);
  // Serves until stop() (at once if stop() came first); returns when the listener has closed
  // and the workers are done.
  void run();
  // Requests from now on get 503 (/health: 503 "draining") and close their connection; idle
  // connections close. The listener stays open until stop(), so /health stays reachable.
  void begin_drain();
  bool draining() const { return draining_; }
  // Closes the listener and every connection, and ends open streams.
  void stop();
  // The graceful stop: begin_drain(), then waits until every request accepted so far has been
  // answered, its response written in full, for at most `grace_s` (then closes the listener,
  // accepting what the kernel has completed first, and waits for those too); past that, aborts the
  // service's work in flight (ApiService::abort_all) and waits up to `abort_wait_s` more for
  // those answers; then stop(). `pause(s)` waits up to s seconds and returns true to end the
  // grace at once (a second signal). Returns whether every accepted request was answered.
  bool drain_and_stop(double grace_s, double abort_wait_s, const std::function<bool(double)>& pause);
  // The connection loop's figures (also in /metrics).
  ConnectionStats connection_stats() const { return loop_->stats(); }

 private:
  void install_routes(const std::vector<ApiRoute>& routes);
  bool authorized(const httplib::Request& req) const;
  void add_cors(const httplib::Request& req, httplib::Response& res) const;
  std::shared_ptr<ApiService> service() const;
  // The access record of a request being served: made when routing begins, handed to the
  // route, taken back by the logger once the response is written.
  std::shared_ptr<AccessRecord> open_record(const httplib::Request& req);
  std::shared_ptr<AccessRecord> record_of(const httplib::Request& req);
  std::shared_ptr<AccessRecord> close_record(const httplib::Request& req);
  // The connection loop's hooks (http_transport.cpp).
  bool serve(ServedRequest& r);
  std::string refusal_response(const Refusal& r);
  bool at_capacity() const;

  // cpp-httplib's routing without its sockets: process_request serves one request from any
  // Stream. The library's streamed responses stop when they see no listening socket, so the
  // loop's is set as the library's while serving.
  class Server : public httplib::Server {
   public:
    using httplib::Server::process_request;
    void set_listening(bool on, int fd) { svr_sock_ = on ? fd : INVALID_SOCKET; }
  };

  Options opts_;
  Metrics& metrics_;
  Server svr_;
  std::unique_ptr<ConnectionLoop> loop_;
  int listen_fd_ = -1;  // bound, not yet handed to the loop
  mutable std::mutex mu_;
  std::shared_ptr<ApiService> service_;
  // Keyed by the request object, which lives on its worker's stack from routing to logging.
  std::mutex records_mu_;
  std::unordered_map<const httplib::Request*, std::shared_ptr<AccessRecord>> records_;
  std::atomic<bool> draining_{false};
  bool stopped_ = false;    // guarded by mu_
  bool listening_ = false;  // guarded by mu_
};

// Compares two strings in time that depends only on their lengths, not on where they differ.
bool constant_time_equal(const std::string& a, const std::string& b);

}  // namespace pagoda::server
