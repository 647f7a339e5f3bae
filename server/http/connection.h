// One client connection as the connection loop (connection_loop.h) keeps it: its socket, the
// bytes received and not yet served, where the request being received stands, and which
// deadline applies. Only the loop thread touches it, except `fd` and `addr`, which a worker
// reads while it serves the connection's request.
#pragma once

#include <chrono>
#include <list>
#include <string>

#include "server/http/buffered_stream.h"
#include "server/http/request_framing.h"

namespace pagoda::server {

struct Connection {
  enum class State {
    Reading,        // receiving a request (or idle between requests)
    WaitingBudget,  // headers in; the body waits for memory (not read meanwhile)
    Serving,        // a complete request is with a worker (queued or running)
    Lingering,      // refused and half-closed: draining what the client still sends
  };
  using Clock = std::chrono::steady_clock;

  Connection(int fd_, const FramingLimits& limits) : fd(fd_), framer(limits) {}

  int fd;
  PeerAddresses addr;
  std::string buf;  // received, not yet served; the current request starts at 0
  RequestFramer framer;
  State state = State::Reading;
  bool watched = false;     // registered with epoll for reading
  bool served_any = false;  // idle after a response (keep-alive) rather than never used
  bool peer_closed = false; // the client closed its side: answer what is buffered, then close
  Clock::time_point since;  // Reading: request (or idle wait) start; WaitingBudget: wait start;
                            // Lingering: refusal time
  Clock::time_point head_done_at;  // headers complete: the body rate is measured from here
  size_t body_reserved = 0;        // body memory held for this request
  bool in_idle = false;
  std::list<Connection*>::iterator idle_pos, waiter_pos;
};

}  // namespace pagoda::server
