// Request framing and HTTP hygiene without sockets: where a request ends (Content-Length,
// chunked, pipelined), and which requests are refused with which status before any handler.
#include <catch2/catch.hpp>

#include "server/http/request_framing.h"

using namespace pagoda::server;

namespace {

struct Framed {
  RequestFramer::Step step;
  int status = 0;       // when refused
  size_t bytes = 0;     // when complete
  RequestHead head;
};

// Feeds `data` one byte at a time when `bytewise` (every split point), else at once.
Framed frame(const std::string& data, bool bytewise = false, FramingLimits lim = {}) {
  RequestFramer f(lim);
  Framed out{RequestFramer::Step::NeedMore};
  for (size_t n = bytewise ? 1 : data.size(); n <= data.size(); ++n) {
    for (;;) {
      RequestFramer::Step s = f.advance(std::string_view(data).substr(0, n));
      if (s == RequestFramer::Step::HeadDone) {
        out.head = f.head();
        continue;
      }
      out.step = s;
      break;
    }
    if (out.step == RequestFramer::Step::Error) {
      out.status = f.error().status;
      return out;
    }
    if (out.step == RequestFramer::Step::Complete) {
      out.bytes = f.request_bytes();
      return out;
    }
  }
  return out;
}

std::string post(const std::string& headers, const std::string& body = "") {
  return "POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + headers + "\r\n" + body;
}

}  // namespace

TEST_CASE("framing: requests end where their length says, however the bytes arrive", "[framing]") {
  for (bool bytewise : {false, true}) {
    Framed g = frame("GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /next", bytewise);
    CHECK(g.step == RequestFramer::Step::Complete);
    CHECK(g.bytes == 33);
    CHECK(g.head.path() == "/health");
    CHECK(g.head.keep_alive);

    std::string req = post("Content-Length: 5\r\n", "hello");
    Framed p = frame(req + "POST /again", bytewise);
    CHECK(p.step == RequestFramer::Step::Complete);
    CHECK(p.bytes == req.size());
    CHECK(p.head.content_length == 5);

    std::string chunked = post("Transfer-Encoding: chunked\r\n", "5;ext=1\r\nhello\r\n3\r\n ok\r\n0\r\nTrailer: t\r\n\r\n");
    Framed c = frame(chunked + "GET", bytewise);
    CHECK(c.step == RequestFramer::Step::Complete);
    CHECK(c.bytes == chunked.size());
    CHECK(c.head.body == RequestHead::Body::Chunked);
  }
  // Incomplete: more is needed, nothing refused.
  CHECK(frame(post("Content-Length: 10\r\n", "12345")).step == RequestFramer::Step::NeedMore);
  CHECK(frame("GET / HTTP/1.1\r\nHost: x\r\n").step == RequestFramer::Step::NeedMore);
}

TEST_CASE("framing: connection and expectation headers", "[framing]") {
  CHECK(!frame("GET / HTTP/1.1\r\nConnection: keep-alive, Close\r\n\r\n").head.keep_alive);
  CHECK(!frame("GET / HTTP/1.0\r\n\r\n").head.keep_alive);
  CHECK(frame("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n").head.keep_alive);
  Framed e = frame(post("Content-Length: 2\r\nExpect: 100-continue\r\n"));
  CHECK(e.head.expect_continue);
  CHECK(e.step == RequestFramer::Step::NeedMore);
  // Header values are kept as sent: no percent-decoding.
  Framed a = frame("GET / HTTP/1.1\r\nAuthorization: Bearer k%41\r\n\r\n");
  REQUIRE(a.head.find("authorization"));
  CHECK(*a.head.find("authorization") == "Bearer k%41");
}

