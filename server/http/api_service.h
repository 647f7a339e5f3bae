// The API as the transport sees it: a service (health, engine figures for /metrics) and the
// table of its routes. server/openai implements both; cmd_serve hands the routes to HttpServer
// when it starts and the service once the model is loaded. Nothing here knows the OpenAI API,
// so the HTTP layer never includes it.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <httplib.h>

#include "engine/engine_api.h"
#include "server/http/access_log.h"

namespace pagoda::server {

class ApiService {
 public:
  virtual ~ApiService() = default;
  // GET /health while the service is live and the server is not draining.
  virtual void health(const httplib::Request& req, httplib::Response& res) = 0;
  // The engine's gauges and counters, for /metrics.
  virtual EngineStats engine_stats() const = 0;
  // Sequences submitted to the engine and not finished, and the engine's admission bound (0:
  // none): HttpServer compares them to refuse (429) requests that would otherwise wait for a
  // worker.
  virtual int inflight_seqs() const { return 0; }
  virtual int admission_limit() const { return 0; }
  // Ends the work in flight, and any submitted from now on, at once: a drain's grace is over,
  // and each request is answered with what it has.
  virtual void abort_all() {}
};

// One endpoint of the API. HttpServer registers every route when it is made, so that routes
// answer 503 while the model loads and other paths 404; `handle` runs with the live service.
// `record` is the request's access-log record: what the handler fills in (request id, tokens,
// TTFT), the HTTP layer writes once the response has been sent.
struct ApiRoute {
  using Handler =
      std::function<void(ApiService& service, const httplib::Request& req, httplib::Response& res,
                         const std::shared_ptr<AccessRecord>& record)>;
  std::string method;   // "GET", "POST" or "DELETE"
  std::string pattern;  // a cpp-httplib path pattern ("/v1/models/(.+)")
  Handler handle;
};

// A route answered by a member function of the service type S. The service HttpServer is given
// must be an S (a different one answers 500: std::bad_cast reaches the exception handler).
template <class S>
ApiRoute member_route(std::string method, std::string pattern,
                      void (S::*fn)(const httplib::Request&, httplib::Response&,
                                    const std::shared_ptr<AccessRecord>&)) {
  return {std::move(method), std::move(pattern),
          [fn](ApiService& service, const httplib::Request& req, httplib::Response& res,
               const std::shared_ptr<AccessRecord>& record) {
            (dynamic_cast<S&>(service).*fn)(req, res, record);
          }};
}

// The same for an endpoint that leaves the access record as it is.
template <class S>
ApiRoute member_route(std::string method, std::string pattern,
                      void (S::*fn)(const httplib::Request&, httplib::Response&)) {
  return {std::move(method), std::move(pattern),
          [fn](ApiService& service, const httplib::Request& req, httplib::Response& res,
               const std::shared_ptr<AccessRecord>&) { (dynamic_cast<S&>(service).*fn)(req, res); }};
}

}  // namespace pagoda::server
