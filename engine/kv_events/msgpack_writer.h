// A minimal MessagePack encoder (the subset the KV event wire format uses: nil, unsigned and
// signed integers, float64, strings, arrays), each value in its shortest encoding as the
// MessagePack spec allows. Appends to one byte buffer; nothing to decode.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace pagoda::kv_events {

class MsgpackWriter {
 public:
  void nil() { out_ += char(0xc0); }
  void uint(uint64_t v);
  void int64(int64_t v);
  void float64(double v);
  void str(std::string_view s);
  void array(uint32_t n);  // the header; the caller writes n values after it

  const std::string& bytes() const { return out_; }
  std::string take() { return std::move(out_); }

 private:
  void be(uint64_t v, int n);  // the low n bytes of v, most significant first
  std::string out_;
};

}  // namespace pagoda::kv_events
