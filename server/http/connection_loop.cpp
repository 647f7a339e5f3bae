// ConnectionLoop: accepting, reading and handing requests to workers on one epoll thread (see
// connection_loop.h); the deadlines and refusals are in connection_deadlines.cpp.
#include "server/http/connection_loop.h"

#include <fcntl.h>
#include <malloc.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <iterator>
#include <stdexcept>

#include "server/http/connection.h"

namespace pagoda::server {

namespace {

constexpr size_t kReadChunk = 64 << 10;
constexpr size_t kReadPerEvent = 1 << 20;  // then other connections get their turn
constexpr int kAcceptPerEvent = 256;
constexpr size_t kTrimAfterBytes = 1 << 20;  // a request this large gives its memory back

bool is_probe(const RequestHead& h) {
  if (h.method != "GET") return false;
  std::string p = h.path();
  return p == "/health" || p == "/metrics";
}

}  // namespace

ConnectionLoop::ConnectionLoop(ConnectionLimits limits, Hooks hooks)
    : limits_(std::move(limits)),
      hooks_(std::move(hooks)),
      probe_pool_(2),
      pool_(std::max(1, limits_.workers)),
      scratch_(kReadChunk) {
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_fd_ < 0 || wake_fd_ < 0) throw std::runtime_error("cannot create the connection loop's epoll");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = wake_fd_;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
}

ConnectionLoop::~ConnectionLoop() {
  stop();
  pool_.shutdown();
  probe_pool_.shutdown();
  take_returns();
  while (!conns_.empty()) close_connection(*conns_.begin()->second);
  if (listen_fd_ >= 0) ::close(listen_fd_);
  if (spare_fd_ >= 0) ::close(spare_fd_);
  ::close(wake_fd_);
  ::close(epoll_fd_);
}

void ConnectionLoop::wake() {
  uint64_t one = 1;
  ssize_t n = ::write(wake_fd_, &one, sizeof one);
  (void)n;  // the counter only saturates when the loop is already awake
}

void ConnectionLoop::begin_drain() {
  draining_ = true;
  wake();
}

void ConnectionLoop::close_listener() {
  close_listener_ = true;
  wake();
}

void ConnectionLoop::stop() {
  stopping_ = true;
  wake();
}

ConnectionStats ConnectionLoop::stats() const {
  ConnectionStats s;
  s.open = open_;
  s.waiting = pool_.queued() + probe_pool_.queued() + budget_waiting_;
  s.busy = busy_;
  s.body_bytes_held = held_stat_;
  s.rejected = rejected_;
  s.evicted = evicted_;
  s.slow_headers = slow_headers_;
  s.slow_bodies = slow_bodies_;
  s.refused = refused_;
  return s;
}

void ConnectionLoop::run(int listen_fd) {
  running_ = true;
  listen_fd_ = listen_fd;
  fcntl(listen_fd_, F_SETFL, fcntl(listen_fd_, F_GETFL) | O_NONBLOCK);
  spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = listen_fd_;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);

  epoll_event events[256];
  auto last_check = Clock::now();
  while (!stopping_) {
    int n = epoll_wait(epoll_fd_, events, 256, 100);
    for (int i = 0; i < n && !stopping_; ++i) {
      int fd = events[i].data.fd;
      if (fd == listen_fd_) {
        accept_ready();
      } else if (fd == wake_fd_) {
        uint64_t v;
        while (::read(wake_fd_, &v, sizeof v) > 0) {
        }
      } else if (auto it = conns_.find(fd); it != conns_.end()) {
        read_ready(*it->second);
      }
    }
    take_returns();
    if (draining_ && !drain_applied_) {
      drain_applied_ = true;
      // Kept-alive connections with nothing pending close now; new ones get to send their
      // request (answered 503 with "Connection: close"): closing them would reset a request
      // already on its way.
      std::vector<Connection*> idle;
      char probe;
      for (auto& [fd, c] : conns_)
        if (c->in_idle && ::recv(fd, &probe, 1, MSG_PEEK | MSG_DONTWAIT) < 0 && errno == EAGAIN)
          idle.push_back(c.get());
      for (Connection* c : idle) close_connection(*c);
    }
    if (close_listener_ && listen_fd_ >= 0) accept_backlog_and_close_listener();
    // Counted after this turn's reads and returns, so that a request whose bytes came before
    // the drain is seen before the server may stop.
    if (draining_) {
      unanswered_ = count_unanswered();
      if (listen_fd_ < 0) counted_closed_ = true;
    }
    if (Clock::now() - last_check >= std::chrono::milliseconds(100)) {
      last_check = Clock::now();
      check_deadlines();
      if (listen_paused_ && listen_fd_ >= 0) {
        if (spare_fd_ < 0) spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
        epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
        listen_paused_ = false;
      }
    }
    wake_budget_waiters();
  }

  // Stopping: no new connections; those being served are shut down so that their writes fail
  // at once, the rest closed; then the workers are waited for.
  close_listen_fd();
  std::vector<Connection*> all;
  for (auto& [fd, c] : conns_) all.push_back(c.get());
  for (Connection* c : all) {
    if (c->state == Connection::State::Serving)
      ::shutdown(c->fd, SHUT_RDWR);
    else
      close_connection(*c);
  }
  pool_.shutdown();
  probe_pool_.shutdown();
  take_returns();
  running_ = false;
}

