// GGUF reader: maps the file and parses it with a bounds-checked cursor. Every count and length
// is checked against the bytes that remain before anything is allocated, so a corrupted file
// can only ever produce a GgufError, never a crash or a huge allocation.
#include "engine/gguf/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <unordered_map>

namespace pagoda::gguf {

namespace {

constexpr uint32_t kDefaultAlignment = 32;
constexpr int kMaxArrayDepth = 8;     // nested arrays deeper than this are refused
// Decoded arrays take more memory than their encoding (a u8 becomes an int64, a nested array a
// Value), so the elements of all metadata arrays together are capped as well. Real files hold
// a few million at most (vocabularies, merges); nested arrays are not used by any known key.
constexpr uint64_t kMaxArrayElements = uint64_t(1) << 26;
constexpr uint64_t kMaxNestedArrays = uint64_t(1) << 16;

struct ArrayBudget {
  uint64_t elements = kMaxArrayElements;
  uint64_t nested = kMaxNestedArrays;
};
constexpr int kMaxDims = 4;           // GGML_MAX_DIMS
constexpr uint64_t kMaxKeyLength = 65535;
constexpr uint64_t kMaxEntries = uint64_t(1) << 20;  // metadata keys, tensors
// Smallest encodings, used to bound counts by the bytes that remain:
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;              // key length + type + a u8 value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;  // name, n_dims, 1 dim, type, offset

// Read-only mapping of a whole file, unmapped on destruction.
class Mapping {
 public:
  Mapping() = default;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() {
    if (data_ != nullptr) munmap(data_, size_);
  }
  static std::unique_ptr<Mapping> map(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw GgufError(path + ": cannot open: " + std::strerror(errno));
    struct stat st {};
    if (fstat(fd, &st) != 0) {
      int err = errno;
      ::close(fd);
      throw GgufError(path + ": cannot stat: " + std::strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd);
      throw GgufError(path + ": not a regular file");
    }
    auto m = std::make_unique<Mapping>();
    m->size_ = static_cast<size_t>(st.st_size);
    if (m->size_ > 0) {
      void* p = mmap(nullptr, m->size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        int err = errno;
        ::close(fd);
        throw GgufError(path + ": cannot mmap: " + std::strerror(err));
      }
      m->data_ = p;
    }
    ::close(fd);  // the mapping stays valid without the descriptor
    return m;
  }
  const uint8_t* data() const { return static_cast<const uint8_t*>(data_); }
  size_t size() const { return size_; }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

// Bounds-checked little-endian reader over [data, data + size).
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size, const std::string& name)
      : data_(data), size_(size), name_(name) {}

  [[noreturn]] void fail(const std::string& problem) const { fail_at(problem, pos_); }
  [[noreturn]] void fail_at(const std::string& problem, uint64_t at) const {
    throw GgufError(name_ + ": " + problem + " at offset " + std::to_string(at));
  }

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }

  void need(uint64_t n, const char* what) const {
    if (n > remaining())
      fail(std::string("truncated file: ") + what + " needs " + std::to_string(n) +
           " bytes, " + std::to_string(remaining()) + " left");
  }
  template <typename T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string read_string(const char* what, uint64_t max_len = std::numeric_limits<uint64_t>::max()) {
    uint64_t start = pos_;
    uint64_t len = read<uint64_t>(what);
    if (len > max_len)
      fail_at(std::string(what) + " length " + std::to_string(len) + " exceeds the limit of " +
                  std::to_string(max_len),
              start);
    if (len > remaining())
      fail_at(std::string(what) + " length " + std::to_string(len) + " exceeds the " +
                  std::to_string(remaining()) + " bytes left",
              start);
    std::string s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(len));
    pos_ += len;
    return s;
  }

 private:
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
  const std::string& name_;
};

const char* value_type_name(uint32_t t) {
  static const char* names[] = {"uint8", "int8",  "uint16", "int16", "uint32", "int32", "float32",
                                "bool",  "string", "array", "uint64", "int64", "float64"};
  return t < 13 ? names[t] : "unknown";
}

