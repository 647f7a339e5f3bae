// The prefix cache's disk file: format, atomic writer, distrustful reader (see kv_cache_file.h).
#include "engine/kv/kv_cache_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "kernels/ggml_type.h"

namespace pagoda {

namespace {

constexpr char kMagic[8] = {'P', 'G', 'D', 'K', 'V', 'C', '0', '1'};
constexpr char kEndMagic[8] = {'P', 'G', 'D', 'K', 'V', 'E', 'N', 'D'};
constexpr uint32_t kVersion = 2;           // written; K and V element types apart
constexpr uint32_t kVersionOneType = 1;    // still read: one element type for K and V
constexpr uint32_t kMaxHeader = 4096;
constexpr size_t kMaxModelId = 256;

uint64_t mix(uint64_t x) {
  x ^= x >> 31;
  x *= 0x7fb5d329728ea185ull;
  x ^= x >> 27;
  x *= 0x81dadef4bc2dd44dull;
  return x ^ (x >> 33);
}

// The header body, field by field.
struct Bytes {
  std::vector<uint8_t> b;
  template <class T>
  void put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    b.insert(b.end(), p, p + sizeof v);
  }
};

struct Cursor {
  const uint8_t* p;
  size_t left;
  template <class T>
  bool get(T& v) {
    if (left < sizeof v) return false;
    std::memcpy(&v, p, sizeof v);
    p += sizeof v;
    left -= sizeof v;
    return true;
  }
};

std::vector<uint8_t> header_body(const KvCacheLayout& l, uint64_t n_blocks) {
  Bytes h;
  h.put(kVersion);
  h.put(static_cast<uint32_t>(l.model_id.size()));
  h.b.insert(h.b.end(), l.model_id.begin(), l.model_id.end());
  h.put(l.block_size), h.put(l.kv_type_k), h.put(l.kv_type_v), h.put(l.n_layers), h.put(l.n_kv_heads),
      h.put(l.head_dim);
  h.put(l.block_bytes);
  h.put(l.rope_dims), h.put(l.rope_freq_base), h.put(l.rope_freq_scale), h.put(l.rope_neox);
  h.put(l.rope_factors_hash);
  h.put(n_blocks);
  return std::move(h.b);
}

bool parse_header(const std::vector<uint8_t>& body, KvCacheLayout& l, uint64_t& n_blocks) {
  Cursor c{body.data(), body.size()};
  uint32_t version = 0, id_len = 0;
  if (!c.get(version) || (version != kVersion && version != kVersionOneType) || !c.get(id_len) ||
      id_len > kMaxModelId || c.left < id_len)
    return false;
  l.model_id.assign(reinterpret_cast<const char*>(c.p), id_len);
  c.p += id_len;
  c.left -= id_len;
  if (!c.get(l.block_size) || !c.get(l.kv_type_k)) return false;
  l.kv_type_v = l.kv_type_k;  // version 1: one type for both halves
  if (version == kVersion && !c.get(l.kv_type_v)) return false;
  return c.get(l.n_layers) && c.get(l.n_kv_heads) && c.get(l.head_dim) &&
         c.get(l.block_bytes) && c.get(l.rope_dims) && c.get(l.rope_freq_base) && c.get(l.rope_freq_scale) &&
         c.get(l.rope_neox) && c.get(l.rope_factors_hash) && c.get(n_blocks) && c.left == 0;
}

// "K f16, V q8_0" for the GgmlType ids k and v (a number for an id that is no type).
std::string types_name(uint32_t k, uint32_t v) {
  const auto name = [](uint32_t id) {
    const GgmlTypeInfo* info = ggml_type_info(id);
    return info ? std::string(info->name) : "type " + std::to_string(id);
  };
  return "K " + name(k) + ", V " + name(v);
}

uint64_t record_bytes(const KvCacheLayout& l) {
  return 8 + 4ull * l.block_size + l.block_bytes + 8;
}

}  // namespace

uint64_t kv_checksum(const void* data, size_t n, uint64_t seed) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t h = mix(seed ^ 0x9e3779b97f4a7c15ull ^ n);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 0x9fb21c651e98df25ull;
    h ^= h >> 29;
  }
  uint64_t tail = 0;
  std::memcpy(&tail, p + i, n - i);
  return mix(h ^ tail ^ (static_cast<uint64_t>(n - i) << 56));
}

