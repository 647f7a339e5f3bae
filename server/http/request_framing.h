// Where an HTTP/1.1 request begins and ends in a connection's bytes, and whether it is well
// formed enough to be served: the request line, the header section (CRLF only, a size bound,
// no obs-fold, no bare LF), and the body's framing (Content-Length or chunked, never both,
// never ambiguous). What the connection loop (connection_loop.h) runs on every read, before any
// worker sees the request; httplib then parses the same bytes again for routing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pagoda::server {

struct FramingLimits {
  size_t max_head_bytes = 64 << 10;   // request line + headers; beyond: 431
  size_t max_target_bytes = 8 << 10;  // the request target; beyond: 414
  size_t max_body_bytes = 8 << 20;    // beyond: 413
};

// A refused request: the status and a message for the client. The connection is closed after
// the answer (what follows the refused bytes cannot be trusted to start a request).
struct FramingError {
  int status = 400;
  std::string message;
};

// The request line and headers, as received (header values are not decoded).
struct RequestHead {
  enum class Body { None, Length, Chunked };
  std::string method, target, version;  // version: "HTTP/1.0" or "HTTP/1.1"
  std::vector<std::pair<std::string, std::string>> headers;  // in order, names as sent
  Body body = Body::None;
  uint64_t content_length = 0;  // Body::Length
  size_t head_bytes = 0;        // request line through the blank line
  bool keep_alive = true;       // HTTP/1.1 unless "Connection: close"; 1.0 only with keep-alive
  bool expect_continue = false;
  // The target without its query string ("/v1/models?x" -> "/v1/models").
  std::string path() const;
  // The first value of the header named `name` (case-insensitive), or nullptr.
  const std::string* find(std::string_view name) const;
  size_t count(std::string_view name) const;
};

// Parses a complete header section (`head` ends with the blank line). Checks the request line,
// header syntax and the body framing; returns false with `err` set when the request must be
// refused.
bool parse_request_head(std::string_view head, const FramingLimits& limits, RequestHead* out,
                        FramingError* err);

// A complete chunked request (`request`: exactly its bytes, as the framer delimited them) as
// the same request with a Content-Length body: the chunks joined, the trailer section dropped
// (httplib, which routes the request, refuses trailers). Only for a head whose body is Chunked.
std::string unchunked_request(const RequestHead& head, std::string_view request);

// Follows one request through a connection's buffer as its bytes arrive. The request starts at
// offset 0 of the buffer given to advance(); the buffer only grows between calls (until the
// request is complete and the framer is reset for the next one).
class RequestFramer {
 public:
  enum class Step {
    NeedMore,  // keep reading
    HeadDone,  // the header section just completed (head() is valid); the body may follow
    Complete,  // the whole request is in the buffer: its first request_bytes() bytes
    Error,     // refuse with error()
  };
  explicit RequestFramer(FramingLimits limits) : limits_(limits) {}

  // Examines the bytes not seen yet. Returns HeadDone once (when the header section completes),
  // then NeedMore or Complete as the body arrives; a request without a body goes straight from
  // HeadDone to Complete on the next call.
  Step advance(std::string_view buf);

  bool head_done() const { return phase_ != Phase::Head; }
  // Nothing of the request examined yet (leading blank lines may still be dropped).
  bool fresh() const { return phase_ == Phase::Head && scanned_ == 0; }
  const RequestHead& head() const { return head_; }
  const FramingError& error() const { return err_; }
  size_t request_bytes() const { return end_; }
  // Body bytes received so far (raw, chunk framing included), for the minimum-rate check.
  size_t body_bytes_received(size_t buffered) const;
  void reset();

 private:
  enum class Phase { Head, Length, Chunked, Done, Failed };
  Step fail(int status, std::string message);
  Step scan_head(std::string_view buf);
  Step scan_chunks(std::string_view buf);

  FramingLimits limits_;
  Phase phase_ = Phase::Head;
  RequestHead head_;
  FramingError err_;
  size_t scanned_ = 0;       // bytes of the head checked for line endings
  size_t chunk_pos_ = 0;     // next chunk-size line (chunked bodies)
  uint64_t chunk_total_ = 0; // decoded body bytes so far
  bool in_trailers_ = false;
  size_t end_ = 0;           // request length once Complete
};

}  // namespace pagoda::server
