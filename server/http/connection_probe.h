// Whether the client of the request being served is still connected, so that work for a client
// that left can stop.
#pragma once

#include <httplib.h>

namespace pagoda::server {

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

 private:
  int fd_ = -1;
};

}  // namespace pagoda::server
