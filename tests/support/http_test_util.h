// Helpers for tests that talk to a pagoda server over loopback HTTP: JSON requests, SSE
// parsing, metric scraping, and starting/stopping the real `pagoda serve` binary.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

namespace pagoda::testing {

using nlohmann::json;

struct HttpResult {
  int status = 0;
  std::string body;
  httplib::Headers headers;
  json j() const {
    json v = json::parse(body, nullptr, false);
    if (v.is_discarded()) throw std::runtime_error("response is not JSON: " + body.substr(0, 200));
    return v;
  }
};

inline httplib::Headers auth_headers(const std::string& key) {
  if (key.empty()) return {};
  return {{"Authorization", "Bearer " + key}};
}

inline HttpResult http_post(int port, const std::string& path, const std::string& body,
                            const std::string& key = "", int timeout_s = 120) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(timeout_s, 0);
  c.set_tcp_nodelay(true);  // else Nagle + delayed ACK add 40 ms between headers and body
  auto r = c.Post(path.c_str(), auth_headers(key), body, "application/json");
  if (!r) return {0, "transport error: " + httplib::to_string(r.error()), {}};
  return {r->status, r->body, r->headers};
}

inline HttpResult http_post(int port, const std::string& path, const json& body,
                            const std::string& key = "", int timeout_s = 120) {
  return http_post(port, path, body.dump(), key, timeout_s);
}

inline HttpResult http_get(int port, const std::string& path, const std::string& key = "") {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(60, 0);
  auto r = c.Get(path.c_str(), auth_headers(key));
  if (!r) return {0, "transport error: " + httplib::to_string(r.error()), {}};
  return {r->status, r->body, r->headers};
}

// Polls `cond` every 10 ms until it holds or `seconds` pass; returns its last value.
inline bool wait_for(const std::function<bool()>& cond, double seconds = 5) {
  auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < seconds) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return cond();
}

// The `data:` payloads of an SSE body, in order ("[DONE]" included as is).
inline std::vector<std::string> sse_events(const std::string& body) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) end = body.size();
    std::string ev = body.substr(pos, end - pos);
    if (ev.rfind("data: ", 0) == 0) out.push_back(ev.substr(6));
    pos = end + 2;
  }
  return out;
}

// A typed event of a streamed Responses answer: "event: NAME\ndata: {json}".
struct TypedEvent {
  std::string name;
  json data;
};

// The typed events of an SSE body, in order; throws on a frame of another shape.
inline std::vector<TypedEvent> typed_sse_events(const std::string& body) {
  std::vector<TypedEvent> out;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) end = body.size();
    std::string frame = body.substr(pos, end - pos);
    pos = end + 2;
    if (frame.empty()) continue;
    size_t nl = frame.find('\n');
    if (frame.rfind("event: ", 0) != 0 || nl == std::string::npos || frame.compare(nl + 1, 6, "data: ") != 0)
      throw std::runtime_error("not a typed SSE event: " + frame.substr(0, 200));
    out.push_back({frame.substr(7, nl - 7), json::parse(frame.substr(nl + 7))});
  }
  return out;
}

// Concatenated text per choice of a streamed answer (chat deltas or completion text).
inline std::vector<std::string> sse_texts(const std::vector<std::string>& events, size_t choices) {
  std::vector<std::string> text(choices);
  for (const std::string& e : events) {
    if (e == "[DONE]") continue;
    json j = json::parse(e);
    if (!j.contains("choices")) continue;
    for (const json& c : j["choices"]) {
      size_t i = c["index"].get<size_t>();
      if (i >= text.size()) text.resize(i + 1);
      if (c.contains("delta")) {
        if (c["delta"].contains("content") && c["delta"]["content"].is_string())
          text[i] += c["delta"]["content"].get<std::string>();
      } else if (c.contains("text")) {
        text[i] += c["text"].get<std::string>();
      }
    }
  }
  return text;
}

// The value of a Prometheus metric summed over its series (every one carries labels, at least
// model_name), or -1 when absent.
inline double metric_value(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  std::string line;
  double sum = 0;
  bool found = false;
  while (std::getline(in, line)) {
    size_t value_at = std::string::npos;
    if (line.rfind(name + " ", 0) == 0) value_at = name.size() + 1;
    else if (line.rfind(name + "{", 0) == 0 && line.find("} ") != std::string::npos) value_at = line.find("} ") + 2;
    if (value_at == std::string::npos) continue;
    sum += std::stod(line.substr(value_at));
    found = true;
  }
  return found ? sum : -1;
}

