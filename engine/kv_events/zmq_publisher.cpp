#include "engine/kv_events/zmq_publisher.h"

#ifdef PAGODA_HAVE_ZMQ
#include <zmq.h>
#endif

namespace pagoda::kv_events {

bool ZmqPublisher::binds(const std::string& e) {
  return e.find('*') != std::string::npos || e.find("::") != std::string::npos || e.rfind("ipc://", 0) == 0 ||
         e.rfind("inproc://", 0) == 0;
}

#ifdef PAGODA_HAVE_ZMQ

bool ZmqPublisher::available() { return true; }

ZmqPublisher::ZmqPublisher(const std::string& endpoint, std::string topic) : topic_(std::move(topic)) {
  ctx_ = zmq_ctx_new();
  sock_ = ctx_ ? zmq_socket(ctx_, ZMQ_PUB) : nullptr;
  const int linger = 0;
  if (!sock_ || zmq_setsockopt(sock_, ZMQ_LINGER, &linger, sizeof linger) != 0 ||
      (binds(endpoint) ? zmq_bind(sock_, endpoint.c_str()) : zmq_connect(sock_, endpoint.c_str())) != 0) {
    const std::string why = zmq_strerror(zmq_errno());
    if (sock_) zmq_close(sock_);
    if (ctx_) zmq_ctx_term(ctx_);
    throw ZmqError("--kv-events: cannot " + std::string(binds(endpoint) ? "bind " : "connect to ") + endpoint + ": " + why);
  }
}

ZmqPublisher::~ZmqPublisher() {
  zmq_close(sock_);
  zmq_ctx_term(ctx_);
}

void ZmqPublisher::send(const std::string& payload) {
  char seq[8];
  for (int i = 0; i < 8; ++i) seq[i] = char(uint8_t(seq_ >> (56 - 8 * i)));
  ++seq_;
  // A full queue drops the whole message (ZeroMQ sends multipart messages atomically).
  zmq_send(sock_, topic_.data(), topic_.size(), ZMQ_SNDMORE | ZMQ_DONTWAIT);
  zmq_send(sock_, seq, sizeof seq, ZMQ_SNDMORE | ZMQ_DONTWAIT);
  zmq_send(sock_, payload.data(), payload.size(), ZMQ_DONTWAIT);
}

#else

bool ZmqPublisher::available() { return false; }
ZmqPublisher::ZmqPublisher(const std::string&, std::string) {
  throw ZmqError("--kv-events: this build has no ZeroMQ (install libzmq3-dev and rebuild)");
}
ZmqPublisher::~ZmqPublisher() = default;
void ZmqPublisher::send(const std::string&) {}

#endif

}  // namespace pagoda::kv_events
