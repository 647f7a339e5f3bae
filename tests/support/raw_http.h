// HTTP over a raw loopback socket, for tests that must send what no HTTP client library would
// (malformed framing, pipelined requests, a header line at a time) and read each response as
// the server wrote it.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <map>
#include <string>

namespace pagoda::testing {

struct RawResponse {
  int status = 0;  // 0: no complete response before the timeout or the close
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
  std::string header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

class RawConnection {
 public:
  explicit RawConnection(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (fd_ >= 0 && ::connect(fd_, (sockaddr*)&a, sizeof a) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
    int one = 1;
    if (fd_ >= 0) setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  ~RawConnection() {
    if (fd_ >= 0) ::close(fd_);
  }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  bool ok() const { return fd_ >= 0; }
  bool send(const std::string& data) {
    size_t done = 0;
    while (fd_ >= 0 && done < data.size()) {
      ssize_t n = ::send(fd_, data.data() + done, data.size() - done, MSG_NOSIGNAL);
      if (n <= 0) return false;
      done += (size_t)n;
    }
    return fd_ >= 0;
  }

  // Closes the sending side (the server sees the end of input) and keeps reading.
  void half_close() {
    if (fd_ >= 0) ::shutdown(fd_, SHUT_WR);
  }

  // Reads the next response (a 1xx counts as one), waiting up to `timeout` in all.
  RawResponse read_response(std::chrono::milliseconds timeout = std::chrono::milliseconds(2000)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    RawResponse r;
    size_t head_end;
    while ((head_end = buf_.find("\r\n\r\n")) == std::string::npos)
      if (!fill(deadline)) return r;
    std::string head = buf_.substr(0, head_end);
    size_t pos = head.find("\r\n");
    std::string status_line = head.substr(0, pos);
    for (size_t p = pos; p != std::string::npos && p + 2 < head.size();) {
      size_t e = head.find("\r\n", p + 2);
      std::string line = head.substr(p + 2, e == std::string::npos ? std::string::npos : e - p - 2);
      size_t colon = line.find(':');
      if (colon != std::string::npos) {
        std::string name = line.substr(0, colon), value = line.substr(colon + 1);
        std::transform(name.begin(), name.end(), name.begin(), ::tolower);
        value.erase(0, value.find_first_not_of(' '));
        r.headers[name] = value;
      }
      p = e;
    }
    size_t at = head_end + 4;
    const int status = std::atoi(status_line.substr(9, 3).c_str());
    if (status >= 200 && r.headers.count("content-length")) {
      size_t len = std::stoul(r.headers["content-length"]);
      while (buf_.size() < at + len)
        if (!fill(deadline)) return r;
      r.body = buf_.substr(at, len);
      at += len;
    } else if (status >= 200 && r.header("transfer-encoding") == "chunked") {
      for (;;) {
        size_t eol;
        while ((eol = buf_.find("\r\n", at)) == std::string::npos)
          if (!fill(deadline)) return r;
        size_t len = std::stoul(buf_.substr(at, eol - at), nullptr, 16);
        while (buf_.size() < eol + 2 + len + 2)
          if (!fill(deadline)) return r;
        r.body += buf_.substr(eol + 2, len);
        at = eol + 2 + len + 2;
        if (len == 0) break;
      }
    }
    buf_.erase(0, at);
    r.status = status;
    return r;
  }

  // True when the server closes the connection within `timeout` (what it sends first is read
  // and dropped).
  bool closed_by_server(std::chrono::milliseconds timeout = std::chrono::milliseconds(2000)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (fill(deadline)) {
    }
    return eof_;
  }

 private:
  // Reads more into buf_; false on timeout, close or error.
  bool fill(std::chrono::steady_clock::time_point deadline) {
    if (fd_ < 0 || eof_) return false;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, (int)left.count()) <= 0) return false;
    char tmp[16384];
    ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
    if (n <= 0) {
      eof_ = true;
      return false;
    }
    buf_.append(tmp, (size_t)n);
    return true;
  }

  int fd_ = -1;
  bool eof_ = false;
  std::string buf_;
};

// Raises the soft open-file limit towards `wanted` (up to the hard limit); returns the limit.
inline long raise_open_file_limit(long wanted) {
  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  if ((long)rl.rlim_cur < wanted && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = std::min<rlim_t>(rl.rlim_max, (rlim_t)wanted);
    setrlimit(RLIMIT_NOFILE, &rl);
    getrlimit(RLIMIT_NOFILE, &rl);
  }
  return (long)rl.rlim_cur;
}

}  // namespace pagoda::testing
