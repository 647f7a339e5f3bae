// The httplib::Stream a worker serves one request through: reads come from the request's bytes,
// already received in full by the connection loop (connection_loop.h); writes go straight to the
// connection's socket, waiting for room up to a write timeout. The request's bytes are freed
// as soon as httplib has read them all, so a large body is not held twice while it is handled.
#pragma once

#include <sys/socket.h>

#include <string>

#include <httplib.h>

namespace pagoda::server {

// The addresses of a connection, as httplib reports them on the request (numeric host, port).
struct PeerAddresses {
  std::string remote_ip, local_ip;
  int remote_port = 0, local_port = 0;
};

// Fills `out` from the socket's getpeername/getsockname; false when either fails.
bool peer_addresses(int fd, PeerAddresses* out);
// A socket address as numeric host text and port, as getnameinfo gives them.
bool numeric_address(const sockaddr_storage& sa, socklen_t len, std::string* ip, int* port);

class BufferedStream : public httplib::Stream {
 public:
  // `fd`: the connection's (non-blocking) socket; `request`: exactly one request's bytes.
  BufferedStream(int fd, std::string request, const PeerAddresses& addresses,
                 double write_timeout_s);

  bool is_readable() const override { return pos_ < data_.size(); }
  // Waits up to the write timeout for room in the socket's send buffer.
  bool is_writable() const override;
  ssize_t read(char* ptr, size_t size) override;
  ssize_t write(const char* ptr, size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  // The socket, when below FD_SETSIZE: Debian's libcpp-httplib is built with select(), and its
  // process_request answers 500 to any stream whose socket() is at or above FD_SETSIZE. Nothing
  // else in the library uses it, and this stream never select()s.
  socket_t socket() const override;

  // Bytes written so far (the response, headers included).
  size_t bytes_written() const { return written_; }

 private:
  int fd_;
  std::string data_;
  size_t pos_ = 0;
  const PeerAddresses& addresses_;
  int write_timeout_ms_;
  size_t written_ = 0;
};

}  // namespace pagoda::server
