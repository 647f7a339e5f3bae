// Request framing and HTTP hygiene (see request_framing.h). Strict where a lenient reading
// could let two parties disagree on where a request ends (request smuggling): bare LF,
// obs-fold, Content-Length with Transfer-Encoding, several different lengths.
#include "server/http/request_framing.h"

#include <strings.h>

#include <algorithm>
#include <cctype>

namespace pagoda::server {

namespace {

constexpr size_t kMaxHeaderLine = 8192;  // what httplib itself accepts per header line
constexpr size_t kMaxHeaders = 100;
constexpr size_t kMaxChunkLine = 1024;

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && strncasecmp(a.data(), b.data(), a.size()) == 0;
}

// RFC 9110 token characters (method, header names).
bool is_tchar(char c) {
  if (std::isalnum((unsigned char)c)) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool is_token(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), is_tchar);
}

std::string_view trim_ows(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Whether a comma-separated header value lists `token` (Connection: keep-alive, close).
bool lists_token(std::string_view value, std::string_view token) {
  while (!value.empty()) {
    size_t comma = value.find(',');
    if (iequals(trim_ows(value.substr(0, comma)), token)) return true;
    if (comma == std::string_view::npos) break;
    value.remove_prefix(comma + 1);
  }
  return false;
}

bool fail(FramingError* err, int status, std::string message) {
  *err = {status, std::move(message)};
  return false;
}

bool parse_request_line(std::string_view line, const FramingLimits& limits, RequestHead* out,
                        FramingError* err) {
  size_t sp1 = line.find(' ');
  size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos)
    return fail(err, 400, "Malformed request line.");
  std::string_view method = line.substr(0, sp1), target = line.substr(sp1 + 1, sp2 - sp1 - 1),
                   version = line.substr(sp2 + 1);
  if (!is_token(method)) return fail(err, 400, "Malformed request method.");
  if (target.size() > limits.max_target_bytes)
    return fail(err, 414, "The request target is longer than " +
                              std::to_string(limits.max_target_bytes) + " bytes.");
  if (target.empty() ||
      std::any_of(target.begin(), target.end(), [](char c) { return (unsigned char)c <= 0x20 || c == 0x7f; }))
    return fail(err, 400, "Malformed request target.");
  if (version != "HTTP/1.1" && version != "HTTP/1.0") {
    if (version.size() == 8 && version.substr(0, 5) == "HTTP/")
      return fail(err, 505, "Only HTTP/1.0 and HTTP/1.1 are supported.");
    return fail(err, 400, "Malformed HTTP version.");
  }
  out->method = method;
  out->target = target;
  out->version = version;
  return true;
}

// Content-Length: digits only, every copy the same; Transfer-Encoding: chunked alone, and
// never with a length. POST, PUT and PATCH must say how long their body is.
bool parse_body_framing(const FramingLimits& limits, RequestHead* h, FramingError* err) {
  const std::string* length = nullptr;
  for (const auto& [name, value] : h->headers) {
    if (!iequals(name, "Content-Length")) continue;
    if (length && *length != value) return fail(err, 400, "Conflicting Content-Length headers.");
    length = &value;
  }
  size_t te_count = h->count("Transfer-Encoding");
  if (te_count && length)
    return fail(err, 400, "Transfer-Encoding and Content-Length must not be sent together.");
  if (te_count) {
    if (te_count > 1 || !iequals(*h->find("Transfer-Encoding"), "chunked"))
      return fail(err, 501, "Only 'Transfer-Encoding: chunked' is supported.");
    h->body = RequestHead::Body::Chunked;
    return true;
  }
  if (length) {
    const std::string& v = *length;
    if (v.empty() || v.size() > 19 || !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return fail(err, 400, "Content-Length must be a non-negative integer, got '" + v.substr(0, 40) + "'.");
    h->content_length = std::stoull(v);
    if (h->content_length > limits.max_body_bytes)
      return fail(err, 413, "The request body is larger than the limit of " +
                                std::to_string(limits.max_body_bytes) + " bytes.");
    h->body = h->content_length ? RequestHead::Body::Length : RequestHead::Body::None;
    return true;
  }
  if (h->method == "POST" || h->method == "PUT" || h->method == "PATCH")
    return fail(err, 411, "A " + h->method + " request needs a Content-Length header.");
  return true;
}

}  // namespace