// A `pagoda serve` child process on a free loopback port, stopped (SIGTERM) on destruction.
class ServerProcess {
 public:
  ServerProcess(const std::string& binary, std::vector<std::string> args, int port)
      : port_(port) {
    log_path_ = "/tmp/pagoda_e2e_" + std::to_string(getpid()) + "_" + std::to_string(port) + ".log";
    pid_ = fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      FILE* f = std::fopen(log_path_.c_str(), "w");
      if (f) {
        dup2(fileno(f), 1);
        dup2(fileno(f), 2);
      }
      std::vector<std::string> all = {binary, "serve", "--host", "127.0.0.1", "--port",
                                      std::to_string(port)};
      all.insert(all.end(), args.begin(), args.end());
      std::vector<char*> argv;
      for (auto& a : all) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(binary.c_str(), argv.data());
      _exit(127);
    }
  }
  ~ServerProcess() {
    stop();
    if (!std::getenv("PAGODA_KEEP_TEST_LOGS")) std::remove(log_path_.c_str());
  }

  // Waits until /health answers 200; false on timeout or if the process died.
  bool wait_ready(double timeout_s = 60) {
    auto t0 = std::chrono::steady_clock::now();
    while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < timeout_s) {
      int st;
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        return false;
      }
      if (http_get(port_, "/health").status == 200) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  // Sends `sig` without waiting.
  void signal(int sig) {
    if (pid_ > 0) kill(pid_, sig);
  }

  // Sends `sig` and waits up to `timeout_s` for exit; returns the exit status (or -1).
  int stop(int sig = SIGTERM, double timeout_s = 30) {
    if (pid_ <= 0) return exit_code_;
    kill(pid_, sig);
    auto t0 = std::chrono::steady_clock::now();
    while (true) {
      int st;
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        exit_code_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        break;
      }
      if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > timeout_s) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &st, 0);
        exit_code_ = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    pid_ = -1;
    return exit_code_;
  }

  bool running() {
    if (pid_ <= 0) return false;
    int st;
    if (waitpid(pid_, &st, WNOHANG) == pid_) {
      exit_code_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      pid_ = -1;
      return false;
    }
    return true;
  }

  std::string log() const {
    std::ifstream f(log_path_);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  int port() const { return port_; }

 private:
  int port_;
  pid_t pid_ = -1;
  int exit_code_ = -1;
  std::string log_path_;
};

// A loopback port that was free a moment ago. (Not httplib::Server::bind_to_any_port: the
// library never closes that socket and sets SO_REUSEPORT, so it would keep stealing half of
// the child server's connections.)
inline int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = 0;
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  int port = -1;
  socklen_t len = sizeof a;
  if (bind(fd, (sockaddr*)&a, sizeof a) == 0 && getsockname(fd, (sockaddr*)&a, &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  if (port <= 0) throw std::runtime_error("no free loopback port");
  return port;
}

// A raw HTTP/1.1 POST request with a JSON body, for tests that write straight onto a socket.
inline std::string raw_post(const std::string& path, const std::string& body) {
  return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

// Sends `data` on a fresh loopback connection, reads until `min_bytes` arrived or `max_wait`
// passed (each read waiting at most `recv_timeout`), then closes the connection: a client that
// goes away. Returns what was read; "" when it could not connect.
inline std::string raw_exchange(int port, const std::string& data, size_t min_bytes,
                                std::chrono::milliseconds max_wait,
                                std::chrono::milliseconds recv_timeout = std::chrono::milliseconds(100)) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  std::string got;
  if (connect(fd, (sockaddr*)&a, sizeof a) == 0) {
    send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    timeval tv{0, static_cast<suseconds_t>(recv_timeout.count() * 1000)};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    const auto t0 = std::chrono::steady_clock::now();
    while (got.size() < min_bytes && std::chrono::steady_clock::now() - t0 < max_wait) {
      char buf[4096];
      ssize_t n = recv(fd, buf, sizeof buf, 0);
      if (n > 0) got.append(buf, (size_t)n);
      if (n == 0) break;  // the server closed the connection
    }
  }
  close(fd);
  return got;
}

// A POST written onto the socket with `headers` ("Name: value\r\n" lines) as they are, so that a
// header may be repeated; the status and the body of the answer (not chunked: no streams).
inline HttpResult http_post_raw(int port, const std::string& path, const std::string& headers,
                                const std::string& body) {
  const std::string req = "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" + headers +
                          "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
                          "\r\n\r\n" + body;
  const std::string got = raw_exchange(port, req, 1 << 20, std::chrono::seconds(30));
  const size_t head_end = got.find("\r\n\r\n");
  if (got.rfind("HTTP/1.1 ", 0) != 0 || head_end == std::string::npos) return {0, got, {}};
  return {std::stoi(got.substr(9, 3)), got.substr(head_end + 4), {}};
}

}  // namespace pagoda::testing
