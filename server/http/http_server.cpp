#include "server/http/http_server.h"

#include <dirent.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <strings.h>

#include <cerrno>
#include <cstdlib>
#include <stdexcept>
#include <thread>

#include "server/http/access_log.h"
#include "server/openai/handlers.h"
#include "server/http/metrics.h"
#include "server/openai/openai_protocol.h"

namespace pagoda::server {

// ---- ConnectionProbe ----------------------------------------------------------------------

namespace {

int port_of(const sockaddr_storage& sa) {
  if (sa.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(sa).sin_port);
  if (sa.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(sa).sin6_port);
  return -1;
}

bool address_of(const sockaddr_storage& sa, socklen_t len, std::string* ip, int* port) {
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&sa), len, host, sizeof host, serv,
                  sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return false;
  *ip = host;
  *port = std::atoi(serv);
  return true;
}

}  // namespace

ConnectionProbe::ConnectionProbe(const httplib::Request& req) {
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return;
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    long fd = std::strtol(e->d_name, &end, 10);
    if (*end || end == e->d_name || fd == dirfd(dir)) continue;
    struct stat st;
    if (fstat((int)fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_storage local{}, peer{};
    socklen_t llen = sizeof local, plen = sizeof peer;
    // Ports first: cheap, and they rule out nearly every other socket.
    if (getsockname((int)fd, reinterpret_cast<sockaddr*>(&local), &llen) != 0 ||
        port_of(local) != req.local_port)
      continue;
    if (getpeername((int)fd, reinterpret_cast<sockaddr*>(&peer), &plen) != 0 ||
        port_of(peer) != req.remote_port)
      continue;
    std::string lip, pip;
    int lport = -1, pport = -1;
    if (!address_of(local, llen, &lip, &lport) || !address_of(peer, plen, &pip, &pport)) continue;
    if (lport == req.local_port && pport == req.remote_port && pip == req.remote_addr &&
        lip == req.local_addr) {
      fd_ = (int)fd;
      break;
    }
  }
  closedir(dir);
}

bool ConnectionProbe::closed() const {
  if (fd_ < 0) return false;
  pollfd p{fd_, POLLIN | POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
  if (p.revents & POLLIN) {
    char c;
    ssize_t n = recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) return true;  // orderly close
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return true;
  }
  return false;
}

// ---- SSE ------------------------------------------------------------------------------------

bool SseWriter::write(const std::string& s) {
  if (sink_.is_writable && !sink_.is_writable()) return false;
  return sink_.write(s.data(), s.size());
}

bool SseWriter::event(const nlohmann::json& data) {
  return write("data: " + dump_json(data) + "\n\n");
}

bool SseWriter::done() {
  bool ok = write("data: [DONE]\n\n");
  sink_.done();
  return ok;
}

// ---- errors, auth -----------------------------------------------------------------------------

void send_error(httplib::Response& res, int status, const std::string& message,
                const std::string& type, const std::string& param, const std::string& code) {
  res.status = status;
  res.set_content(dump_json(error_body(ApiError(status, message, type, param, code))),
                  "application/json");
}

bool constant_time_equal(const std::string& a, const std::string& b) {
  size_t n = std::max(a.size(), b.size());
  volatile unsigned char acc = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    unsigned char x = i < a.size() ? (unsigned char)a[i] : 0;
    unsigned char y = i < b.size() ? (unsigned char)b[i] : 0;
    acc = acc | (unsigned char)(x ^ y);
  }
  return acc == 0;
}

