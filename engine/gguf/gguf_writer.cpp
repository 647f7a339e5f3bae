// GGUF writer and the Value helpers. Tensors are produced by Fillers at write time, one at a
// time, so a multi-GB model is streamed to disk through a single tensor-sized buffer.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "engine/gguf/gguf.h"

namespace pagoda::gguf {

// ---- Value -----------------------------------------------------------------------------------

Value Value::from_string(std::string v) {
  Value x;
  x.type = ValueType::STRING;
  x.s = std::move(v);
  return x;
}
Value Value::from_u32(uint32_t v) {
  Value x;
  x.type = ValueType::UINT32;
  x.i = v;
  return x;
}
Value Value::from_i32(int32_t v) {
  Value x;
  x.type = ValueType::INT32;
  x.i = v;
  return x;
}
Value Value::from_u64(uint64_t v) {
  Value x;
  x.type = ValueType::UINT64;
  x.i = static_cast<int64_t>(v);
  return x;
}
Value Value::from_f32(float v) {
  Value x;
  x.type = ValueType::FLOAT32;
  x.f = v;
  return x;
}
Value Value::from_bool(bool v) {
  Value x;
  x.type = ValueType::BOOL;
  x.i = v ? 1 : 0;
  return x;
}
Value Value::string_array(std::vector<std::string> v) {
  Value x;
  x.type = ValueType::ARRAY;
  x.elem_type = ValueType::STRING;
  x.arr_str = std::move(v);
  return x;
}
Value Value::f32_array(std::vector<double> v) {
  Value x;
  x.type = ValueType::ARRAY;
  x.elem_type = ValueType::FLOAT32;
  x.arr_float = std::move(v);
  return x;
}
Value Value::i32_array(std::vector<int64_t> v) {
  Value x;
  x.type = ValueType::ARRAY;
  x.elem_type = ValueType::INT32;
  x.arr_int = std::move(v);
  return x;
}

size_t Value::array_size() const {
  switch (elem_type) {
    case ValueType::STRING: return arr_str.size();
    case ValueType::ARRAY: return arr_nested.size();
    case ValueType::FLOAT32: case ValueType::FLOAT64: return arr_float.size();
    default: return arr_int.size();
  }
}

// ---- serialisation ---------------------------------------------------------------------------

namespace {

class Out {
 public:
  explicit Out(std::vector<uint8_t>& buf) : buf_(buf) {}
  template <typename T>
  void put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    buf_.insert(buf_.end(), p, p + sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    buf_.insert(buf_.end(), s.begin(), s.end());
  }

 private:
  std::vector<uint8_t>& buf_;
};

void put_scalar(Out& o, ValueType t, int64_t i, double f) {
  switch (t) {
    case ValueType::UINT8: o.put<uint8_t>(uint8_t(i)); break;
    case ValueType::INT8: o.put<int8_t>(int8_t(i)); break;
    case ValueType::UINT16: o.put<uint16_t>(uint16_t(i)); break;
    case ValueType::INT16: o.put<int16_t>(int16_t(i)); break;
    case ValueType::UINT32: o.put<uint32_t>(uint32_t(i)); break;
    case ValueType::INT32: o.put<int32_t>(int32_t(i)); break;
    case ValueType::UINT64: o.put<uint64_t>(uint64_t(i)); break;
    case ValueType::INT64: o.put<int64_t>(i); break;
    case ValueType::BOOL: o.put<uint8_t>(i != 0 ? 1 : 0); break;
    case ValueType::FLOAT32: o.put<float>(float(f)); break;
    case ValueType::FLOAT64: o.put<double>(f); break;
    default: throw GgufError("GgufWriter: invalid scalar type");
  }
}

void put_array_body(Out& o, const Value& v);

void put_value(Out& o, const Value& v) {
  if (v.type == ValueType::STRING) o.put_string(v.s);
  else if (v.type == ValueType::ARRAY) put_array_body(o, v);
  else put_scalar(o, v.type, v.i, v.f);
}

void put_array_body(Out& o, const Value& v) {
  if (uint32_t(v.elem_type) > uint32_t(ValueType::FLOAT64))
    throw GgufError("GgufWriter: invalid array element type");
  o.put<uint32_t>(uint32_t(v.elem_type));
  o.put<uint64_t>(v.array_size());
  switch (v.elem_type) {
    case ValueType::STRING:
      for (const auto& s : v.arr_str) o.put_string(s);
      break;
    case ValueType::ARRAY:
      for (const auto& inner : v.arr_nested) {
        if (inner.type != ValueType::ARRAY)
          throw GgufError("GgufWriter: element of an array of arrays is not an array");
        put_array_body(o, inner);
      }
      break;
    case ValueType::FLOAT32: case ValueType::FLOAT64:
      for (double f : v.arr_float) put_scalar(o, v.elem_type, 0, f);
      break;
    default:
      for (int64_t i : v.arr_int) put_scalar(o, v.elem_type, i, 0);
  }
}

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

uint64_t tensor_bytes(const std::vector<int64_t>& dims, GgmlType type) {
  uint64_t rows = 1;
  for (size_t d = 1; d < dims.size(); ++d) rows *= uint64_t(dims[d]);
  return ggml_row_size(type, dims[0]) * rows;
}

}  // namespace

// ---- GgufWriter ------------------------------------------------------------------------------

GgufWriter::GgufWriter(uint32_t alignment) : alignment_(alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0)
    throw GgufError("GgufWriter: alignment " + std::to_string(alignment) + " is not a power of two");
  // Readers only learn a non-default alignment from the metadata.
  if (alignment != 32) kv_.emplace_back("general.alignment", Value::from_u32(alignment));
}

