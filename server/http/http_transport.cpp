// HttpServer's socket side (see http_server.h): binding the listener, the connection loop's
// hooks (serving one buffered request through httplib's routing, a refusal as response bytes,
// the admission check), draining and stopping.
#include <netdb.h>
#include <netinet/in.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <stdexcept>
#include <thread>

#include "server/http/api_error.h"
#include "server/http/buffered_stream.h"
#include "server/http/connection_probe.h"
#include "server/http/http_server.h"
#include "server/http/metrics.h"

namespace pagoda::server {

namespace {

const char* reason_phrase(int status) {
  switch (status) {
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Payload Too Large";
    case 414: return "URI Too Long";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return status >= 500 ? "Server Error" : "Client Error";
  }
}

// Every connection is a descriptor: the soft limit is raised to the hard one, and a limit
// below --max-connections is reported.
void raise_fd_limit(int max_connections) {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
  if (rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    getrlimit(RLIMIT_NOFILE, &rl);
  }
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < (rlim_t)max_connections + 64)
    log_warn("the open-file limit is below --max-connections; connections beyond it get 503",
             {{"nofile", (uint64_t)rl.rlim_cur}, {"max_connections", max_connections}});
}

}  // namespace

int HttpServer::bind(const std::string& host, int port) {
  raise_fd_limit(opts_.max_connections);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string where = host + ":" + std::to_string(port);
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0)
    throw std::runtime_error("cannot listen on " + where + " (unknown address)");
  int fd = -1;
  for (addrinfo* a = found; a && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    // The queue of connections not yet accepted (capped by net.core.somaxconn).
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, SOMAXCONN) != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0) throw std::runtime_error("cannot listen on " + where + " (address in use or not available)");
  sockaddr_storage sa{};
  socklen_t len = sizeof sa;
  getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  int bound = sa.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6&>(sa).sin6_port)
                                       : ntohs(reinterpret_cast<sockaddr_in&>(sa).sin_port);
  std::lock_guard<std::mutex> lk(mu_);
  if (listen_fd_ >= 0) ::close(listen_fd_);
  listen_fd_ = fd;
  return bound;
}

void HttpServer::run() {
  int fd;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stopped_ || listen_fd_ < 0) return;
    listening_ = true;
    fd = listen_fd_;
    listen_fd_ = -1;  // the loop's now
    svr_.set_listening(true, fd);
  }
  loop_->run(fd);
}

void HttpServer::begin_drain() {
  draining_ = true;
  loop_->begin_drain();
}

void HttpServer::stop() {
  std::lock_guard<std::mutex> lk(mu_);
  stopped_ = true;
  svr_.set_listening(false, -1);  // streamed responses end at their next chunk
  loop_->stop();
}

bool HttpServer::drain_and_stop(double grace_s, double abort_wait_s,
                                const std::function<bool(double)>& pause) {
  using Clock = std::chrono::steady_clock;
  begin_drain();
  // Until nothing accepted is left unanswered (the loop counts what it has received, what the
  // workers hold and what they are still writing), `within_s` has passed, or `wait` returns true.
  auto all_answered = [this](double within_s, const std::function<bool(double)>& wait) {
    constexpr double kPollSeconds = 0.02;
    const auto deadline = Clock::now() + std::chrono::duration<double>(within_s);
    for (;;) {
      if (loop_->unanswered() == 0) return true;
      double left = std::chrono::duration<double>(deadline - Clock::now()).count();
      if (left <= 0 || wait(std::min(left, kPollSeconds))) return loop_->unanswered() == 0;
    }
  };
  bool answered = all_answered(grace_s, pause);
  if (answered) {
    // /health said "draining" until now. Closing the listener before the last count means no
    // request can arrive between that count and the stop.
    constexpr double kListenerCloseWaitSeconds = 2;
    loop_->close_listener();
    answered = all_answered(kListenerCloseWaitSeconds, pause);
  }
  // The loop's count for the log; "not counted yet" when a second signal cut the wait before
  // the loop's first count (unanswered() is -1 then).
  auto unanswered_field = [this]() -> nlohmann::ordered_json {
    const int n = loop_->unanswered();
    return n < 0 ? nlohmann::ordered_json("not counted yet") : nlohmann::ordered_json(n);
  };
  if (!answered) {
    std::shared_ptr<ApiService> h = service();
    log_warn("cancelling requests still in flight",
             {{"unanswered", unanswered_field()}, {"in_flight", h ? h->inflight_seqs() : 0}});
    if (h) h->abort_all();
    std::function<bool(double)> sleep = [](double s) {
      std::this_thread::sleep_for(std::chrono::duration<double>(s));
      return false;
    };
    answered = all_answered(abort_wait_s, sleep);
    if (!answered) log_warn("stopping with requests unanswered", {{"unanswered", unanswered_field()}});
  }
  stop();
  return answered;
}

HttpServer::~HttpServer() {
  stop();
  loop_.reset();  // waits for the workers, which use this object
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

bool HttpServer::serve(ServedRequest& r) {
  BufferedStream strm(r.fd, std::move(r.bytes), r.addresses, opts_.write_timeout_s);
  const bool close = r.close_connection || draining_;
  bool closed = false;
  const RequestHead& head = r.head;
  const int fd = r.fd;
  bool ok = svr_.process_request(strm, close, closed, [&head, fd](httplib::Request& req) {
    // httplib percent-decodes header values and reads them up to a NUL; auth needs them as
    // sent. "100 Continue" was already answered by the loop, which has the body.
    for (const char* auth : {"Authorization", "x-api-key"}) {
      req.headers.erase(auth);
      for (const auto& [name, value] : head.headers)
        if (strcasecmp(name.c_str(), auth) == 0) req.headers.emplace(auth, value);
    }
    req.headers.erase("Expect");
    req.headers.erase(kSocketHeader);  // only the server says which socket is the request's
    req.headers.emplace(kSocketHeader, std::to_string(fd));
  });
  return ok && !closed && !close;
}

std::string HttpServer::refusal_response(const Refusal& r) {
  httplib::Request req;
  if (r.head) {
    req.method = r.head->method;
    req.path = r.head->path();
    for (const auto& [name, value] : r.head->headers) req.headers.emplace(name, value);
  }
  httplib::Response res;
  add_cors(req, res);
  send_error(res, ApiError(r.status, r.message, error_type_for_status(r.status), "", r.code),
             error_shape_for_path(req.path));
  if (r.status == 503) res.set_header("Retry-After", "1");
  metrics_.record_status(r.status);
  if (r.head) {
    AccessRecord rec;
    log_access(req.method, req.path, r.status, rec, 0);
  }
  std::string out = "HTTP/1.1 " + std::to_string(r.status) + " " + reason_phrase(r.status) + "\r\n";
  for (const auto& [name, value] : res.headers) out += name + ": " + value + "\r\n";
  out += "Content-Length: " + std::to_string(res.body.size()) + "\r\n";
  if (r.close) out += "Connection: close\r\n";
  out += "\r\n";
  out += res.body;
  return out;
}

// Once the engine has as many sequences in flight as it admits, a request that finds no idle
// worker gets 429 at once instead of waiting for one.
bool HttpServer::at_capacity() const {
  std::shared_ptr<ApiService> h = service();
  if (!h) return false;
  const int limit = h->admission_limit();
  return limit > 0 && h->inflight_seqs() >= limit;
}

}  // namespace pagoda::server