namespace {

const char* status_type(int status) {
  switch (status) {
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 408: return "timeout_error";
    case 413: return "invalid_request_error";
    case 429: return "rate_limit_error";
    case 503: return "service_unavailable_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

double ms_since(std::chrono::steady_clock::time_point t) {
  if (t == std::chrono::steady_clock::time_point{}) return 0;
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

// ---- HttpServer -------------------------------------------------------------------------------

HttpServer::HttpServer(Options opts, Metrics& metrics) : opts_(std::move(opts)), metrics_(metrics) {
  int threads = std::max(4, opts_.worker_threads);
  svr_.new_task_queue = [threads] { return new httplib::ThreadPool((size_t)threads); };
  svr_.set_payload_max_length(opts_.max_body_bytes);
  svr_.set_read_timeout((time_t)opts_.read_timeout_s, 0);
  svr_.set_keep_alive_timeout(5);
  svr_.set_tcp_nodelay(true);
  install_routes();
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::set_handlers(std::shared_ptr<Handlers> h) {
  std::lock_guard<std::mutex> lk(mu_);
  handlers_ = std::move(h);
}

std::shared_ptr<Handlers> HttpServer::handlers() const {
  std::lock_guard<std::mutex> lk(mu_);
  return handlers_;
}

bool HttpServer::authorized(const httplib::Request& req) const {
  if (opts_.api_key.empty()) return true;
  const std::string auth = req.get_header_value("Authorization");
  constexpr size_t kPrefix = 7;  // "Bearer ", the scheme being case-insensitive (RFC 7235)
  bool scheme_ok = auth.size() >= kPrefix && strncasecmp(auth.c_str(), "Bearer ", kPrefix) == 0;
  // The key is compared even when the scheme is wrong, so timing tells nothing either way.
  bool key_ok = constant_time_equal(scheme_ok ? auth.substr(kPrefix) : std::string(), opts_.api_key);
  return scheme_ok && key_ok;
}

void HttpServer::add_cors(const httplib::Request& req, httplib::Response& res) const {
  // Idempotent: an error page may pass here after the pre-routing handler did.
  if (opts_.cors_origins.empty() || res.has_header("Access-Control-Allow-Origin")) return;
  std::string origin = req.get_header_value("Origin");
  bool any = false, match = false;
  for (const std::string& o : opts_.cors_origins) {
    any |= o == "*";
    match |= !origin.empty() && o == origin;
  }
  if (any) {
    res.set_header("Access-Control-Allow-Origin", "*");
  } else if (match) {
    res.set_header("Access-Control-Allow-Origin", origin);
    res.set_header("Vary", "Origin");
  } else {
    return;
  }
  res.set_header("Access-Control-Expose-Headers", "X-Request-Id, Retry-After");
}

void HttpServer::install_routes() {
  // Runs before every route: times the request, answers CORS preflights, checks the key, and
  // refuses work while loading or draining.
  svr_.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    AccessRecord& rec = current_access_record();
    rec.reset();
    rec.start = std::chrono::steady_clock::now();
    add_cors(req, res);
    if (req.method == "OPTIONS") {
      res.status = 204;
      res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
      res.set_header("Access-Control-Allow-Headers",
                     "Authorization, Content-Type, OpenAI-Organization, OpenAI-Project, "
                     "X-Stainless-*, *");
      res.set_header("Access-Control-Max-Age", "600");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (req.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
    if (!authorized(req)) {
      send_error(res, 401, "Incorrect or missing API key. Send 'Authorization: Bearer <key>'.",
                 "authentication_error", "", "invalid_api_key");
      res.set_header("WWW-Authenticate", "Bearer");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (draining_) {
      send_error(res, 503, "The server is shutting down.", "service_unavailable_error", "",
                 "shutting_down");
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });

  // Routes that need the model answer 503 until it is loaded.
  auto route = [this](void (Handlers::*fn)(const httplib::Request&, httplib::Response&)) {
    return [this, fn](const httplib::Request& req, httplib::Response& res) {
      std::shared_ptr<Handlers> h = handlers();
      if (!h) {
        send_error(res, 503, "The model is still loading.", "service_unavailable_error", "",
                   "model_loading");
        res.set_header("Retry-After", "1");
        return;
      }
      ((*h).*fn)(req, res);
    };
  };
  svr_.Get("/health", [this](const httplib::Request& req, httplib::Response& res) {
    std::shared_ptr<Handlers> h = handlers();
    if (draining_) {
      res.status = 503;
      res.set_content(R"({"status":"shutting_down"})", "application/json");
    } else if (!h) {
      res.status = 503;
      res.set_content(R"({"status":"loading"})", "application/json");
    } else {
      h->health(req, res);
    }
  });
  svr_.Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
    std::shared_ptr<Handlers> h = handlers();
    res.set_content(metrics_.render(h ? h->engine_stats() : EngineStats{}),
                    "text/plain; version=0.0.4; charset=utf-8");
  });
  svr_.Get("/v1/models", route(&Handlers::models));
  svr_.Get("/v1/models/(.+)", route(&Handlers::model));
  svr_.Post("/v1/completions", route(&Handlers::completions));
  svr_.Post("/v1/chat/completions", route(&Handlers::chat_completions));
  svr_.Post("/tokenize", route(&Handlers::tokenize));
  svr_.Post("/detokenize", route(&Handlers::detokenize));

  // Anything the library answers with an empty error body (404 unknown route, 413 too large,
  // 400 unparsable request line, ...) gets the OpenAI error shape.
  svr_.set_error_handler(httplib::Server::HandlerWithResponse(
      [this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    add_cors(req, res);
    std::string msg;
    switch (res.status) {
      case 404: msg = "Unknown route: " + req.method + " " + req.path; break;
      case 413:
        msg = "The request body is larger than the limit of " +
              std::to_string(opts_.max_body_bytes) + " bytes.";
        break;
      case 400: msg = "Malformed HTTP request."; break;
      default: msg = "HTTP error " + std::to_string(res.status) + ".";
    }
    send_error(res, res.status, msg, status_type(res.status), "",
               res.status == 404 ? "not_found" : "");
    return httplib::Server::HandlerResponse::Handled;
  }));
  svr_.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string msg = "Internal server error.";
        try {
          if (ep) std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          msg = std::string("Internal server error: ") + e.what();
        } catch (...) {
        }
        send_error(res, 500, msg, "server_error");
      });
  // After the response is written: status counters and the access line.
  svr_.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    AccessRecord& rec = current_access_record();
    int status = rec.status_override ? rec.status_override : res.status;
    metrics_.record_status(status);
    if (req.path != "/health" && req.path != "/metrics")
      log_access(req.method, req.path, res.status, rec, ms_since(rec.start));
    rec.reset();
  });
}

int HttpServer::bind(const std::string& host, int port) {
  int bound = port == 0 ? svr_.bind_to_any_port(host) : (svr_.bind_to_port(host, port) ? port : -1);
  if (bound < 0)
    throw std::runtime_error("cannot listen on " + host + ":" + std::to_string(port) +
                             " (address in use or not available)");
  // listen() again on a listening socket just resizes its queue (capped by net.core.somaxconn).
  if (::listen(svr_.listen_fd(), SOMAXCONN) != 0)
    log_warn("could not raise the listen backlog", {{"errno", errno}});
  return bound;
}

void HttpServer::begin_drain() {
  draining_ = true;
  std::lock_guard<std::mutex> lk(mu_);
  // accept() then fails and the library leaves its accept loop, closing the listener, and
  // waits for its workers: connections already open are served to the end.
  if (listening_ && !stopped_) ::shutdown(svr_.listen_fd(), SHUT_RDWR);
}

void HttpServer::run() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stopped_) return;
    listening_ = true;
  }
  svr_.listen_after_bind();
}

void HttpServer::stop() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopped_ = true;
    if (!listening_) return;  // run() will not start listening now
  }
  // run() may be between setting listening_ and the library marking itself running.
  for (int i = 0; i < 200 && !svr_.is_running(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  svr_.stop();
}

}  // namespace pagoda::server
