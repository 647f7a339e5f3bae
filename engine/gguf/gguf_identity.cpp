// GGUF file identity: metadata + tensor infos + size (see gguf_identity.h).
#include "engine/gguf/gguf_identity.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace pagoda::gguf {

namespace {

// Two independent 64-bit streams (FNV-1a with different offsets, and a multiply-rotate).
struct Hasher {
  uint64_t a = 0xcbf29ce484222325ull, b = 0x84222325cbf29ce4ull;
  void bytes(const void* p, size_t n) {
    const auto* c = static_cast<const uint8_t*>(p);
    for (size_t i = 0; i < n; ++i) {
      a = (a ^ c[i]) * 0x100000001b3ull;
      b = ((b ^ c[i]) * 0x9fb21c651e98df25ull);
      b = (b << 23) | (b >> 41);
    }
  }
  template <class T>
  void pod(T v) { bytes(&v, sizeof v); }
  void str(const std::string& s) {
    pod(static_cast<uint64_t>(s.size()));
    bytes(s.data(), s.size());
  }
};

void hash_value(Hasher& h, const Value& v) {
  h.pod(static_cast<uint32_t>(v.type));
  switch (v.type) {
    case ValueType::STRING: h.str(v.s); break;
    case ValueType::FLOAT32:
    case ValueType::FLOAT64: h.pod(v.f); break;
    case ValueType::ARRAY:
      h.pod(static_cast<uint32_t>(v.elem_type));
      h.pod(static_cast<uint64_t>(v.array_size()));
      for (int64_t x : v.arr_int) h.pod(x);
      for (double x : v.arr_float) h.pod(x);
      for (const std::string& s : v.arr_str) h.str(s);
      for (const Value& n : v.arr_nested) hash_value(h, n);
      break;
    default: h.pod(v.i); break;
  }
}

}  // namespace

std::string file_identity(const GgufFile& file) {
  Hasher h;
  h.pod(file.version());
  h.pod(file.alignment());
  for (const auto& [key, value] : file.metadata()) {
    h.str(key);
    hash_value(h, value);
  }
  for (const TensorInfo& t : file.tensors()) {
    h.str(t.name);
    h.pod(static_cast<uint64_t>(t.dims.size()));
    for (int64_t d : t.dims) h.pod(d);
    h.pod(static_cast<uint32_t>(t.type));
    h.pod(t.offset);
    h.pod(t.nbytes);
    // A sample of the weights themselves (head, middle, tail; 4 KiB each at most), so that two
    // fine-tunes of one architecture with the same metadata still differ.
    const uint8_t* data = file.tensor_data(t);
    const size_t n = static_cast<size_t>(t.nbytes), k = std::min<size_t>(n, 4096);
    h.bytes(data, k);
    h.bytes(data + (n - k) / 2, k);
    h.bytes(data + (n - k), k);
  }
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(file.path(), ec);
  char out[64];
  std::snprintf(out, sizeof out, "%ju-%016llx%016llx", ec ? uintmax_t{0} : size, (unsigned long long)h.a,
                (unsigned long long)h.b);
  return out;
}

}  // namespace pagoda::gguf
