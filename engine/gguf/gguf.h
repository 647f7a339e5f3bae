// GGUF v3 reader (memory-mapped, every field validated) and writer.
//
// Format: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md (little-endian):
//   magic "GGUF", u32 version (3), u64 tensor_count, u64 kv_count, kv pairs, tensor infos,
//   padding to `general.alignment` (default 32), tensor data.
// Any malformed input throws GgufError whose message names the problem and the byte offset;
// lengths and counts are checked against the bytes that remain before anything is allocated.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kernels/ggml_type.h"

namespace pagoda::gguf {

struct GgufError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class ValueType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6,
  BOOL = 7, STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};

// One metadata value. Scalars use the field matching their type family; arrays keep their
// element type and fill exactly one of the arr_* vectors (bools and all integer types go to
// arr_int, floats to arr_float, strings to arr_str, nested arrays to arr_nested).
struct Value {
  ValueType type = ValueType::UINT32;
  ValueType elem_type = ValueType::UINT8;  // ARRAY only
  int64_t i = 0;                           // every integer type (u64 stored bit-cast) and BOOL
  double f = 0;                            // FLOAT32 / FLOAT64
  std::string s;                           // STRING
  std::vector<int64_t> arr_int;
  std::vector<double> arr_float;
  std::vector<std::string> arr_str;
  std::vector<Value> arr_nested;

  static Value from_string(std::string v);
  static Value from_u32(uint32_t v);
  static Value from_i32(int32_t v);
  static Value from_u64(uint64_t v);
  static Value from_f32(float v);
  static Value from_bool(bool v);
  static Value string_array(std::vector<std::string> v);
  static Value f32_array(std::vector<double> v);
  static Value i32_array(std::vector<int64_t> v);
  size_t array_size() const;
};

struct TensorInfo {
  std::string name;
  std::vector<int64_t> dims;  // ggml order: dims[0] is the contiguous (row) dimension
  GgmlType type = GgmlType::F32;
  uint64_t offset = 0;        // from the start of the data section
  uint64_t nbytes = 0;
  int64_t n_elements() const;
};

class GgufFile {
 public:
  // Maps and parses `path`; throws GgufError ("<path>: <problem> at offset N").
  static GgufFile open(const std::string& path);
  // Parses an in-memory image (used by tests); the bytes are copied and owned.
  static GgufFile from_bytes(std::vector<uint8_t> bytes, std::string name = "<memory>");

  GgufFile(GgufFile&&) noexcept;
  GgufFile& operator=(GgufFile&&) noexcept;
  ~GgufFile();

  uint32_t version() const;
  uint32_t alignment() const;
  // Metadata in file order.
  const std::vector<std::pair<std::string, Value>>& metadata() const;
  const Value* find(std::string_view key) const;
  // Typed getters: nullopt when absent; GgufError when present with an incompatible type.
  std::optional<std::string> get_string(std::string_view key) const;
  std::optional<int64_t> get_int(std::string_view key) const;   // any integer type
  std::optional<double> get_float(std::string_view key) const;  // float or integer types
  std::optional<bool> get_bool(std::string_view key) const;
  const std::vector<std::string>* get_string_array(std::string_view key) const;
  const std::vector<int64_t>* get_int_array(std::string_view key) const;
  const std::vector<double>* get_float_array(std::string_view key) const;

  const std::vector<TensorInfo>& tensors() const;
  const TensorInfo* find_tensor(std::string_view name) const;
  // Pointer to the tensor's bytes inside the mapping (valid while this object lives).
  const uint8_t* tensor_data(const TensorInfo& t) const;
  const std::string& path() const;

 private:
  struct Impl;
  explicit GgufFile(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Builds a GGUF v3 file. Tensor data is written aligned to `alignment`.
class GgufWriter {
 public:
  explicit GgufWriter(uint32_t alignment = 32);
  void set(const std::string& key, Value v);  // replaces an existing key, keeps order
  // `data` must hold ggml_row_size(type, dims[0]) * (product of other dims) bytes.
  void add_tensor(const std::string& name, std::vector<int64_t> dims, GgmlType type,
                  std::vector<uint8_t> data);
  // Streaming form for large models: `fill(dst, nbytes)` is called while writing, one tensor
  // at a time, so a multi-GB model never has to sit in memory.
  using Filler = std::function<void(uint8_t* dst, size_t nbytes)>;
  void add_tensor(const std::string& name, std::vector<int64_t> dims, GgmlType type, Filler fill);
  std::vector<uint8_t> to_bytes() const;  // small files / tests
  void write(const std::string& path) const;  // throws GgufError on I/O failure

  struct PendingTensor {
    std::string name;
    std::vector<int64_t> dims;
    GgmlType type;
    Filler fill;
  };
  // The tensors added so far, in order (their shapes and types can be checked before writing).
  const std::vector<PendingTensor>& tensors() const { return tensors_; }

 private:
  uint32_t alignment_;
  std::vector<std::pair<std::string, Value>> kv_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace pagoda::gguf
