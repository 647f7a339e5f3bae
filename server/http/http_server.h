// The HTTP front: cpp-httplib set-up, routing to the API's routes (api_service.h), API-key
// auth, body size limit, CORS, OpenAI-shaped error bodies for everything the library rejects
// itself (404, 413, ...), the access log, and draining on shutdown.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <httplib.h>

#include "server/http/access_log.h"
#include "server/http/api_service.h"

namespace pagoda::server {

class Metrics;

class HttpServer {
 public:
  struct Options {
    std::string api_key;                    // empty: no auth
    std::vector<std::string> cors_origins;  // "*" allows any; empty: no CORS headers
    size_t max_body_bytes = 8 << 20;
    int worker_threads = 64;
    double read_timeout_s = 30;
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
  // Stops accepting connections (the listener closes; run() returns once the requests in
  // flight are done); requests on connections already open get 503.
  void begin_drain();
  bool draining() const { return draining_; }
  // Closes the listener and ends open streams.
  void stop();

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

  // cpp-httplib with access to its listening socket: the library listens with a backlog of 5,
  // which drops connections when a load test opens hundreds at once; bind() raises it.
  class Server : public httplib::Server {
   public:
    int listen_fd() const { return (int)svr_sock_; }
  };

  Options opts_;
  Metrics& metrics_;
  Server svr_;
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