bool is_integer(ValueType t) {
  switch (t) {
    case ValueType::UINT8: case ValueType::INT8: case ValueType::UINT16: case ValueType::INT16:
    case ValueType::UINT32: case ValueType::INT32: case ValueType::UINT64: case ValueType::INT64:
      return true;
    default:
      return false;
  }
}
bool is_float(ValueType t) { return t == ValueType::FLOAT32 || t == ValueType::FLOAT64; }

// Encoded size of one scalar element, or 0 for STRING / ARRAY (variable length).
uint64_t scalar_size(ValueType t) {
  switch (t) {
    case ValueType::UINT8: case ValueType::INT8: case ValueType::BOOL: return 1;
    case ValueType::UINT16: case ValueType::INT16: return 2;
    case ValueType::UINT32: case ValueType::INT32: case ValueType::FLOAT32: return 4;
    case ValueType::UINT64: case ValueType::INT64: case ValueType::FLOAT64: return 8;
    default: return 0;
  }
}

// Smallest encoding of one array element of type t (used to bound array lengths).
uint64_t min_element_size(ValueType t) {
  if (t == ValueType::STRING) return 8;
  if (t == ValueType::ARRAY) return 4 + 8;
  return scalar_size(t);
}

ValueType read_value_type(Cursor& c, const char* what) {
  uint64_t at = c.pos();
  uint32_t t = c.read<uint32_t>(what);
  if (t > static_cast<uint32_t>(ValueType::FLOAT64))
    c.fail_at(std::string("unknown ") + what + " " + std::to_string(t), at);
  return static_cast<ValueType>(t);
}

// Reads one scalar of type t (not STRING / ARRAY) into an integer or a double.
void read_scalar(Cursor& c, ValueType t, int64_t& i, double& f) {
  switch (t) {
    case ValueType::UINT8: i = c.read<uint8_t>("uint8 value"); return;
    case ValueType::INT8: i = c.read<int8_t>("int8 value"); return;
    case ValueType::UINT16: i = c.read<uint16_t>("uint16 value"); return;
    case ValueType::INT16: i = c.read<int16_t>("int16 value"); return;
    case ValueType::UINT32: i = c.read<uint32_t>("uint32 value"); return;
    case ValueType::INT32: i = c.read<int32_t>("int32 value"); return;
    case ValueType::UINT64: i = static_cast<int64_t>(c.read<uint64_t>("uint64 value")); return;
    case ValueType::INT64: i = c.read<int64_t>("int64 value"); return;
    case ValueType::FLOAT32: f = c.read<float>("float32 value"); return;
    case ValueType::FLOAT64: f = c.read<double>("float64 value"); return;
    case ValueType::BOOL: {
      uint64_t at = c.pos();
      uint8_t b = c.read<uint8_t>("bool value");
      if (b > 1) c.fail_at("invalid bool value " + std::to_string(b), at);
      i = b;
      return;
    }
    default: c.fail("internal: not a scalar type");
  }
}

// Reads the body of an array (element type, count, elements) into v.
void read_array(Cursor& c, Value& v, int depth, ArrayBudget& budget) {
  if (depth >= kMaxArrayDepth)
    c.fail("arrays nested deeper than " + std::to_string(kMaxArrayDepth) + " levels");
  v.type = ValueType::ARRAY;
  v.elem_type = read_value_type(c, "array element type");
  uint64_t at = c.pos();
  uint64_t n = c.read<uint64_t>("array length");
  uint64_t min_size = min_element_size(v.elem_type);
  if (n > c.remaining() / min_size)
    c.fail_at("array length " + std::to_string(n) + " of " + value_type_name(uint32_t(v.elem_type)) +
                  " exceeds the " + std::to_string(c.remaining()) + " bytes left",
              at);
  if (n > budget.elements)
    c.fail_at("array length " + std::to_string(n) + " exceeds the limit of " +
                  std::to_string(kMaxArrayElements) + " metadata array elements per file",
              at);
  budget.elements -= n;
  const ValueType et = v.elem_type;
  if (et == ValueType::ARRAY) {
    if (n > budget.nested)
      c.fail_at("more than " + std::to_string(kMaxNestedArrays) + " nested arrays", at);
    budget.nested -= n;
  }
  if (et == ValueType::STRING) {
    v.arr_str.reserve(n);
    for (uint64_t k = 0; k < n; ++k) v.arr_str.push_back(c.read_string("array string"));
  } else if (et == ValueType::ARRAY) {
    v.arr_nested.reserve(n);
    for (uint64_t k = 0; k < n; ++k) {
      Value inner;
      read_array(c, inner, depth + 1, budget);
      v.arr_nested.push_back(std::move(inner));
    }
  } else if (is_float(et)) {
    v.arr_float.resize(n);
    int64_t unused = 0;
    for (uint64_t k = 0; k < n; ++k) read_scalar(c, et, unused, v.arr_float[k]);
  } else {
    v.arr_int.resize(n);
    double unused = 0;
    for (uint64_t k = 0; k < n; ++k) read_scalar(c, et, v.arr_int[k], unused);
  }
}

