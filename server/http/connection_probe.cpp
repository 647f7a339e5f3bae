// ConnectionProbe: finding the request's socket under /proc/self/fd and polling it (see
// connection_probe.h).
#include "server/http/connection_probe.h"

#include <dirent.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <string>

#include "server/http/buffered_stream.h"

namespace pagoda::server {

namespace {

int port_of(const sockaddr_storage& sa) {
  if (sa.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(sa).sin_port);
  if (sa.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(sa).sin6_port);
  return -1;
}

bool socket_matches(int fd, const httplib::Request& req) {
  sockaddr_storage local{}, peer{};
  socklen_t llen = sizeof local, plen = sizeof peer;
  // Ports first: cheap, and they rule out nearly every other socket.
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &llen) != 0 ||
      port_of(local) != req.local_port)
    return false;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &plen) != 0 ||
      port_of(peer) != req.remote_port)
    return false;
  std::string lip, pip;
  int lport = -1, pport = -1;
  return numeric_address(local, llen, &lip, &lport) && numeric_address(peer, plen, &pip, &pport) &&
         lport == req.local_port && pport == req.remote_port && pip == req.remote_addr &&
         lip == req.local_addr;
}

}  // namespace

ConnectionProbe::ConnectionProbe(const httplib::Request& req) {
  if (req.has_header(kSocketHeader)) {
    int fd = std::atoi(req.get_header_value(kSocketHeader).c_str());
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode) && socket_matches(fd, req)) {
      fd_ = fd;
      return;
    }
  }
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return;
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    long fd = std::strtol(e->d_name, &end, 10);
    if (*end || end == e->d_name || fd == dirfd(dir)) continue;
    struct stat st;
    if (fstat((int)fd, &st) != 0 || !S_ISSOCK(st.st_mode) || !socket_matches((int)fd, req)) continue;
    fd_ = (int)fd;
    break;
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

}  // namespace pagoda::server
