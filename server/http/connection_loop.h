// The server's sockets, on one epoll thread: accepting (with a bound on open connections),
// reading each request in full with no worker involved (headers under a deadline, the body at a
// minimum rate, framing checked by request_framing.h), bounding the body bytes held at once,
// and handing complete requests to a worker (worker_pool.h). A connection holds a worker only
// while one of its requests is being served; idle keep-alive connections and slow clients cost
// a file descriptor and a buffer, never a thread. The loop answers itself what needs no handler:
// malformed requests (400/411/413/...), slow clients (408), too many connections (503), and
// requests that would wait for a worker while the engine's admission is full (429).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "server/http/buffered_stream.h"
#include "server/http/request_framing.h"
#include "server/http/worker_pool.h"

namespace pagoda::server {

struct Connection;

struct ConnectionLimits {
  int max_connections = 4096;       // open at once; beyond: the oldest idle one is closed, else 503
  double header_timeout_s = 10;     // a request's line and headers, from its first byte (or from
                                    // the connection's opening); also the grace before the body
                                    // rate is checked
  double body_min_rate = 1024;      // bytes/s a body must average, after the grace
  double keep_alive_timeout_s = 60; // an idle connection between requests is closed after this
  double write_timeout_s = 30;      // a response write that makes no progress this long fails
  size_t max_buffered_body_bytes = 32 << 20;  // body bytes held at once (received or served);
                                              // beyond, a body waits in a line as long as this
                                              // (up to header_timeout_s), else 503 at once
  int workers = 64;
  FramingLimits framing;
};

// The loop's figures, for /metrics.
struct ConnectionStats {
  int open = 0;                 // connections open now
  int waiting = 0;              // complete requests waiting for a worker, plus requests
                                // waiting for body memory: accepted, not started
  int busy = 0;                 // connections whose request a worker is serving
  uint64_t body_bytes_held = 0; // of max_buffered_body_bytes
  uint64_t rejected = 0;        // connections refused with 503 (too many open)
  uint64_t evicted = 0;         // idle keep-alive connections closed to make room
  uint64_t slow_headers = 0;    // cut: headers not complete within the header timeout
  uint64_t slow_bodies = 0;     // cut: body below the minimum rate
  uint64_t refused = 0;         // requests the loop answered itself (4xx/5xx, 429)
};

// A request the loop answers without a worker.
struct Refusal {
  int status = 400;
  std::string message;
  std::string code;                 // OpenAI error code; empty = null
  const RequestHead* head = nullptr;  // null when the head could not be parsed
  bool close = true;                // "Connection: close", and the connection is closed
};

// One complete request, on a worker.
struct ServedRequest {
  const RequestHead& head;          // as the loop parsed it (raw header values)
  std::string bytes;                // the request exactly: head and body
  int fd;
  const PeerAddresses& addresses;
  bool close_connection;            // the answer must say "Connection: close"
};

class ConnectionLoop {
 public:
  struct Hooks {
    // On a worker: serves one request (writes the response to the socket). Returns whether the
    // connection may serve another request.
    std::function<bool(ServedRequest& req)> serve;
    // On the loop thread: the full response (status line, headers, body) for a refusal.
    std::function<std::string(const Refusal& refusal)> refusal_response;
    // On the loop thread: whether the engine's admission bound is reached, so that a request
    // that finds no idle worker is refused (429) rather than queued.
    std::function<bool()> at_capacity;
  };

  ConnectionLoop(ConnectionLimits limits, Hooks hooks);
  ~ConnectionLoop();

