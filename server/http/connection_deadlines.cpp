// ConnectionLoop's clock and its own answers: the header deadline, the body's minimum rate, the
// keep-alive timeout, the wait for body memory, and the responses the loop writes without a
// worker (refusals, 100 Continue). Refused connections are half-closed and drained for a moment
// before they close, so that the answer is read rather than lost to a reset.
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "server/http/connection.h"
#include "server/http/connection_loop.h"

namespace pagoda::server {

namespace {

constexpr double kLingerSeconds = 2;

// Writes what fits without blocking; true when all of it went out.
bool send_now(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      done += (size_t)n;
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      return false;
    }
  }
  return true;
}

// Reads and drops what the client has sent; false once it closed (or reset) its side.
bool discard_input(int fd) {
  char scratch[16 << 10];
  for (;;) {
    ssize_t n = ::recv(fd, scratch, sizeof scratch, MSG_DONTWAIT);
    if (n > 0) continue;
    if (n < 0 && errno == EINTR) continue;
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
}

double seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

void ConnectionLoop::refuse_connection(int fd) {
  ++rejected_;
  Refusal r;
  r.status = 503;
  r.message = "Too many open connections; retry shortly.";
  r.code = "too_many_connections";
  send_now(fd, hooks_.refusal_response(r));
  ::shutdown(fd, SHUT_WR);
  discard_input(fd);  // closing with unread input would reset the connection over the answer
  ::close(fd);
}

bool ConnectionLoop::refuse(Connection& c, const Refusal& r) {
  ++refused_;
  const bool sent = send_now(c.fd, hooks_.refusal_response(r));
  if (!r.close && sent) return true;
  release_body(c);
  if (c.state == Connection::State::WaitingBudget) leave_budget_line(c);
  c.buf = std::string();
  ::shutdown(c.fd, SHUT_WR);
  c.state = Connection::State::Lingering;
  c.since = Clock::now();
  watch(c, true);
  linger_read(c);
  return false;
}

void ConnectionLoop::linger_read(Connection& c) {
  if (!discard_input(c.fd)) close_connection(c);
}

void ConnectionLoop::send_continue(Connection& c) {
  const RequestHead& h = c.framer.head();
  if (h.expect_continue && h.body != RequestHead::Body::None && c.buf.size() == h.head_bytes)
    send_now(c.fd, "HTTP/1.1 100 Continue\r\n\r\n");
}

void ConnectionLoop::check_deadlines() {
  const auto now = Clock::now();
  const double header_s = limits_.header_timeout_s;
  // Decided first, acted on after: acting closes connections, which changes conns_.
  enum class Act { Close, SlowHeaders, SlowBody, NoBudget };
  std::vector<std::pair<Connection*, Act>> due;
  for (auto& [fd, cp] : conns_) {
    Connection& c = *cp;
    const double age = seconds(now - c.since);
    switch (c.state) {
      case Connection::State::Reading:
        if (c.buf.empty() && c.framer.fresh()) {
          // Idle: a used connection waits for its next request up to the keep-alive timeout; a
          // new one must start its first request within the header timeout.
          if (age > (c.served_any ? limits_.keep_alive_timeout_s : header_s))
            due.emplace_back(&c, c.served_any ? Act::Close : Act::SlowHeaders);
        } else if (!c.framer.head_done()) {
          if (age > header_s) due.emplace_back(&c, Act::SlowHeaders);
        } else if (limits_.body_min_rate > 0) {
          double received = (double)c.framer.body_bytes_received(c.buf.size());
          if (seconds(now - c.head_done_at) > header_s + received / limits_.body_min_rate)
            due.emplace_back(&c, Act::SlowBody);
        }
        break;
      case Connection::State::WaitingBudget:
        // The line is at most one budget of bodies long, so this is rarely reached: a wait
        // for body memory is bounded like the headers' (then 503 with Retry-After).
        if (age > header_s) due.emplace_back(&c, Act::NoBudget);
        break;
      case Connection::State::Lingering:
        if (age > kLingerSeconds) due.emplace_back(&c, Act::Close);
        break;
      case Connection::State::Serving: break;
    }
  }
  for (auto& [c, act] : due) {
    Refusal r;
    r.head = c->framer.head_done() ? &c->framer.head() : nullptr;
    switch (act) {
      case Act::Close: close_connection(*c); continue;
      case Act::SlowHeaders:
        ++slow_headers_;
        if (c->buf.empty()) {  // never said anything: nobody to answer
          close_connection(*c);
          continue;
        }
        r.status = 408;
        r.message = "The request headers did not arrive within " + std::to_string((int)header_s) + " s.";
        r.code = "header_timeout";
        break;
      case Act::SlowBody:
        ++slow_bodies_;
        r.status = 408;
        r.message = "The request body arrived slower than " +
                    std::to_string((long long)limits_.body_min_rate) + " bytes/s.";
        r.code = "body_too_slow";
        break;
      case Act::NoBudget:
        r.status = 503;
        r.message = "The server is busy receiving other large request bodies; retry shortly.";
        r.code = "body_memory_busy";
        break;
    }
    refuse(*c, r);
  }
}

}  // namespace pagoda::server
