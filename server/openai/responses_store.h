// The Responses API's memory: responses created with `store: true`, kept so that a later
// request can continue the conversation (`previous_response_id`) and so that
// GET / DELETE /v1/responses/{id} find them. Bounded by a count and a byte budget, least
// recently used first out; a capacity of 0 turns storing off. Thread-safe.
#pragma once

#include <cstddef>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include <nlohmann/json.hpp>

namespace pagoda::server {

struct StoredResponse {
  nlohmann::json response;               // the response object, as answered
  nlohmann::ordered_json conversation;   // the chat messages it continued plus its own output
};

class ResponseStore {
 public:
  ResponseStore(size_t max_count, size_t max_bytes) : max_count_(max_count), max_bytes_(max_bytes) {}

  bool enabled() const { return max_count_ > 0 && max_bytes_ > 0; }
  // Keeps `r` under `id`, evicting the least recently used until it fits; one larger than the
  // whole budget is not kept.
  void put(const std::string& id, StoredResponse r);
  // The stored response (and marks it recently used); nullopt when unknown or evicted.
  std::optional<StoredResponse> get(const std::string& id);
  // False when unknown.
  bool erase(const std::string& id);

  size_t count() const;
  size_t bytes() const;

 private:
  struct Entry {
    std::string id;
    StoredResponse value;
    size_t bytes;
  };
  using List = std::list<Entry>;

  const size_t max_count_, max_bytes_;
  mutable std::mutex mu_;
  List lru_;  // most recently used first
  std::unordered_map<std::string, List::iterator> index_;
  size_t bytes_ = 0;
};

}  // namespace pagoda::server
