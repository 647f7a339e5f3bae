// HttpServer: set-up, auth, CORS, the route wrappers and the access log (see http_server.h);
// sockets, serving and stopping are in http_transport.cpp.
#include "server/http/http_server.h"

#include <strings.h>

#include <cerrno>
#include <stdexcept>
#include <iterator>

#include "server/http/api_error.h"
#include "server/http/metrics.h"

namespace pagoda::server {

// ---- auth -------------------------------------------------------------------------------------

bool constant_time_equal(const std::string& a, const std::string& b) {
  size_t n = std::max(a.size(), b.size());
  volatile unsigned char acc = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    unsigned char x = i < a.size() ? (unsigned char)a[i] : 0;
    unsigned char y = i < b.size() ? (unsigned char)b[i] : 0;
    acc = acc | (unsigned char)(x ^ y);
  }
  return acc == 0;
}

namespace {

double ms_since(std::chrono::steady_clock::time_point t) {
  if (t == std::chrono::steady_clock::time_point{}) return 0;
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

// ---- HttpServer -------------------------------------------------------------------------------

HttpServer::HttpServer(Options opts, Metrics& metrics, std::vector<ApiRoute> routes)
    : opts_(std::move(opts)), metrics_(metrics) {
  svr_.set_payload_max_length(opts_.max_body_bytes);
  // What the Keep-Alive response header announces; the connection loop enforces it.
  svr_.set_keep_alive_timeout((time_t)opts_.keep_alive_timeout_s);
  svr_.set_keep_alive_max_count(1000000);
  install_routes(routes);
  ConnectionLimits lim;
  lim.max_connections = std::max(1, opts_.max_connections);
  lim.header_timeout_s = opts_.header_timeout_s;
  lim.body_min_rate = opts_.body_min_rate;
  lim.keep_alive_timeout_s = opts_.keep_alive_timeout_s;
  lim.write_timeout_s = opts_.write_timeout_s;
  lim.framing.max_body_bytes = opts_.max_body_bytes;
  lim.max_buffered_body_bytes = opts_.max_buffered_body_bytes ? opts_.max_buffered_body_bytes
                                                              : 4 * opts_.max_body_bytes;
  lim.workers = std::max(4, opts_.worker_threads);
  ConnectionLoop::Hooks hooks;
  hooks.serve = [this](ServedRequest& r) { return serve(r); };
  hooks.refusal_response = [this](const Refusal& r) { return refusal_response(r); };
  hooks.at_capacity = [this] { return at_capacity(); };
  loop_ = std::make_unique<ConnectionLoop>(lim, std::move(hooks));
}

void HttpServer::set_service(std::shared_ptr<ApiService> service) {
  std::lock_guard<std::mutex> lk(mu_);
  service_ = std::move(service);
}

std::shared_ptr<ApiService> HttpServer::service() const {
  std::lock_guard<std::mutex> lk(mu_);
  return service_;
}

std::shared_ptr<AccessRecord> HttpServer::open_record(const httplib::Request& req) {
  auto rec = std::make_shared<AccessRecord>();
  rec->start = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lk(records_mu_);
  records_[&req] = rec;
  return rec;
}

std::shared_ptr<AccessRecord> HttpServer::record_of(const httplib::Request& req) {
  std::lock_guard<std::mutex> lk(records_mu_);
  auto it = records_.find(&req);
  return it != records_.end() ? it->second : std::make_shared<AccessRecord>();
}

std::shared_ptr<AccessRecord> HttpServer::close_record(const httplib::Request& req) {
  std::lock_guard<std::mutex> lk(records_mu_);
  auto it = records_.find(&req);
  // A request the library refused before routing (a malformed request line) has none.
  if (it == records_.end()) return std::make_shared<AccessRecord>();
  std::shared_ptr<AccessRecord> rec = std::move(it->second);
  records_.erase(it);
  return rec;
}

bool HttpServer::authorized(const httplib::Request& req) const {
  if (opts_.api_key.empty()) return true;
  // The raw header values (serve() puts them back: the library percent-decodes them). Exactly
  // one Authorization header, whose whole value is "Bearer KEY": no trailing bytes, no NUL; or,
  // as Anthropic's clients send it, exactly one x-api-key header whose whole value is KEY.
  auto [first, last] = req.headers.equal_range("Authorization");
  const bool one = first != last && std::next(first) == last;
  const std::string auth = one ? first->second : std::string();
  constexpr size_t kPrefix = 7;  // "Bearer ", the scheme being case-insensitive (RFC 7235)
  bool scheme_ok = auth.size() >= kPrefix && strncasecmp(auth.c_str(), "Bearer ", kPrefix) == 0;
  // The key is compared even when the scheme is wrong, so timing tells nothing either way.
  bool key_ok = constant_time_equal(scheme_ok ? auth.substr(kPrefix) : std::string(), opts_.api_key);
  auto [xfirst, xlast] = req.headers.equal_range("x-api-key");
  const bool one_x = xfirst != xlast && std::next(xfirst) == xlast;
  bool x_ok = constant_time_equal(one_x ? xfirst->second : std::string(), opts_.api_key);
  return (one && scheme_ok && key_ok) || (one_x && x_ok);
}

void HttpServer::add_cors(const httplib::Request& req, httplib::Response& res) const {
  // Idempotent: an error page may pass here after the pre-routing handler did.
  if (opts_.cors_origins.empty() || res.has_header("Access-Control-Allow-Origin")) return;
  std::string origin = req.get_header_value("Origin");
  bool any = false, match = false;
  for (const std::string& o : opts_.cors_origins) {
    any |= o == "*";
    match |= !origin.empty() && o == origin;
  }
  if (any) {
    res.set_header("Access-Control-Allow-Origin", "*");
  } else if (match) {
    res.set_header("Access-Control-Allow-Origin", origin);
    res.set_header("Vary", "Origin");
  } else {
    return;
  }
  res.set_header("Access-Control-Expose-Headers", "X-Request-Id, Retry-After");
}

void HttpServer::install_routes(const std::vector<ApiRoute>& routes) {
  // Runs before every route: times the request, answers CORS preflights, checks the key, and
  // refuses work while loading or draining.
  svr_.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    open_record(req);
    add_cors(req, res);
    if (req.method == "OPTIONS") {
      res.status = 204;
      res.set_header("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
      res.set_header("Access-Control-Allow-Headers",
                     "Authorization, Content-Type, OpenAI-Organization, OpenAI-Project, "
                     "X-Api-Key, Anthropic-Version, Anthropic-Beta, X-Stainless-*, *");
      res.set_header("Access-Control-Max-Age", "600");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (req.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
    if (!authorized(req)) {
      send_error(res,
                 ApiError(401, "Incorrect or missing API key. Send 'Authorization: Bearer <key>' or 'x-api-key: <key>'.",
                          "authentication_error", "", "invalid_api_key"),
                 error_shape_for_path(req.path));
      res.set_header("WWW-Authenticate", "Bearer");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (draining_) {
      send_error(res, ApiError(503, "The server is shutting down.", "service_unavailable_error", "",
                               "shutting_down"),
                 error_shape_for_path(req.path));
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });

  svr_.Get("/health", [this](const httplib::Request& req, httplib::Response& res) {
    std::shared_ptr<ApiService> h = service();
    if (draining_) {
      res.status = 503;
      res.set_content(R"({"status":"draining"})", "application/json");
    } else if (!h) {
      res.status = 503;
      res.set_content(R"({"status":"loading"})", "application/json");
    } else {
      h->health(req, res);
    }
  });
  svr_.Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
    std::shared_ptr<ApiService> h = service();
    ConnectionStats conn = loop_->stats();
    res.set_content(metrics_.render(h ? h->engine_stats() : EngineStats{}, &conn),
                    "text/plain; version=0.0.4; charset=utf-8");
  });
  if (!opts_.version_json.empty())
    svr_.Get("/version", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(opts_.version_json, "application/json");
    });
  // The API's routes answer 503 until the model is loaded.
  for (const ApiRoute& r : routes) {
    auto serve = [this, handle = r.handle](const httplib::Request& req, httplib::Response& res) {
      std::shared_ptr<ApiService> h = service();
      if (!h) {
        send_error(res, ApiError(503, "The model is still loading.", "service_unavailable_error", "",
                                 "model_loading"),
                   error_shape_for_path(req.path));
        res.set_header("Retry-After", "1");
        return;
      }
      handle(*h, req, res, record_of(req));
    };
    if (r.method == "GET")
      svr_.Get(r.pattern, serve);
    else if (r.method == "POST")
      svr_.Post(r.pattern, serve);
    else if (r.method == "DELETE")
      svr_.Delete(r.pattern, serve);
    else
      throw std::invalid_argument("unsupported method in the route table: " + r.method);
  }

  // Anything the library answers with an empty error body (404 unknown route, 413 too large,
  // 400 unparsable request line, ...) gets the OpenAI error shape.
  svr_.set_error_handler(httplib::Server::HandlerWithResponse(
      [this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    add_cors(req, res);
    std::string msg;
    switch (res.status) {
      case 404: msg = "Unknown route: " + req.method + " " + req.path; break;
      case 413:
        msg = "The request body is larger than the limit of " +
              std::to_string(opts_.max_body_bytes) + " bytes.";
        break;
      case 400: msg = "Malformed HTTP request."; break;
      default: msg = "HTTP error " + std::to_string(res.status) + ".";
    }
    send_error(res, ApiError(res.status, msg, error_type_for_status(res.status), "",
                             res.status == 404 ? "not_found" : ""),
               error_shape_for_path(req.path));
    return httplib::Server::HandlerResponse::Handled;
  }));
  svr_.set_exception_handler(
      [](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
        std::string msg = "Internal server error.";
        try {
          if (ep) std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          msg = std::string("Internal server error: ") + e.what();
        } catch (...) {
        }
        send_error(res, ApiError(500, msg, "server_error"), error_shape_for_path(req.path));
      });
  // Before the response is written: one that began before a drain and ends during it says
  // "Connection: close" (serve() closes the connection then), so that a kept-alive client does
  // not send its next request into the close and lose it.
  svr_.set_post_routing_handler([this](const httplib::Request&, httplib::Response& res) {
    if (draining_ && !res.has_header("Connection")) res.set_header("Connection", "close");
  });
  // After the response is written: status counters and the access line.
  svr_.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    std::shared_ptr<AccessRecord> rec = close_record(req);
    int status = rec->status_override ? rec->status_override : res.status;
    metrics_.record_status(status);
    if (req.path != "/health" && req.path != "/metrics")
      log_access(req.method, req.path, res.status, *rec, ms_since(rec->start));
  });
}

}  // namespace pagoda::server