int ConnectionLoop::count_unanswered() {
  // Connections the kernel has completed and the loop not yet accepted may carry a request
  // sent before the drain: they count until accepted (and then by what they sent).
  int n = backlog_waiting() ? 1 : 0;
  char probe;
  const auto now = Clock::now();
  for (auto& [fd, c] : conns_) {
    if (c->state != Connection::State::Reading) {
      ++n;  // waiting for body memory, with a worker, or a refusal not yet read
    } else if (!c->buf.empty() || !c->framer.fresh() ||
               ::recv(fd, &probe, 1, MSG_PEEK | MSG_DONTWAIT) > 0) {
      ++n;  // part of a request received, or bytes not yet read (a connection just accepted)
    } else if (!c->served_any && now - c->since < kFreshSendWindow) {
      ++n;  // just accepted, its request likely on the way
    }
  }
  return n;
}

bool ConnectionLoop::backlog_waiting() const {
  pollfd backlog{listen_fd_, POLLIN, 0};
  return listen_fd_ >= 0 && ::poll(&backlog, 1, 0) > 0;
}

void ConnectionLoop::accept_backlog_and_close_listener() {
  // accept_ready takes up to kAcceptPerEvent per call; a backlog is at most somaxconn deep.
  for (int round = 0; round < 1024 && !listen_paused_ && backlog_waiting(); ++round) accept_ready();
  close_listen_fd();
}

void ConnectionLoop::close_listen_fd() {
  if (listen_fd_ < 0) return;
  if (!listen_paused_) epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, listen_fd_, nullptr);
  ::close(listen_fd_);
  listen_fd_ = -1;
}

// ---- accepting --------------------------------------------------------------------------------

void ConnectionLoop::accept_ready() {
  for (int i = 0; i < kAcceptPerEvent; ++i) {
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR) continue;
      if ((errno == EMFILE || errno == ENFILE) && spare_fd_ >= 0) {
        // Out of descriptors: the spare one makes room to answer (and close) one connection, so
        // that the backlog drains instead of the loop spinning on it.
        ::close(spare_fd_);
        fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) refuse_connection(fd);
        spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
      }
      if ((errno == EMFILE || errno == ENFILE) && spare_fd_ < 0) {
        // Not even a spare: stop watching the listener until the next deadline check rather
        // than spin on it.
        epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, listen_fd_, nullptr);
        listen_paused_ = true;
      }
      return;
    }
    if (open_ >= limits_.max_connections) {
      if (idle_.empty()) {
        refuse_connection(fd);
        continue;
      }
      ++evicted_;
      close_connection(*idle_.front());
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    auto c = std::make_unique<Connection>(fd, limits_.framing);
    if (!peer_addresses(fd, &c->addr)) {
      ::close(fd);
      continue;
    }
    c->since = Clock::now();
    Connection& ref = *c;
    conns_[fd] = std::move(c);
    ++open_;
    watch(ref, true);
  }
}

// ---- reading ----------------------------------------------------------------------------------

