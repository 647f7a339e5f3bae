// BufferedStream: reads from memory, writes to the socket with poll() (see buffered_stream.h).
#include "server/http/buffered_stream.h"

#include <netdb.h>
#include <poll.h>
#include <sys/select.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <cstdlib>

namespace pagoda::server {

bool numeric_address(const sockaddr_storage& sa, socklen_t len, std::string* ip, int* port) {
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&sa), len, host, sizeof host, serv,
                  sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return false;
  *ip = host;
  *port = std::atoi(serv);
  return true;
}

bool peer_addresses(int fd, PeerAddresses* out) {
  sockaddr_storage sa{};
  socklen_t len = sizeof sa;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0 ||
      !numeric_address(sa, len, &out->remote_ip, &out->remote_port))
    return false;
  len = sizeof sa;
  return getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) == 0 &&
         numeric_address(sa, len, &out->local_ip, &out->local_port);
}

BufferedStream::BufferedStream(int fd, std::string request, const PeerAddresses& addresses,
                               double write_timeout_s)
    : fd_(fd),
      data_(std::move(request)),
      addresses_(addresses),
      write_timeout_ms_((int)(write_timeout_s * 1000)) {}

bool BufferedStream::is_writable() const {
  pollfd p{fd_, POLLOUT, 0};
  int n;
  do {
    n = poll(&p, 1, write_timeout_ms_);
  } while (n < 0 && errno == EINTR);
  return n > 0 && (p.revents & POLLOUT) && !(p.revents & (POLLERR | POLLHUP | POLLNVAL));
}

ssize_t BufferedStream::read(char* ptr, size_t size) {
  size_t n = std::min(size, data_.size() - pos_);
  std::memcpy(ptr, data_.data() + pos_, n);
  pos_ += n;
  // Everything read: httplib holds its own copy of the body now.
  if (pos_ == data_.size() && data_.capacity() > (64u << 10)) {
    std::string().swap(data_);
    pos_ = 0;
  }
  return (ssize_t)n;
}

ssize_t BufferedStream::write(const char* ptr, size_t size) {
  size_t done = 0;
  while (done < size) {
    ssize_t n = ::send(fd_, ptr + done, size - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      done += (size_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && is_writable()) continue;
    return -1;  // the peer is gone, or it read nothing for the whole write timeout
  }
  written_ += done;
  return (ssize_t)done;
}

void BufferedStream::get_remote_ip_and_port(std::string& ip, int& port) const {
  ip = addresses_.remote_ip;
  port = addresses_.remote_port;
}

void BufferedStream::get_local_ip_and_port(std::string& ip, int& port) const {
  ip = addresses_.local_ip;
  port = addresses_.local_port;
}

socket_t BufferedStream::socket() const { return fd_ < FD_SETSIZE ? fd_ : INVALID_SOCKET; }

}  // namespace pagoda::server
