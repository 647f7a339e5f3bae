// The HTTP front: cpp-httplib set-up, routing to Handlers, API-key auth, body size limit, CORS,
// OpenAI-shaped error bodies for everything the library rejects itself (404, 413, ...),
// the access log, and draining on shutdown. Also the two helpers handlers need from the
// transport: an SSE writer and a probe telling whether the client has gone away.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

namespace pagoda::server {

class Handlers;
class Metrics;

// Tells whether the client of the request being served has closed its connection.
// cpp-httplib 0.11 does not expose the socket to handlers, so the probe finds it once: the
// process's socket whose local and peer addresses match the request's (only the connection
// serving this request can match while the request is being served).
class ConnectionProbe {
 public:
  explicit ConnectionProbe(const httplib::Request& req);
  // True once the peer has closed or reset the connection (pending pipelined data is not a
  // close). Returns false when the socket could not be identified.
  bool closed() const;
  bool found() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// Writes Server-Sent Events into a chunked response. Every write reports whether the client
// is still there.
class SseWriter {
 public:
  explicit SseWriter(httplib::DataSink& sink) : sink_(sink) {}
  bool event(const nlohmann::json& data);  // "data: {json}\n\n"
  bool done();                              // "data: [DONE]\n\n" and the end of the body

 private:
  bool write(const std::string& s);
  httplib::DataSink& sink_;
};

// Writes an OpenAI error body with its status.
void send_error(httplib::Response& res, int status, const std::string& message,
                const std::string& type, const std::string& param = "",
                const std::string& code = "");

class HttpServer {
 public:
  struct Options {
    std::string api_key;                    // empty: no auth
    std::vector<std::string> cors_origins;  // "*" allows any; empty: no CORS headers
    size_t max_body_bytes = 8 << 20;
    int worker_threads = 64;
    double read_timeout_s = 30;
  };

  HttpServer(Options opts, Metrics& metrics);
  ~HttpServer();

  // The endpoints go live once the model is loaded; until then every route but /health (and
  // /metrics) answers 503.
  void set_handlers(std::shared_ptr<Handlers> handlers);

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
  void install_routes();
  bool authorized(const httplib::Request& req) const;
  void add_cors(const httplib::Request& req, httplib::Response& res) const;
  std::shared_ptr<Handlers> handlers() const;

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
  std::shared_ptr<Handlers> handlers_;
  std::atomic<bool> draining_{false};
  bool stopped_ = false;    // guarded by mu_
  bool listening_ = false;  // guarded by mu_
};

// Compares two strings in time that depends only on their lengths, not on where they differ.
bool constant_time_equal(const std::string& a, const std::string& b);

}  // namespace pagoda::server
