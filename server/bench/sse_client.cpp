#include "server/bench/sse_client.h"

#include <chrono>

#include <httplib.h>

namespace pagoda::bench {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

httplib::Headers auth_headers(const ClientTarget& t) {
  httplib::Headers h;
  if (!t.api_key.empty()) h.emplace("Authorization", "Bearer " + t.api_key);
  return h;
}

void configure(httplib::Client& cli, const ClientTarget& t) {
  const auto secs = static_cast<time_t>(t.timeout_s);
  cli.set_connection_timeout(10, 0);
  cli.set_read_timeout(secs, 0);
  cli.set_write_timeout(secs, 0);
  cli.set_keep_alive(false);
}

// Feeds SSE bytes and hands every complete `data:` payload to the callback.
class SseParser {
 public:
  template <class F>
  void feed(const char* data, size_t n, F&& on_event) {
    buf_.append(data, n);
    size_t pos;
    while ((pos = buf_.find('\n')) != std::string::npos) {
      std::string line = buf_.substr(0, pos);
      buf_.erase(0, pos + 1);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.rfind("data:", 0) == 0) {
        size_t start = line.size() > 5 && line[5] == ' ' ? 6 : 5;
        on_event(line.substr(start));
      }
    }
  }

 private:
  std::string buf_;
};

// The text of one chunk's first choice: delta.content (chat) or text (completions).
std::string chunk_text(const nlohmann::json& chunk, bool chat) {
  if (!chunk.contains("choices") || !chunk["choices"].is_array() || chunk["choices"].empty()) return "";
  const auto& c = chunk["choices"][0];
  if (chat) {
    if (c.contains("delta") && c["delta"].is_object() && c["delta"].contains("content") &&
        c["delta"]["content"].is_string())
      return c["delta"]["content"].get<std::string>();
    return "";
  }
  return c.contains("text") && c["text"].is_string() ? c["text"].get<std::string>() : "";
}

}  // namespace

const char* error_kind_name(ErrorKind k) {
  switch (k) {
    case ErrorKind::None: return "none";
    case ErrorKind::Connect: return "connect";
    case ErrorKind::Http4xx: return "http_4xx";
    case ErrorKind::Http429: return "http_429";
    case ErrorKind::Http5xx: return "http_5xx";
    case ErrorKind::Timeout: return "timeout";
    case ErrorKind::Incomplete: return "incomplete_stream";
    case ErrorKind::BadResponse: return "bad_response";
  }
  return "unknown";
}

RequestResult run_streaming_request(const ClientTarget& target, const std::string& path,
                                    const nlohmann::json& body, bool chat) {
  RequestResult r;
  const auto t0 = Clock::now();
  httplib::Client cli(target.url);
  configure(cli, target);

  SseParser parser;
  bool saw_done = false;
  bool bad_json = false;
  int chunks_with_text = 0;
  std::string error_body;

  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.headers = auth_headers(target);
  req.headers.emplace("Accept", "text/event-stream");
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.response_handler = [&](const httplib::Response& res) {
    r.http_status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (r.http_status != 200) {
      error_body.append(data, std::min<size_t>(n, 4096));
      return true;
    }
    parser.feed(data, n, [&](const std::string& payload) {
      if (payload == "[DONE]") {
        saw_done = true;
        return;
      }
      auto j = nlohmann::json::parse(payload, nullptr, false);
      if (j.is_discarded() || !j.is_object()) {
        bad_json = true;
        return;
      }
      if (j.contains("error")) {
        r.error = ErrorKind::BadResponse;
        r.error_message = j["error"].value("message", "error event in stream");
        return;
      }
      std::string text = chunk_text(j, chat);
      if (!text.empty()) {
        const double t = seconds_since(t0);
        if (r.ttft_s < 0) r.ttft_s = t;
        r.chunk_times_s.push_back(t);
        r.text += text;
        ++chunks_with_text;
      }
      if (j.contains("usage") && j["usage"].is_object()) {
        r.prompt_tokens = j["usage"].value("prompt_tokens", 0);
        r.completion_tokens = j["usage"].value("completion_tokens", 0);
        r.usage_reported = true;
      }
    });
    return true;
  };

  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  const bool ok = cli.send(req, res, err);
  r.e2e_s = seconds_since(t0);

  if (r.error != ErrorKind::None) return r;
  if (!ok) {
    if (r.http_status == 200 && (chunks_with_text > 0 || err == httplib::Error::Read)) {
      r.error = err == httplib::Error::Read && r.e2e_s >= target.timeout_s ? ErrorKind::Timeout
                                                                            : ErrorKind::Incomplete;
    } else if (err == httplib::Error::Connection || err == httplib::Error::ConnectionTimeout) {
      r.error = ErrorKind::Connect;
    } else if (err == httplib::Error::Read || err == httplib::Error::Write) {
      r.error = r.e2e_s >= target.timeout_s ? ErrorKind::Timeout : ErrorKind::Incomplete;
    } else {
      r.error = ErrorKind::Connect;
    }
    r.error_message = httplib::to_string(err);
    return r;
  }
  if (r.http_status != 200) {
    r.error = r.http_status == 429 ? ErrorKind::Http429
              : r.http_status >= 500 ? ErrorKind::Http5xx
                                     : ErrorKind::Http4xx;
    auto j = nlohmann::json::parse(error_body, nullptr, false);
    r.error_message = (!j.is_discarded() && j.is_object() && j.contains("error") && j["error"].is_object())
                          ? j["error"].value("message", error_body)
                          : error_body.substr(0, 200);
    return r;
  }
  if (bad_json) {
    r.error = ErrorKind::BadResponse;
    r.error_message = "a stream chunk was not valid JSON";
  } else if (!saw_done) {
    r.error = ErrorKind::Incomplete;
    r.error_message = "stream ended without [DONE]";
  }
  if (!r.usage_reported) r.completion_tokens = chunks_with_text;
  return r;
}

std::string first_model_id(const ClientTarget& target, std::string* error) {
  httplib::Client cli(target.url);
  configure(cli, target);
  auto res = cli.Get("/v1/models", auth_headers(target));
  if (!res) {
    if (error) *error = "GET /v1/models: " + httplib::to_string(res.error());
    return "";
  }
  if (res->status == 401 || res->status == 403) {
    if (error) *error = std::to_string(res->status) + ": pass --api-key";
    return "";
  }
  auto j = nlohmann::json::parse(res->body, nullptr, false);
  if (res->status != 200 || j.is_discarded() || !j.contains("data") || !j["data"].is_array() ||
      j["data"].empty() || !j["data"][0].contains("id")) {
    if (error) *error = "/v1/models answered " + std::to_string(res->status);
    return "";
  }
  return j["data"][0]["id"].get<std::string>();
}

nlohmann::json get_json(const ClientTarget& target, const std::string& path) {
  httplib::Client cli(target.url);
  configure(cli, target);
  auto res = cli.Get(path, auth_headers(target));
  if (!res || res->status != 200) return nullptr;
  auto j = nlohmann::json::parse(res->body, nullptr, false);
  return j.is_discarded() ? nlohmann::json(nullptr) : j;
}

}  // namespace pagoda::bench