Value read_value(Cursor& c, ValueType type, ArrayBudget& budget) {
  Value v;
  v.type = type;
  if (type == ValueType::STRING) {
    v.s = c.read_string("string value");
  } else if (type == ValueType::ARRAY) {
    read_array(c, v, 0, budget);
  } else {
    read_scalar(c, type, v.i, v.f);
  }
  return v;
}

bool checked_mul(uint64_t a, uint64_t b, uint64_t& out) {
  return !__builtin_mul_overflow(a, b, &out);
}

}  // namespace

struct GgufFile::Impl {
  std::string path;
  std::unique_ptr<Mapping> mapping;  // set by open()
  std::vector<uint8_t> owned;        // set by from_bytes()
  const uint8_t* data = nullptr;
  uint64_t size = 0;

  uint32_t version = 0;
  uint32_t alignment = kDefaultAlignment;
  uint64_t data_offset = 0;  // start of the tensor data section
  std::vector<std::pair<std::string, Value>> metadata;
  std::unordered_map<std::string, size_t> key_index;
  std::vector<TensorInfo> tensors;
  std::unordered_map<std::string, size_t> tensor_index;

  void parse();
  void parse_alignment(Cursor& c, const Value& v, uint64_t at);
  void parse_tensor_info(Cursor& c);
  const Value* find(std::string_view key) const {
    auto it = key_index.find(std::string(key));
    return it == key_index.end() ? nullptr : &metadata[it->second].second;
  }
  [[noreturn]] void wrong_type(std::string_view key, const Value& v, const char* expected) const {
    throw GgufError(path + ": key '" + std::string(key) + "' has type " +
                    value_type_name(uint32_t(v.type)) +
                    (v.type == ValueType::ARRAY
                         ? std::string(" of ") + value_type_name(uint32_t(v.elem_type))
                         : std::string()) +
                    ", expected " + expected);
  }
};

void GgufFile::Impl::parse_alignment(Cursor& c, const Value& v, uint64_t at) {
  if (!is_integer(v.type)) c.fail_at("general.alignment is not an integer", at);
  if (v.i <= 0 || v.i > (int64_t(1) << 30) || (v.i & (v.i - 1)) != 0)
    c.fail_at("general.alignment " + std::to_string(v.i) + " is not a power of two in [1, 2^30]",
              at);
  alignment = static_cast<uint32_t>(v.i);
}

