// Whether the client of the request being served is still connected, so that work for a client
// that left can stop.
#pragma once

#include <httplib.h>

namespace pagoda::server {

// The request header through which the HTTP layer tells the probe its socket (set by the
// server itself after removing any copy the client sent).
inline constexpr const char* kSocketHeader = "Pagoda-Socket-Fd";

// Tells whether the client of the request being served has closed its connection.
// cpp-httplib 0.11 does not expose the socket to handlers: the HTTP layer names it in
// kSocketHeader, which the probe checks against the request's addresses; failing that, the
// probe looks for it: the process's socket whose local and peer addresses match the request's
// (only the connection serving this request can match while the request is being served).
class ConnectionProbe {
 public:
  explicit ConnectionProbe(const httplib::Request& req);
  // True once the peer has closed or reset the connection (pending pipelined data is not a
  // close). Returns false when the socket could not be identified.
  bool closed() const;

 private:
  int fd_ = -1;
};

}  // namespace pagoda::server