void ConnectionLoop::read_ready(Connection& c) {
  if (c.state == Connection::State::Lingering) {
    linger_read(c);
    return;
  }
  if (c.state != Connection::State::Reading) return;
  const bool was_idle = c.buf.empty() && c.framer.fresh();
  size_t total = 0;
  while (total < kReadPerEvent) {
    // Through one scratch buffer: a connection's own buffer grows only by what arrived (a
    // thousand slow clients must not each cost a 64 KiB buffer).
    ssize_t n = ::recv(c.fd, scratch_.data(), scratch_.size(), 0);
    if (n > 0) c.buf.append(scratch_.data(), (size_t)n);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n <= 0) {
      // Closed by the peer (or reset): what is buffered may still hold a request, which is
      // answered before the connection closes (a client that half-closes after sending).
      c.peer_closed = true;
      if (n < 0) c.buf.clear();
      break;
    }
    total += (size_t)n;
    if (was_idle && total == (size_t)n) {
      if (c.in_idle) idle_.erase(c.idle_pos), c.in_idle = false;
      if (c.served_any) c.since = Clock::now();  // the header deadline runs from the first byte
    }
    if (!advance(c)) return;  // closed
    if (c.state != Connection::State::Reading) break;
  }
  if (total == 0 && !c.peer_closed) return;
  if (c.peer_closed && c.state == Connection::State::Reading) {
    if (!advance(c)) return;
    if (c.state == Connection::State::Reading || c.state == Connection::State::WaitingBudget)
      close_connection(c);
  }
}

bool ConnectionLoop::advance(Connection& c) {
  for (;;) {
    if (c.framer.fresh()) {
      size_t skip = 0;  // blank lines before a request line are ignored (RFC 9112, 2.2)
      while (skip + 1 < c.buf.size() && c.buf[skip] == '\r' && c.buf[skip + 1] == '\n') skip += 2;
      if (skip) c.buf.erase(0, skip);
    }
    if (c.buf.empty()) return true;
    switch (c.framer.advance(c.buf)) {
      case RequestFramer::Step::NeedMore: return true;
      case RequestFramer::Step::Error: {
        Refusal r;
        r.status = c.framer.error().status;
        r.message = c.framer.error().message;
        r.head = c.framer.head_done() ? &c.framer.head() : nullptr;
        refuse(c, r);
        return false;
      }
      case RequestFramer::Step::HeadDone: {
        c.head_done_at = Clock::now();
        const RequestHead& h = c.framer.head();
        if (h.body == RequestHead::Body::Length) c.buf.reserve(h.head_bytes + (size_t)h.content_length);
        if (!reserve_body(c, false)) {
          const size_t size = body_reservation(h);
          if (budget_waiting_bytes_ + size > limits_.max_buffered_body_bytes) {
            // The line for body memory is already a budget long: refusing now (with
            // Retry-After) beats a long wait that may end in the same answer.
            Refusal r;
            r.status = 503;
            r.message = "The server is busy receiving other large request bodies; retry shortly.";
            r.code = "body_memory_busy";
            r.head = &h;
            refuse(c, r);
            return false;
          }
          budget_waiting_bytes_ += size;
          c.state = Connection::State::WaitingBudget;
          c.since = Clock::now();
          watch(c, false);
          c.waiter_pos = budget_waiters_.insert(budget_waiters_.end(), &c);
          ++budget_waiting_;
          return true;
        }
        send_continue(c);
        break;
      }
      case RequestFramer::Step::Complete:
        if (!dispatch(c)) return false;
        if (c.state != Connection::State::Reading) return true;
        break;  // answered at once (429) with the connection kept: pipelined bytes may follow
    }
  }
}

// ---- handing requests to workers --------------------------------------------------------------

bool ConnectionLoop::dispatch(Connection& c) {
  const size_t n = c.framer.request_bytes();
  std::string bytes;
  if (n == c.buf.size()) {
    bytes.swap(c.buf);
  } else {
    bytes = c.buf.substr(0, n);
    c.buf.erase(0, n);
  }
  auto head = std::make_shared<RequestHead>(c.framer.head());
  c.framer.reset();
  if (head->body == RequestHead::Body::Chunked) bytes = unchunked_request(*head, bytes);
  const bool probe = is_probe(*head);
  if (!probe && pool_.idle() <= 0 && hooks_.at_capacity && hooks_.at_capacity()) {
    // Queueing for a worker would hide the request from the engine's admission bound: refuse
    // it now, as the engine would.
    release_body(c);
    Refusal r;
    r.status = 429;
    r.message = "The server is at capacity; retry shortly.";
    r.code = "queue_full";
    r.head = head.get();
    r.close = !head->keep_alive || draining_ || c.peer_closed;
    if (!refuse(c, r)) return false;
    c.since = Clock::now();
    return true;
  }
  c.state = Connection::State::Serving;
  watch(c, false);
  const bool close = !head->keep_alive || draining_ || c.peer_closed;
  Connection* conn = &c;
  WorkerPool::Job job = [this, conn, head, bytes = std::move(bytes), close](bool run) mutable {
    bool keep = false;
    if (run) {
      ++busy_;
      const size_t size = bytes.size();
      ServedRequest req{*head, std::move(bytes), conn->fd, conn->addr, close};
      try {
        keep = hooks_.serve(req);
      } catch (...) {
        keep = false;
      }
      req.bytes = std::string();
      --busy_;
      if (size >= kTrimAfterBytes) malloc_trim(0);  // a large body's pages go back to the system
    }
    {
      const Return back{conn, keep, Clock::now()};
      std::lock_guard<std::mutex> lk(returns_mu_);
      returns_.push_back(back);
    }
    wake();
  };
  (probe ? probe_pool_ : pool_).push(std::move(job));
  return true;
}