std::string RequestHead::path() const { return target.substr(0, target.find('?')); }

const std::string* RequestHead::find(std::string_view name) const {
  for (const auto& [n, v] : headers)
    if (iequals(n, name)) return &v;
  return nullptr;
}

size_t RequestHead::count(std::string_view name) const {
  return (size_t)std::count_if(headers.begin(), headers.end(),
                               [&](const auto& h) { return iequals(h.first, name); });
}

bool parse_request_head(std::string_view head, const FramingLimits& limits, RequestHead* out,
                        FramingError* err) {
  *out = RequestHead{};
  out->head_bytes = head.size();
  size_t eol = head.find("\r\n");
  if (!parse_request_line(head.substr(0, eol), limits, out, err)) return false;
  for (size_t pos = eol + 2; pos < head.size();) {
    size_t end = head.find("\r\n", pos);
    std::string_view line = head.substr(pos, end - pos);
    pos = end + 2;
    if (line.empty()) break;  // the blank line
    if (line.size() > kMaxHeaderLine)
      return fail(err, 431, "A header line is longer than " + std::to_string(kMaxHeaderLine) + " bytes.");
    if (line[0] == ' ' || line[0] == '\t')
      return fail(err, 400, "Folded header lines are not accepted.");
    size_t colon = line.find(':');
    if (colon == std::string_view::npos || !is_token(line.substr(0, colon)))
      return fail(err, 400, "Malformed header line.");
    if (out->headers.size() >= kMaxHeaders)
      return fail(err, 431, "More than " + std::to_string(kMaxHeaders) + " header lines.");
    std::string_view value = trim_ows(line.substr(colon + 1));
    // RFC 9110 5.5: NUL and CR never belong in a field value; a reader that stops at one (as
    // httplib does) would see another value than we check.
    if (value.find_first_of(std::string_view("\0\r", 2)) != std::string_view::npos)
      return fail(err, 400, "A header value contains a NUL or CR byte.");
    out->headers.emplace_back(std::string(line.substr(0, colon)), std::string(value));
  }
  if (!parse_body_framing(limits, out, err)) return false;
  const std::string* conn = out->find("Connection");
  if (out->version == "HTTP/1.0")
    out->keep_alive = conn && lists_token(*conn, "keep-alive");
  else
    out->keep_alive = !(conn && lists_token(*conn, "close"));
  const std::string* expect = out->find("Expect");
  out->expect_continue = expect && iequals(*expect, "100-continue");
  return true;
}

// ---- RequestFramer --------------------------------------------------------------------------

RequestFramer::Step RequestFramer::fail(int status, std::string message) {
  err_ = {status, std::move(message)};
  phase_ = Phase::Failed;
  return Step::Error;
}

void RequestFramer::reset() {
  phase_ = Phase::Head;
  head_ = RequestHead{};
  err_ = FramingError{};
  scanned_ = chunk_pos_ = end_ = 0;
  chunk_total_ = 0;
  in_trailers_ = false;
}

size_t RequestFramer::body_bytes_received(size_t buffered) const {
  if (phase_ == Phase::Head || buffered < head_.head_bytes) return 0;
  return buffered - head_.head_bytes;
}

RequestFramer::Step RequestFramer::scan_head(std::string_view buf) {
  for (size_t i = scanned_; i < buf.size(); ++i) {
    if (buf[i] != '\n') continue;
    if (i == 0 || buf[i - 1] != '\r') return fail(400, "Header lines must end with CRLF.");
    if (i >= 3 && buf.compare(i - 3, 4, "\r\n\r\n") == 0) {
      if (i + 1 > limits_.max_head_bytes)
        return fail(431, "The request headers are larger than " +
                             std::to_string(limits_.max_head_bytes) + " bytes.");
      if (!parse_request_head(buf.substr(0, i + 1), limits_, &head_, &err_)) {
        phase_ = Phase::Failed;
        return Step::Error;
      }
      switch (head_.body) {
        case RequestHead::Body::None: phase_ = Phase::Done, end_ = head_.head_bytes; break;
        case RequestHead::Body::Length: phase_ = Phase::Length; break;
        case RequestHead::Body::Chunked: phase_ = Phase::Chunked, chunk_pos_ = head_.head_bytes; break;
      }
      return Step::HeadDone;
    }
  }
  scanned_ = buf.size();
  if (buf.size() > limits_.max_head_bytes)
    return fail(431, "The request headers are larger than " +
                         std::to_string(limits_.max_head_bytes) + " bytes.");
  return Step::NeedMore;
}

