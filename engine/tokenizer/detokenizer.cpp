#include "engine/tokenizer/detokenizer.h"

#include <algorithm>

#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/unicode.h"

namespace pagoda {

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tok,
                                               const std::vector<int32_t>& prompt)
    : tok_(tok) {
  for (int32_t id : prompt) {
    if (id >= 0 && id < tok_.vocab_size() && !tok_.token_to_piece(id).empty()) {
      text_started_ = true;
      break;
    }
  }
}

std::string IncrementalDetokenizer::push(int32_t token) {
  std::string piece = tok_.token_to_piece(token);
  if (!text_started_ && !piece.empty()) {
    piece = tok_.decode({token});
    text_started_ = true;
  }
  pending_ += piece;
  const size_t n = unicode::complete_prefix_len(pending_);
  std::string out = unicode::sanitize_utf8(std::string_view(pending_).substr(0, n));
  pending_.erase(0, n);
  return out;
}

std::string IncrementalDetokenizer::flush() {
  std::string out = unicode::sanitize_utf8(pending_);
  pending_.clear();
  return out;
}

StopStringMatcher::StopStringMatcher(std::vector<std::string> stops) {
  for (auto& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
}

std::string StopStringMatcher::feed(const std::string& text) {
  if (matched_) return {};
  held_ += text;
  // The earliest complete stop string wins (the held text had none before this call).
  size_t best = std::string::npos;
  for (const auto& s : stops_) {
    const size_t at = held_.find(s);
    if (at < best) {
      best = at;
      matched_stop_ = s;
    }
  }
  if (best != std::string::npos) {
    matched_ = true;
    std::string out = held_.substr(0, best);
    held_.clear();
    return out;
  }
  // Hold back the longest tail that could still grow into a stop string.
  size_t keep = 0;
  for (const auto& s : stops_) {
    for (size_t k = std::min(s.size() - 1, held_.size()); k > keep; --k) {
      if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
        keep = k;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopStringMatcher::flush() {
  if (matched_) return {};
  std::string out = std::move(held_);
  held_.clear();
  return out;
}

}  // namespace pagoda
