// The prefix cache's disk file (--kv-cache-dir; README, "Persistent prefix cache"): the format,
// an atomic writer and a reader that refuses anything it cannot trust.
//
// Layout (little-endian, this machine's):
//   "PGDKVC01", u32 header length, header (format version 2, model identity, block size, K
//   element type, V element type, layers, KV heads, head size, raw block bytes, RoPE dims /
//   base / scale / NeoX / factor hash, block count), u64 checksum of all of that;
//   per block: i32 parent (index of an earlier block, -1 for a prefix's first), u32 zero,
//   block_size i32 tokens, the raw K/V bytes (Backend::read_kv_block_raw), u64 checksum;
//   "PGDKVEND", u64 block count, u64 checksum over the blocks' checksums.
// Blocks carry no hashes: the loader recomputes each block's chained key from its tokens and
// its parent's, so nothing in the file is trusted beyond its checksummed bytes. The size is
// checked before anything is read; a header that differs from this server's layout, a bad
// checksum, a bad parent index or a short file make the whole file ignored.
// Version 1 (before K and V could differ) had one element type for both halves where version 2
// has two; its blocks are laid out alike, so a version-1 file is still read, as K = V = that type.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace pagoda {

// What a file must have been written for to be loaded.
struct KvCacheLayout {
  std::string model_id;  // the model file's identity (gguf_identity.h)
  uint32_t block_size = 0;
  uint32_t kv_type_k = 0;  // GgmlType of the cache's K elements
  uint32_t kv_type_v = 0;  // ... and of its V elements
  uint32_t n_layers = 0, n_kv_heads = 0, head_dim = 0;
  uint64_t block_bytes = 0;  // Backend::kv_block_raw_bytes()
  uint32_t rope_dims = 0;
  float rope_freq_base = 0, rope_freq_scale = 0;
  uint32_t rope_neox = 0;
  uint64_t rope_factors_hash = 0;  // of the per-pair frequency divisors (0: none)

  // What differs between `file` and this layout, in words ("block size 32 (this server: 16)");
  // empty when they agree.
  std::string mismatch(const KvCacheLayout& file) const;
};

struct KvFileBlock {
  int32_t parent = -1;
  std::vector<int32_t> tokens;
  std::vector<uint8_t> bytes;
};

// 64-bit checksum of a byte range (also the RoPE factors' hash).
uint64_t kv_checksum(const void* data, size_t n, uint64_t seed = 0);

// Writes a file to `path` through a temporary file in the same folder, renamed over `path` only
// once complete and synced: a crash mid-save leaves the old file (or none), never a torn one.
// Every method throws std::runtime_error on an I/O failure (the temporary file is removed).
class KvCacheFileWriter {
 public:
  KvCacheFileWriter(std::string path, const KvCacheLayout& layout, uint64_t n_blocks);
  ~KvCacheFileWriter();  // removes the temporary file unless commit() succeeded
  KvCacheFileWriter(const KvCacheFileWriter&) = delete;
  KvCacheFileWriter& operator=(const KvCacheFileWriter&) = delete;
  void add(int32_t parent, const int32_t* tokens, const void* bytes);
  void commit();  // exactly n_blocks added
  uint64_t bytes_written() const { return written_; }

 private:
  void put(const void* p, size_t n);
  std::string path_, tmp_;
  KvCacheLayout layout_;
  uint64_t n_blocks_, added_ = 0, written_ = 0, sums_ = 0;
  std::FILE* f_ = nullptr;
  bool committed_ = false;
};

// Reads a file block by block. open() checks the header against `expected` and the file's
// size; next() checks each block as it comes. Never throws: errors are returned as text.
class KvCacheFileReader {
 public:
  ~KvCacheFileReader();
  // Empty on success, else why the file is refused.
  std::string open(const std::string& path, const KvCacheLayout& expected);
  uint64_t blocks() const { return n_blocks_; }
  // The next block; false at the end (error() empty) or on a bad block (error() says why).
  bool next(KvFileBlock& out);
  const std::string& error() const { return error_; }

 private:
  bool get(void* p, size_t n);
  std::FILE* f_ = nullptr;
  KvCacheLayout layout_;
  uint64_t n_blocks_ = 0, read_ = 0, sums_ = 0;
  std::string error_;
};

// A whole pass of the reader: empty when every block checks out, else why not.
std::string verify_kv_cache_file(const std::string& path, const KvCacheLayout& expected);

}  // namespace pagoda
