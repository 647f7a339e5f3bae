// Internal: the vocabulary index used by mask computation. The distinct byte strings of the
// grammar-eligible tokens (not special, not EOG, not empty) sorted bytewise, so tokens sharing a
// prefix are adjacent and a walk can reuse the parse state of the common prefix and skip every
// token under a rejected prefix at once.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/structured/structured.h"
#include "engine/structured/utf8_classes.h"

namespace pagoda::structured {

struct LoopSplit;

struct TokenVocabulary::Impl {
  std::vector<std::string> token_bytes;   // by token id
  std::vector<uint8_t> eog, special;      // by token id
  std::vector<int32_t> eog_ids;
  std::vector<std::string> unique;        // sorted distinct byte strings of eligible tokens
  std::vector<uint32_t> lcp;              // lcp[u]: common prefix length of unique[u-1], unique[u]
  // lcp_drop[u]: the first u' > u with lcp[u'] < lcp[u] (or the count): every string in
  // between shares unique[u]'s first lcp[u] bytes, so a walk skipping a failed prefix's tokens
  // jumps over them instead of reading each one's lcp.
  std::vector<uint32_t> lcp_drop;
  // The unique strings with their non-ASCII bytes folded into UTF-8 classes (utf8_classes.h).
  FoldedStrings folded;
  // unique[u] past lcp[u] (the bytes a walk reading the strings in order has not seen yet),
  // all in one buffer: tails[tail_begin[u], tail_begin[u + 1]). Walks read these in order
  // instead of visiting 100k separately allocated strings.
  std::string tails;
  std::vector<uint32_t> tail_begin;
  std::vector<uint32_t> ids_begin;        // ids of unique[u]: ids[ids_begin[u] .. ids_begin[u+1])
  std::vector<int32_t> ids;
  std::vector<int32_t> unique_of_id;      // by token id: index into unique, -1 when ineligible
  // ascii_bytes[2u], [2u + 1]: which ASCII bytes unique[u] contains (bits 0-63, 64-127), so a
  // loop split can tell at once which tokens a few excluded bytes affect (loop_split.cpp).
  std::vector<uint64_t> ascii_bytes;
  uint32_t first_byte_begin[257] = {};    // unique strings starting with byte b: [fbb[b], fbb[b+1])
  size_t words = 0;                       // mask words
  // The vocabulary split by each loop table met so far (loop_split.h), shared by every grammar
  // over this vocabulary; at most kMaxLoopSplits are kept.
  static constexpr size_t kMaxLoopSplits = 64;
  mutable std::mutex loop_mutex;
  mutable std::map<std::vector<int16_t>, std::shared_ptr<const LoopSplit>> loop_splits;
};

}  // namespace pagoda::structured
