// A GGUF file's identity, cheap to compute: a hash over its metadata (every key and value), its
// tensor infos (names, shapes, types, offsets) and a sample of each tensor's bytes (its first,
// middle and last 4 KiB), plus the file's size. The rest of the weights is not read (a few MB
// in all, milliseconds). The persistent prefix cache keys its file on it (kv_cache_file.h), so
// K/V computed by another model, or by another fine-tune of the same shape, is not loaded.
#pragma once

#include <string>

#include "engine/gguf/gguf.h"

namespace pagoda::gguf {

// "<size in bytes>-<32 hex digits>"; a file read from memory counts size 0.
std::string file_identity(const GgufFile& file);

}  // namespace pagoda::gguf
