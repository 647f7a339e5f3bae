// ZmqPublisher: a ZeroMQ PUB socket on an endpoint (tcp://HOST:PORT), sending each batch
// as the three frames vLLM's publisher sends and llm-d's subscriber reads: the topic, the
// sequence number (8 bytes, big-endian, from 0, one per batch) and the msgpack payload.
// Sends never block: a subscriber too slow for the socket's queue loses batches, and sees the
// gap in the sequence numbers. As vLLM's publisher does, the socket binds when the endpoint is a
// wildcard ("*" or "::" in it, tcp://*:5557) or ipc:// / inproc://, and otherwise connects (to a
// subscriber that binds, e.g. one router collecting every replica's events). Built without
// libzmq, the constructor throws.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace pagoda::kv_events {

struct ZmqError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class ZmqPublisher {
 public:
  ZmqPublisher(const std::string& endpoint, std::string topic);
  ~ZmqPublisher();
  ZmqPublisher(const ZmqPublisher&) = delete;
  ZmqPublisher& operator=(const ZmqPublisher&) = delete;

  void send(const std::string& payload);
  uint64_t next_seq() const { return seq_; }
  static bool available();  // built with libzmq
  static bool binds(const std::string& endpoint);

 private:
  void* ctx_ = nullptr;
  void* sock_ = nullptr;
  std::string topic_;
  uint64_t seq_ = 0;
};

}  // namespace pagoda::kv_events