void GgufFile::Impl::parse_tensor_info(Cursor& c) {
  uint64_t start = c.pos();
  TensorInfo t;
  t.name = c.read_string("tensor name", kMaxKeyLength);
  if (t.name.empty()) c.fail_at("empty tensor name", start);
  uint64_t at = c.pos();
  uint32_t n_dims = c.read<uint32_t>("tensor n_dims");
  if (n_dims < 1 || n_dims > kMaxDims)
    c.fail_at("tensor '" + t.name + "' has " + std::to_string(n_dims) + " dimensions (1.." +
                  std::to_string(kMaxDims) + " allowed)",
              at);
  uint64_t n_elements = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    at = c.pos();
    uint64_t dim = c.read<uint64_t>("tensor dimension");
    if (dim == 0 || dim > uint64_t(std::numeric_limits<int64_t>::max()))
      c.fail_at("tensor '" + t.name + "' dimension " + std::to_string(d) + " is " +
                    std::to_string(dim) + " (must be positive)",
                at);
    if (!checked_mul(n_elements, dim, n_elements) ||
        n_elements > uint64_t(std::numeric_limits<int64_t>::max()))
      c.fail_at("tensor '" + t.name + "' element count overflows", at);
    t.dims.push_back(static_cast<int64_t>(dim));
  }
  at = c.pos();
  uint32_t type_id = c.read<uint32_t>("tensor type");
  const GgmlTypeInfo* info = ggml_type_info(type_id);
  if (info == nullptr)
    c.fail_at("tensor '" + t.name + "' has unknown type id " + std::to_string(type_id), at);
  t.type = info->type;
  if (t.dims[0] % info->block_size != 0)
    c.fail_at("tensor '" + t.name + "' row length " + std::to_string(t.dims[0]) +
                  " is not a multiple of the " + info->name + " block size " +
                  std::to_string(info->block_size),
              at);
  uint64_t rows = n_elements / uint64_t(t.dims[0]);
  uint64_t row_bytes = 0;
  if (!checked_mul(uint64_t(t.dims[0]) / info->block_size, uint64_t(info->type_size), row_bytes) ||
      !checked_mul(row_bytes, rows, t.nbytes))
    c.fail_at("tensor '" + t.name + "' byte size overflows", at);
  at = c.pos();
  t.offset = c.read<uint64_t>("tensor offset");
  if (!tensor_index.emplace(t.name, tensors.size()).second)
    c.fail_at("duplicate tensor name '" + t.name + "'", start);
  tensors.push_back(std::move(t));
}

void GgufFile::Impl::parse() {
  Cursor c(data, size, path);
  uint32_t magic = c.read<uint32_t>("magic");
  if (std::memcmp(&magic, "GGUF", 4) != 0) c.fail_at("bad magic (not a GGUF file)", 0);
  version = c.read<uint32_t>("version");
  if (version != 2 && version != 3) {
    if (version == 0x03000000u || version == 0x02000000u)
      c.fail_at("big-endian GGUF files are not supported", 4);
    c.fail_at("unsupported GGUF version " + std::to_string(version) + " (2 or 3 expected)", 4);
  }
  uint64_t at = c.pos();
  uint64_t n_tensors = c.read<uint64_t>("tensor count");
  uint64_t n_kv = c.read<uint64_t>("metadata count");
  // Counts are bounded by the bytes left (each entry has a minimum size) and by a fixed cap,
  // since a decoded entry is larger than its smallest encoding.
  if (n_kv > c.remaining() / kMinKvBytes || n_kv > kMaxEntries)
    c.fail_at("metadata count " + std::to_string(n_kv) + " exceeds what the file can hold", at + 8);
  if (n_tensors > c.remaining() / kMinTensorInfoBytes || n_tensors > kMaxEntries)
    c.fail_at("tensor count " + std::to_string(n_tensors) + " exceeds what the file can hold", at);

  metadata.reserve(n_kv);
  ArrayBudget budget;
  for (uint64_t k = 0; k < n_kv; ++k) {
    uint64_t kv_at = c.pos();
    std::string key = c.read_string("key", kMaxKeyLength);
    if (key.empty()) c.fail_at("empty metadata key", kv_at);
    ValueType type = read_value_type(c, "value type");
    uint64_t value_at = c.pos();
    Value v = read_value(c, type, budget);
    if (!key_index.emplace(key, metadata.size()).second)
      c.fail_at("duplicate metadata key '" + key + "'", kv_at);
    if (key == "general.alignment") parse_alignment(c, v, value_at);
    metadata.emplace_back(std::move(key), std::move(v));
  }

  // Checked again now that the metadata's size is known.
  if (n_tensors > c.remaining() / kMinTensorInfoBytes)
    c.fail_at("tensor count " + std::to_string(n_tensors) + " exceeds what the file can hold", at);
  tensors.reserve(n_tensors);
  for (uint64_t k = 0; k < n_tensors; ++k) parse_tensor_info(c);

  // The data section starts at the next multiple of the alignment.
  data_offset = (c.pos() + alignment - 1) / alignment * alignment;
  for (const TensorInfo& t : tensors) {
    if (t.offset % alignment != 0)
      c.fail_at("tensor '" + t.name + "' offset " + std::to_string(t.offset) +
                    " is not a multiple of the alignment " + std::to_string(alignment),
                data_offset);
    uint64_t end = 0;
    if (__builtin_add_overflow(data_offset, t.offset, &end) ||
        __builtin_add_overflow(end, t.nbytes, &end) || end > size)
      c.fail_at("tensor '" + t.name + "' data (offset " + std::to_string(t.offset) + ", " +
                    std::to_string(t.nbytes) + " bytes) extends past the end of the file (" +
                    std::to_string(size) + " bytes)",
                data_offset + t.offset);
  }
}