TEST_CASE("framing: refused at once, with the status that says why", "[framing]") {
  struct Case {
    const char* what;
    std::string request;
    int status;
  };
  FramingLimits small;
  small.max_body_bytes = 1000;
  std::vector<Case> cases = {
      {"POST without a length", post(""), 411},
      {"PUT without a length", "PUT /x HTTP/1.1\r\nHost: x\r\n\r\n", 411},
      {"negative length", post("Content-Length: -1\r\n"), 400},
      {"signed length", post("Content-Length: +5\r\n"), 400},
      {"non-numeric length", post("Content-Length: abc\r\n"), 400},
      {"length list", post("Content-Length: 5, 5\r\n"), 400},
      {"length overflowing 64 bits", post("Content-Length: 99999999999999999999999\r\n"), 400},
      {"conflicting lengths", post("Content-Length: 5\r\nContent-Length: 6\r\n"), 400},
      {"length and chunked", post("Content-Length: 5\r\nTransfer-Encoding: chunked\r\n"), 400},
      {"length over the body limit", post("Content-Length: 1001\r\n"), 413},
      {"unknown transfer coding", post("Transfer-Encoding: gzip\r\n"), 501},
      {"chunked body over the limit", post("Transfer-Encoding: chunked\r\n", "3e9\r\n"), 413},
      {"bad chunk size", post("Transfer-Encoding: chunked\r\n", "zz\r\n"), 400},
      {"chunk without its CRLF", post("Transfer-Encoding: chunked\r\n", "2\r\nabcd\r\n"), 400},
      {"bare LF", "GET / HTTP/1.1\nHost: x\n\n", 400},
      {"NUL in a header value", std::string("GET / HTTP/1.1\r\nX-A: b\0c\r\n\r\n", 28), 400},
      {"bare CR in a header value", "GET / HTTP/1.1\r\nX-A: b\rc\r\n\r\n", 400},
      {"folded header", "GET / HTTP/1.1\r\nA: b\r\n c\r\n\r\n", 400},
      {"space before colon", "GET / HTTP/1.1\r\nHost : x\r\n\r\n", 400},
      {"header without colon", "GET / HTTP/1.1\r\nnocolon\r\n\r\n", 400},
      {"malformed request line", "GET /\r\n\r\n", 400},
      {"HTTP/2 preface-like version", "GET / HTTP/2.0\r\n\r\n", 505},
      {"junk version", "GET / FOO\r\n\r\n", 400},
      {"long target", "GET /" + std::string(9000, 'a') + " HTTP/1.1\r\n\r\n", 414},
      {"long header line", "GET / HTTP/1.1\r\nX: " + std::string(9000, 'a') + "\r\n\r\n", 431},
      {"headers over the size limit", "GET / HTTP/1.1\r\n" + std::string(70000, 'a'), 431},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    Framed f = frame(c.request, false, small);
    CHECK(f.step == RequestFramer::Step::Error);
    CHECK(f.status == c.status);
  }
  // The same lengths repeated are one length.
  CHECK(frame(post("Content-Length: 2\r\nContent-Length: 2\r\n", "ok")).step ==
        RequestFramer::Step::Complete);
  // GET needs no length.
  CHECK(frame("GET /v1/models HTTP/1.1\r\n\r\n").step == RequestFramer::Step::Complete);
}

TEST_CASE("framing: a chunked request is handed on with a Content-Length body", "[framing]") {
  const std::string chunked =
      post("Transfer-Encoding: chunked\r\nX-After: 1\r\n",
           "5;ext=1\r\nhello\r\n3\r\n ok\r\n0\r\nX-Trailer: t\r\nX-More: u\r\n\r\n");
  Framed c = frame(chunked);
  REQUIRE(c.step == RequestFramer::Step::Complete);
  CHECK(unchunked_request(c.head, chunked) ==
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-After: 1\r\nContent-Length: 8\r\n\r\nhello ok");
  // No chunks at all: an empty body.
  const std::string empty = post("Transfer-Encoding: chunked\r\n", "0\r\n\r\n");
  Framed e = frame(empty);
  REQUIRE(e.step == RequestFramer::Step::Complete);
  CHECK(unchunked_request(e.head, empty) ==
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n");
}