void GgufWriter::set(const std::string& key, Value v) {
  if (key == "general.alignment" && !(v.type == ValueType::UINT32 && v.i == alignment_))
    throw GgufError("GgufWriter: general.alignment must equal the writer's alignment (" +
                    std::to_string(alignment_) + ")");
  for (auto& kv : kv_)
    if (kv.first == key) {
      kv.second = std::move(v);
      return;
    }
  kv_.emplace_back(key, std::move(v));
}

void GgufWriter::add_tensor(const std::string& name, std::vector<int64_t> dims, GgmlType type,
                            std::vector<uint8_t> data) {
  auto shared = std::make_shared<std::vector<uint8_t>>(std::move(data));
  size_t have = shared->size();
  Filler fill = [shared](uint8_t* dst, size_t n) { std::memcpy(dst, shared->data(), n); };
  add_tensor(name, dims, type, std::move(fill));
  uint64_t want = tensor_bytes(dims, type);
  if (have != want) {
    tensors_.pop_back();
    throw GgufError("GgufWriter: tensor '" + name + "' has " + std::to_string(have) +
                    " bytes of data, its shape needs " + std::to_string(want));
  }
}

void GgufWriter::add_tensor(const std::string& name, std::vector<int64_t> dims, GgmlType type,
                            Filler fill) {
  const std::string where = "GgufWriter: tensor '" + name + "'";
  if (name.empty()) throw GgufError("GgufWriter: empty tensor name");
  for (const auto& t : tensors_)
    if (t.name == name) throw GgufError(where + " added twice");
  if (dims.empty() || dims.size() > 4) throw GgufError(where + " must have 1..4 dimensions");
  for (int64_t d : dims)
    if (d <= 0) throw GgufError(where + " has a non-positive dimension");
  const GgmlTypeInfo* info = ggml_type_info(static_cast<uint32_t>(type));
  if (info == nullptr) throw GgufError(where + " has an unknown type");
  if (dims[0] % info->block_size != 0)
    throw GgufError(where + " row length " + std::to_string(dims[0]) +
                    " is not a multiple of the " + info->name + " block size");
  tensors_.push_back({name, std::move(dims), type, std::move(fill)});
}

namespace {

// Header, metadata and tensor infos, padded to the alignment; offsets are filled in order.
std::vector<uint8_t> build_header(const std::vector<std::pair<std::string, Value>>& kv,
                                  const auto& tensors, uint32_t alignment) {
  std::vector<uint8_t> buf;
  Out o(buf);
  buf.insert(buf.end(), {'G', 'G', 'U', 'F'});
  o.put<uint32_t>(3);
  o.put<uint64_t>(tensors.size());
  o.put<uint64_t>(kv.size());
  for (const auto& [key, v] : kv) {
    o.put_string(key);
    o.put<uint32_t>(uint32_t(v.type));
    put_value(o, v);
  }
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    o.put_string(t.name);
    o.put<uint32_t>(uint32_t(t.dims.size()));
    for (int64_t d : t.dims) o.put<uint64_t>(uint64_t(d));
    o.put<uint32_t>(uint32_t(t.type));
    o.put<uint64_t>(offset);
    offset = align_up(offset + tensor_bytes(t.dims, t.type), alignment);
  }
  buf.resize(align_up(buf.size(), alignment), 0);
  return buf;
}

}  // namespace

std::vector<uint8_t> GgufWriter::to_bytes() const {
  std::vector<uint8_t> buf = build_header(kv_, tensors_, alignment_);
  const uint64_t data_start = buf.size();
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    uint64_t n = tensor_bytes(t.dims, t.type);
    buf.resize(data_start + align_up(offset + n, alignment_), 0);
    t.fill(buf.data() + data_start + offset, n);
    offset = align_up(offset + n, alignment_);
  }
  return buf;
}

void GgufWriter::write(const std::string& path) const {
  // Written under a temporary name and renamed at the end, so a failed or interrupted write
  // never leaves a truncated file at `path`.
  const std::string tmp = path + ".partial";
  std::vector<uint8_t> header = build_header(kv_, tensors_, alignment_);
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(tmp.c_str(), "wb"), std::fclose);
  if (!f) throw GgufError(tmp + ": cannot create: " + std::strerror(errno));
  try {
    auto put = [&](const uint8_t* p, size_t n) {
      if (n > 0 && std::fwrite(p, 1, n, f.get()) != n)
        throw GgufError(tmp + ": write failed: " + std::strerror(errno));
    };
    put(header.data(), header.size());
    std::vector<uint8_t> buf;  // one tensor at a time, reused
    for (const auto& t : tensors_) {
      uint64_t n = tensor_bytes(t.dims, t.type);
      uint64_t padded = align_up(n, alignment_);
      buf.assign(padded, 0);
      t.fill(buf.data(), n);
      put(buf.data(), padded);
    }
    if (std::fflush(f.get()) != 0) throw GgufError(tmp + ": write failed: " + std::strerror(errno));
    if (std::fclose(f.release()) != 0) throw GgufError(tmp + ": close failed: " + std::strerror(errno));
    if (std::rename(tmp.c_str(), path.c_str()) != 0)
      throw GgufError(path + ": cannot rename from " + tmp + ": " + std::strerror(errno));
  } catch (...) {
    f.reset();
    std::remove(tmp.c_str());
    throw;
  }
}

}  // namespace pagoda::gguf