int64_t TensorInfo::n_elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

// ---- GgufFile ------------------------------------------------------------------------------

GgufFile::GgufFile(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GgufFile::GgufFile(GgufFile&&) noexcept = default;
GgufFile& GgufFile::operator=(GgufFile&&) noexcept = default;
GgufFile::~GgufFile() = default;

GgufFile GgufFile::open(const std::string& path) {
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->mapping = Mapping::map(path);
  impl->data = impl->mapping->data();
  impl->size = impl->mapping->size();
  impl->parse();
  return GgufFile(std::move(impl));
}

GgufFile GgufFile::from_bytes(std::vector<uint8_t> bytes, std::string name) {
  auto impl = std::make_unique<Impl>();
  impl->path = std::move(name);
  impl->owned = std::move(bytes);
  impl->data = impl->owned.data();
  impl->size = impl->owned.size();
  impl->parse();
  return GgufFile(std::move(impl));
}

uint32_t GgufFile::version() const { return impl_->version; }
uint32_t GgufFile::alignment() const { return impl_->alignment; }
const std::vector<std::pair<std::string, Value>>& GgufFile::metadata() const { return impl_->metadata; }
const Value* GgufFile::find(std::string_view key) const { return impl_->find(key); }

std::optional<std::string> GgufFile::get_string(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return std::nullopt;
  if (v->type != ValueType::STRING) impl_->wrong_type(key, *v, "string");
  return v->s;
}

std::optional<int64_t> GgufFile::get_int(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return std::nullopt;
  if (!is_integer(v->type)) impl_->wrong_type(key, *v, "an integer");
  return v->i;
}

std::optional<double> GgufFile::get_float(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return std::nullopt;
  if (is_float(v->type)) return v->f;
  if (is_integer(v->type)) return static_cast<double>(v->i);
  impl_->wrong_type(key, *v, "a number");
}

std::optional<bool> GgufFile::get_bool(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return std::nullopt;
  if (v->type != ValueType::BOOL) impl_->wrong_type(key, *v, "bool");
  return v->i != 0;
}

const std::vector<std::string>* GgufFile::get_string_array(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return nullptr;
  if (v->type != ValueType::ARRAY || v->elem_type != ValueType::STRING)
    impl_->wrong_type(key, *v, "array of string");
  return &v->arr_str;
}

const std::vector<int64_t>* GgufFile::get_int_array(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return nullptr;
  if (v->type != ValueType::ARRAY || !(is_integer(v->elem_type) || v->elem_type == ValueType::BOOL))
    impl_->wrong_type(key, *v, "array of integers");
  return &v->arr_int;
}

const std::vector<double>* GgufFile::get_float_array(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return nullptr;
  if (v->type != ValueType::ARRAY || !is_float(v->elem_type))
    impl_->wrong_type(key, *v, "array of floats");
  return &v->arr_float;
}

const std::vector<TensorInfo>& GgufFile::tensors() const { return impl_->tensors; }

const TensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = impl_->tensor_index.find(std::string(name));
  return it == impl_->tensor_index.end() ? nullptr : &impl_->tensors[it->second];
}

const uint8_t* GgufFile::tensor_data(const TensorInfo& t) const {
  return impl_->data + impl_->data_offset + t.offset;
}

const std::string& GgufFile::path() const { return impl_->path; }

}  // namespace pagoda::gguf