RequestFramer::Step RequestFramer::scan_chunks(std::string_view buf) {
  for (;;) {
    size_t eol = buf.find("\r\n", chunk_pos_);
    if (eol == std::string_view::npos) {
      size_t pending = buf.size() - chunk_pos_;
      if (pending > (in_trailers_ ? limits_.max_head_bytes : kMaxChunkLine))
        return fail(400, "Malformed chunked body.");
      return Step::NeedMore;
    }
    std::string_view line = buf.substr(chunk_pos_, eol - chunk_pos_);
    if (in_trailers_) {
      chunk_pos_ = eol + 2;
      if (line.empty()) {
        end_ = chunk_pos_;
        phase_ = Phase::Done;
        return Step::Complete;
      }
      continue;
    }
    std::string_view digits = line.substr(0, line.find(';'));
    if (digits.empty() || digits.size() > 15 ||
        !std::all_of(digits.begin(), digits.end(), [](char c) { return std::isxdigit((unsigned char)c); }))
      return fail(400, "Malformed chunk size in a chunked body.");
    uint64_t size = std::stoull(std::string(digits), nullptr, 16);
    if (size == 0) {
      in_trailers_ = true;
      chunk_pos_ = eol + 2;
      continue;
    }
    chunk_total_ += size;
    if (chunk_total_ > limits_.max_body_bytes)
      return fail(413, "The request body is larger than the limit of " +
                           std::to_string(limits_.max_body_bytes) + " bytes.");
    size_t data_end = eol + 2 + (size_t)size;
    if (buf.size() < data_end + 2) {
      chunk_total_ -= size;  // counted again once the chunk is complete
      return Step::NeedMore;
    }
    if (buf.compare(data_end, 2, "\r\n") != 0) return fail(400, "Malformed chunked body.");
    chunk_pos_ = data_end + 2;
  }
}

RequestFramer::Step RequestFramer::advance(std::string_view buf) {
  switch (phase_) {
    case Phase::Head: return scan_head(buf);
    case Phase::Length:
      if (buf.size() < head_.head_bytes + head_.content_length) return Step::NeedMore;
      end_ = head_.head_bytes + (size_t)head_.content_length;
      phase_ = Phase::Done;
      return Step::Complete;
    case Phase::Chunked: return scan_chunks(buf);
    case Phase::Done: return Step::Complete;
    case Phase::Failed: return Step::Error;
  }
  return Step::Error;
}

std::string unchunked_request(const RequestHead& head, std::string_view request) {
  std::string_view head_bytes = request.substr(0, head.head_bytes);
  std::string body;
  for (size_t pos = head.head_bytes;;) {  // the framer checked every size line and CRLF
    const size_t eol = request.find("\r\n", pos);
    std::string_view line = request.substr(pos, eol - pos);
    const size_t size = std::stoull(std::string(line.substr(0, line.find(';'))), nullptr, 16);
    if (size == 0) break;  // the trailer section that follows is dropped
    body.append(request.substr(eol + 2, size));
    pos = eol + 2 + size + 2;
  }
  std::string out;
  out.reserve(head_bytes.size() + body.size() + 32);
  // The request line and every header but Transfer-Encoding, then the length of what remains.
  for (size_t pos = 0; pos + 2 < head_bytes.size();) {
    const size_t eol = head_bytes.find("\r\n", pos);
    std::string_view line = head_bytes.substr(pos, eol + 2 - pos);
    pos = eol + 2;
    const size_t colon = line.find(':');
    if (colon != std::string_view::npos && iequals(line.substr(0, colon), "Transfer-Encoding")) continue;
    out.append(line);
  }
  out += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n";
  out += body;
  return out;
}

}  // namespace pagoda::server
