// A GGUF file's identity, cheap to compute: a hash over its metadata (every key and value) and
// its tensor infos (names, shapes, types, offsets), plus the file's size. The tensor data is
// not read: two files with the same identity have the same architecture, hyper-parameters,
// tokenizer and tensor layout, and the same size; the persistent prefix cache keys its file on
// it (kv_cache_file.h) so K/V computed by another model is never loaded.
#pragma once

#include <string>

#include "engine/gguf/gguf.h"

namespace pagoda::gguf {

// "<size in bytes>-<32 hex digits>"; a file read from memory counts size 0.
std::string file_identity(const GgufFile& file);

}  // namespace pagoda::gguf
