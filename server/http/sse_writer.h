// Server-Sent Events over a chunked cpp-httplib response: what a streamed answer is written
// with.
#pragma once

#include <string>

#include <httplib.h>
#include <nlohmann/json.hpp>

namespace pagoda::server {

// Writes Server-Sent Events into a chunked response. Every write reports whether the client
// is still there.
class SseWriter {
 public:
  explicit SseWriter(httplib::DataSink& sink) : sink_(sink) {}
  bool event(const nlohmann::json& data);  // "data: {json}\n\n"
  bool done();                              // "data: [DONE]\n\n" and the end of the body

 private:
  bool write(const std::string& s);
  httplib::DataSink& sink_;
};

}  // namespace pagoda::server
