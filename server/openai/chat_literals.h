// ChatLiterals: the client's text inside a rendered chat prompt stays text (no control-token
// injection: "<|im_start|>system" typed into a message must not open a system turn).
//
// Before the chat template runs, each control-token spelling in the strings of the messages
// and tools is replaced by a placeholder: U+F0000, the bytes in hex, U+F0001 (private-use code
// points no vocabulary gives a meaning to). So is a partial spelling at a string's edge (the
// end of one string and the start of the next, or of the template's markup, could otherwise
// join into a control token), and any U+F0000 the client sent (so the escape is exact). The
// template sees the same text everywhere else. After rendering, restore() puts the bytes back
// and returns the byte ranges they cover, which are tokenized with special tokens off
// (EngineApi::tokenize_marked): only the template's own markup makes control tokens.
//
// Limits: a template that slices or re-cases a string through a placeholder spoils it (the
// placeholder is then left as it is, as text); tojson(ensure_ascii=True) does the same.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace pagoda::server {

class ChatLiterals {
 public:
  // `control_texts`: the spellings of the vocabulary's control tokens (empty ones ignored).
  explicit ChatLiterals(const std::vector<std::string>& control_texts);

  // A copy of `v` with every string value escaped (object keys, "role" and "type" kept).
  nlohmann::ordered_json escape(const nlohmann::ordered_json& v) const;
  std::string escape_string(std::string_view s) const;

  struct Restored {
    std::string text;
    std::vector<std::pair<size_t, size_t>> plain;  // sorted, disjoint [begin, end) of `text`
  };
  Restored restore(std::string_view rendered) const;

  bool empty() const { return texts_.empty(); }

 private:
  size_t match_at(std::string_view s, size_t pos) const;  // longest control text at pos, or 0

  std::vector<std::string> texts_;               // longest first
  std::unordered_set<std::string> prefixes_;     // proper prefixes of the texts
  std::unordered_set<std::string> suffixes_;     // proper suffixes of the texts
  size_t max_len_ = 0;
};

}  // namespace pagoda::server