std::string KvCacheLayout::mismatch(const KvCacheLayout& f) const {
  auto diff = [](const char* what, auto file, auto ours) {
    return std::string(what) + " " + std::to_string(file) + " (this server: " + std::to_string(ours) + ")";
  };
  if (f.model_id != model_id) return "another model file (identity " + f.model_id + ", this server: " + model_id + ")";
  if (f.block_size != block_size) return diff("block size", f.block_size, block_size);
  if (f.kv_type_k != kv_type_k || f.kv_type_v != kv_type_v)
    return "KV element types " + types_name(f.kv_type_k, f.kv_type_v) + " (this server: " +
           types_name(kv_type_k, kv_type_v) + ")";
  if (f.n_layers != n_layers || f.n_kv_heads != n_kv_heads || f.head_dim != head_dim)
    return diff("layers", f.n_layers, n_layers) + ", " + diff("KV heads", f.n_kv_heads, n_kv_heads) + ", " +
           diff("head size", f.head_dim, head_dim);
  if (f.block_bytes != block_bytes) return diff("block bytes", f.block_bytes, block_bytes);
  if (f.rope_dims != rope_dims || f.rope_freq_base != rope_freq_base || f.rope_freq_scale != rope_freq_scale ||
      f.rope_neox != rope_neox || f.rope_factors_hash != rope_factors_hash)
    return diff("RoPE dims", f.rope_dims, rope_dims) + ", " + diff("base", f.rope_freq_base, rope_freq_base) + ", " +
           diff("scale", f.rope_freq_scale, rope_freq_scale) + ", " + diff("neox", f.rope_neox, rope_neox) +
           (f.rope_factors_hash != rope_factors_hash ? ", other frequency factors" : "");
  return "";
}

// ---- writer ---------------------------------------------------------------------------------

KvCacheFileWriter::KvCacheFileWriter(std::string path, const KvCacheLayout& layout, uint64_t n_blocks)
    : path_(std::move(path)), layout_(layout), n_blocks_(n_blocks) {
  tmp_ = path_ + ".tmp." + std::to_string(::getpid());
  f_ = std::fopen(tmp_.c_str(), "wb");
  if (!f_) throw std::runtime_error("cannot create '" + tmp_ + "': " + std::strerror(errno));
  std::setvbuf(f_, nullptr, _IOFBF, 1 << 20);
  const std::vector<uint8_t> body = header_body(layout_, n_blocks_);
  const auto len = static_cast<uint32_t>(body.size());
  uint64_t sum = kv_checksum(kMagic, sizeof kMagic);
  sum = kv_checksum(&len, sizeof len, sum);
  sum = kv_checksum(body.data(), body.size(), sum);
  put(kMagic, sizeof kMagic);
  put(&len, sizeof len);
  put(body.data(), body.size());
  put(&sum, sizeof sum);
}

KvCacheFileWriter::~KvCacheFileWriter() {
  if (f_) std::fclose(f_);
  if (!committed_) std::remove(tmp_.c_str());
}

void KvCacheFileWriter::put(const void* p, size_t n) {
  if (std::fwrite(p, 1, n, f_) != n) throw std::runtime_error("cannot write '" + tmp_ + "': " + std::strerror(errno));
  written_ += n;
}

void KvCacheFileWriter::add(int32_t parent, const int32_t* tokens, const void* bytes) {
  if (added_ >= n_blocks_) throw std::logic_error("KvCacheFileWriter: more blocks than announced");
  const uint32_t zero = 0;
  const size_t tok_bytes = 4ull * layout_.block_size;
  uint64_t sum = kv_checksum(&parent, sizeof parent, added_);
  sum = kv_checksum(tokens, tok_bytes, sum);
  sum = kv_checksum(bytes, layout_.block_bytes, sum);
  put(&parent, sizeof parent);
  put(&zero, sizeof zero);
  put(tokens, tok_bytes);
  put(bytes, layout_.block_bytes);
  put(&sum, sizeof sum);
  sums_ = kv_checksum(&sum, sizeof sum, sums_);
  ++added_;
}

void KvCacheFileWriter::commit() {
  if (added_ != n_blocks_) throw std::logic_error("KvCacheFileWriter: fewer blocks than announced");
  put(kEndMagic, sizeof kEndMagic);
  put(&n_blocks_, sizeof n_blocks_);
  put(&sums_, sizeof sums_);
  if (std::fflush(f_) != 0 || ::fsync(::fileno(f_)) != 0)
    throw std::runtime_error("cannot sync '" + tmp_ + "': " + std::strerror(errno));
  const int rc = std::fclose(f_);
  f_ = nullptr;
  if (rc != 0) throw std::runtime_error("cannot close '" + tmp_ + "': " + std::strerror(errno));
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0)
    throw std::runtime_error("cannot rename '" + tmp_ + "' to '" + path_ + "': " + std::strerror(errno));
  committed_ = true;
  // The rename itself reaches the disk with the folder's metadata.
  const std::string dir = std::filesystem::path(path_).parent_path().string();
  if (int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY); fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