  // Serves connections accepted on `listen_fd` (a bound, listening socket the loop closes)
  // until stop(). Returns once every connection is closed and every worker is done.
  void run(int listen_fd);
  // From now on every answer closes its connection, and idle connections are closed; the
  // listener stays open (so /health can say "draining").
  void begin_drain();
  // While draining, the last step before stop(): the loop accepts the connections the kernel
  // has completed, then closes the listener (later attempts are refused, never half-taken), and
  // unanswered() reads -1 until the loop has counted again after that. Counting with the
  // listener closed leaves no gap between the last count and the stop for a request to fall in.
  void close_listener();
  // Ends run(): closes the listener and every connection (those being served are shut down,
  // which fails their writes).
  void stop();
  ConnectionStats stats() const;
  bool draining() const { return draining_; }
  // While draining: the requests accepted and not yet answered in full (bytes of one received or
  // waiting in the socket, waiting for body memory or a worker, being served, or a refusal the
  // client is still reading; a connection accepted less than kFreshSendWindow ago with nothing
  // received yet, whose request may be on its way), as the loop last counted them; -1 until it
  // has counted since the drain began (or since close_listener()). 0 when the loop is not
  // running.
  int unanswered() const {
    if (!running_) return 0;
    return close_listener_ && !counted_closed_ ? -1 : unanswered_.load();
  }

 private:
  using Clock = std::chrono::steady_clock;
  static constexpr size_t kSmallBody = 64 << 10;  // bodies up to this need no reservation
  static constexpr std::chrono::milliseconds kFreshSendWindow{1000};

  void accept_ready();
  // close_listener()'s work, on the loop's thread.
  void accept_backlog_and_close_listener();
  // Connections the kernel has completed and the loop not yet accepted (false once closed).
  bool backlog_waiting() const;
  // Stops watching the listener and closes it, if still open.
  void close_listen_fd();
  // Answers a connection over the limit with 503 and closes it.
  void refuse_connection(int fd);
  void read_ready(Connection& c);
  // Runs the framer over what is buffered and acts on it. False when `c` was closed or is
  // lingering after a refusal (the caller must leave it alone).
  bool advance(Connection& c);
  // Hands the complete request to a worker, or answers 429 at once; false as for advance().
  bool dispatch(Connection& c);
  // A connection a worker handed back: whether it may stay open, and when its answer was
  // written (its idle time runs from then, not from when the loop learns of it).
  struct Return {
    Connection* conn;
    bool keep;
    Clock::time_point done;
  };
  void take_returns();
  void returned(const Return& r);
  // Writes the refusal; with r.close, half-closes and lingers (false), else keeps `c` (true).
  bool refuse(Connection& c, const Refusal& r);
  void linger_read(Connection& c);
  void send_continue(Connection& c);
  void check_deadlines();
  int count_unanswered();
  // Body memory for the request whose head `c` holds; `waiter`: it is first in line.
  bool reserve_body(Connection& c, bool waiter);
  // The body memory a request with this head reserves (0: small enough to need none).
  size_t body_reservation(const RequestHead& h) const;
  void leave_budget_line(Connection& c);
  void release_body(Connection& c);
  void wake_budget_waiters();
  void watch(Connection& c, bool on);
  void close_connection(Connection& c);
  void wake();

  ConnectionLimits limits_;
  Hooks hooks_;
  WorkerPool probe_pool_, pool_;  // probes (/health, /metrics) never wait behind requests
  int epoll_fd_ = -1, wake_fd_ = -1, listen_fd_ = -1, spare_fd_ = -1;
  std::unordered_map<int, std::unique_ptr<Connection>> conns_;  // by fd; loop thread only
  std::list<Connection*> idle_;            // idle keep-alive connections, oldest first
  std::list<Connection*> budget_waiters_;  // waiting for body memory, in arrival order
  size_t body_bytes_held_ = 0;
  size_t budget_waiting_bytes_ = 0;  // reservations of the connections in budget_waiters_
  std::vector<char> scratch_;  // what each recv reads into (loop thread)

  std::mutex returns_mu_;  // connections handed back by workers
  std::vector<Return> returns_;

  std::atomic<bool> draining_{false}, stopping_{false}, running_{false}, close_listener_{false};
  std::atomic<bool> counted_closed_{false};  // unanswered_ was counted with the listener closed
  std::atomic<int> unanswered_{-1};
  bool drain_applied_ = false;
  bool listen_paused_ = false;  // out of descriptors: the listener is not watched for a moment
  std::atomic<int> open_{0}, busy_{0}, budget_waiting_{0};
  std::atomic<uint64_t> held_stat_{0}, rejected_{0}, evicted_{0}, slow_headers_{0},
      slow_bodies_{0}, refused_{0};
};

}  // namespace pagoda::server
