// SseWriter: one "data:" event per call (see sse_writer.h).
#include "server/http/sse_writer.h"

#include "server/http/api_error.h"

namespace pagoda::server {

bool SseWriter::write(const std::string& s) {
  if (sink_.is_writable && !sink_.is_writable()) return false;
  return sink_.write(s.data(), s.size());
}

bool SseWriter::event(const nlohmann::json& data) {
  return write("data: " + dump_json(data) + "\n\n");
}

bool SseWriter::done() {
  bool ok = write("data: [DONE]\n\n");
  sink_.done();
  return ok;
}

}  // namespace pagoda::server