void ConnectionLoop::take_returns() {
  std::vector<Return> back;
  {
    std::lock_guard<std::mutex> lk(returns_mu_);
    back.swap(returns_);
  }
  for (const Return& r : back) returned(r);
}

void ConnectionLoop::returned(const Return& r) {
  Connection& c = *r.conn;
  const bool keep = r.keep;
  release_body(c);
  c.state = Connection::State::Reading;
  c.since = r.done;
  if (!keep || stopping_ || draining_ || c.peer_closed) {
    close_connection(c);
    return;
  }
  c.served_any = true;
  watch(c, true);
  if (!c.buf.empty()) {
    if (!advance(c)) return;  // pipelined requests, served in order
    return;
  }
  // Oldest idle first, by when each answer was written: workers hand connections back in
  // whatever order they get the lock, so the one idle longest is not always the first back.
  auto pos = idle_.end();
  while (pos != idle_.begin() && (*std::prev(pos))->since > c.since) --pos;
  c.idle_pos = idle_.insert(pos, &c);
  c.in_idle = true;
}

// ---- body memory ------------------------------------------------------------------------------

size_t ConnectionLoop::body_reservation(const RequestHead& h) const {
  size_t size = h.body == RequestHead::Body::Length    ? (size_t)h.content_length
                : h.body == RequestHead::Body::Chunked ? limits_.framing.max_body_bytes
                                                       : 0;
  return size <= kSmallBody ? 0 : size;  // small bodies are bounded by the connection count
}

bool ConnectionLoop::reserve_body(Connection& c, bool waiter) {
  const size_t size = body_reservation(c.framer.head());
  if (size == 0) return true;  // small bodies are bounded by the connection count
  // First come, first served: a newcomer does not pass the requests already waiting.
  if (!waiter && !budget_waiters_.empty()) return false;
  if (body_bytes_held_ > 0 && body_bytes_held_ + size > limits_.max_buffered_body_bytes) return false;
  body_bytes_held_ += size;
  held_stat_ = body_bytes_held_;
  c.body_reserved = size;
  return true;
}

void ConnectionLoop::release_body(Connection& c) {
  if (!c.body_reserved) return;
  body_bytes_held_ -= c.body_reserved;
  held_stat_ = body_bytes_held_;
  c.body_reserved = 0;
}

void ConnectionLoop::leave_budget_line(Connection& c) {
  budget_waiters_.erase(c.waiter_pos);
  --budget_waiting_;
  budget_waiting_bytes_ -= body_reservation(c.framer.head());
}

void ConnectionLoop::wake_budget_waiters() {
  while (!budget_waiters_.empty()) {
    Connection& c = *budget_waiters_.front();
    if (!reserve_body(c, true)) return;
    leave_budget_line(c);
    c.state = Connection::State::Reading;
    c.head_done_at = Clock::now();  // the body's grace starts now
    watch(c, true);
    send_continue(c);
    if (advance(c) && c.peer_closed && c.state == Connection::State::Reading) close_connection(c);
  }
}

// ---- sockets ----------------------------------------------------------------------------------

void ConnectionLoop::watch(Connection& c, bool on) {
  if (on == c.watched) return;
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.fd = c.fd;
  epoll_ctl(epoll_fd_, on ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, c.fd, &ev);
  c.watched = on;
}

void ConnectionLoop::close_connection(Connection& c) {
  if (c.in_idle) idle_.erase(c.idle_pos);
  if (c.state == Connection::State::WaitingBudget) leave_budget_line(c);
  release_body(c);
  watch(c, false);
  const int fd = c.fd;
  ::close(fd);
  --open_;
  conns_.erase(fd);  // destroys c
}

}  // namespace pagoda::server