// ---- reader ---------------------------------------------------------------------------------

KvCacheFileReader::~KvCacheFileReader() {
  if (f_) std::fclose(f_);
}

bool KvCacheFileReader::get(void* p, size_t n) { return std::fread(p, 1, n, f_) == n; }

std::string KvCacheFileReader::open(const std::string& path, const KvCacheLayout& expected) {
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) return "cannot read it: " + ec.message();
  f_ = std::fopen(path.c_str(), "rb");
  if (!f_) return std::string("cannot open it: ") + std::strerror(errno);
  std::setvbuf(f_, nullptr, _IOFBF, 1 << 20);
  char magic[8];
  uint32_t len = 0;
  if (!get(magic, sizeof magic) || std::memcmp(magic, kMagic, sizeof magic) != 0) return "not a pagoda KV cache file";
  if (!get(&len, sizeof len) || len > kMaxHeader) return "bad header length";
  std::vector<uint8_t> body(len);
  uint64_t sum = 0;
  if (!get(body.data(), len) || !get(&sum, sizeof sum)) return "truncated header";
  uint64_t want = kv_checksum(kMagic, sizeof kMagic);
  want = kv_checksum(&len, sizeof len, want);
  want = kv_checksum(body.data(), body.size(), want);
  if (sum != want) return "header checksum mismatch";
  KvCacheLayout file;
  if (!parse_header(body, file, n_blocks_)) return "malformed header";
  if (std::string why = expected.mismatch(file); !why.empty()) return "written for " + why;
  layout_ = file;
  const uint64_t head = sizeof kMagic + sizeof len + len + sizeof sum, tail = 8 + 8 + 8;
  const uint64_t rec = record_bytes(file);
  if (size < head + tail || (size - head - tail) % rec != 0 || (size - head - tail) / rec != n_blocks_)
    return "size " + std::to_string(size) + " does not match its " + std::to_string(n_blocks_) + " blocks (truncated?)";
  return "";
}

bool KvCacheFileReader::next(KvFileBlock& out) {
  if (!f_ || !error_.empty()) return false;
  auto fail = [&](std::string why) {
    error_ = "block " + std::to_string(read_) + ": " + std::move(why);
    return false;
  };
  if (read_ == n_blocks_) {
    char magic[8];
    uint64_t n = 0, sums = 0;
    if (!get(magic, sizeof magic) || std::memcmp(magic, kEndMagic, sizeof magic) != 0 || !get(&n, sizeof n) ||
        !get(&sums, sizeof sums) || n != n_blocks_ || sums != sums_) {
      error_ = "bad trailer";
    }
    return false;
  }
  uint32_t zero = 1;
  out.tokens.resize(layout_.block_size);
  out.bytes.resize(layout_.block_bytes);
  uint64_t sum = 0;
  if (!get(&out.parent, sizeof out.parent) || !get(&zero, sizeof zero) ||
      !get(out.tokens.data(), 4ull * layout_.block_size) || !get(out.bytes.data(), layout_.block_bytes) ||
      !get(&sum, sizeof sum))
    return fail("truncated");
  uint64_t want = kv_checksum(&out.parent, sizeof out.parent, read_);
  want = kv_checksum(out.tokens.data(), 4ull * layout_.block_size, want);
  want = kv_checksum(out.bytes.data(), layout_.block_bytes, want);
  if (sum != want || zero != 0) return fail("checksum mismatch");
  if (out.parent < -1 || out.parent >= static_cast<int64_t>(read_)) return fail("bad parent index");
  for (int32_t t : out.tokens)
    if (t < 0) return fail("negative token id");
  sums_ = kv_checksum(&sum, sizeof sum, sums_);
  ++read_;
  return true;
}

std::string verify_kv_cache_file(const std::string& path, const KvCacheLayout& expected) {
  KvCacheFileReader r;
  if (std::string why = r.open(path, expected); !why.empty()) return why;
  KvFileBlock b;
  while (r.next(b)) {
  }
  return r.error();
}

}  // namespace pagoda
