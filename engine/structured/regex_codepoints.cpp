// CodepointSet: sorted disjoint ranges of Unicode code points (regex classes, JSON string
// characters), with the set operations the regex and JSON Schema writers need.
#include <algorithm>

#include "engine/structured/regex.h"

namespace pagoda::structured {

CodepointSet CodepointSet::range(uint32_t lo, uint32_t hi) {
  CodepointSet s;
  s.add(lo, hi);
  return s;
}

void CodepointSet::add(uint32_t lo, uint32_t hi) {
  if (lo > hi) return;
  hi = std::min(hi, kMaxCodepoint);
  std::vector<std::pair<uint32_t, uint32_t>> merged;
  merged.reserve(ranges_.size() + 1);
  bool placed = false;
  for (const auto& r : ranges_) {
    // Ranges touching or overlapping [lo, hi] fold into it (adjacent ones too: +1).
    if (r.second + 1 < lo) {
      merged.push_back(r);
    } else if (hi + 1 < r.first) {
      if (!placed) merged.emplace_back(lo, hi), placed = true;
      merged.push_back(r);
    } else {
      lo = std::min(lo, r.first);
      hi = std::max(hi, r.second);
    }
  }
  if (!placed) merged.emplace_back(lo, hi);
  ranges_ = std::move(merged);
}

void CodepointSet::add(const CodepointSet& other) {
  for (const auto& r : other.ranges_) add(r.first, r.second);
}

CodepointSet CodepointSet::complement() const {
  CodepointSet out;
  uint32_t next = 0;
  for (const auto& r : ranges_) {
    if (r.first > next) out.ranges_.emplace_back(next, r.first - 1);
    next = r.second + 1;
  }
  if (next <= kMaxCodepoint) out.ranges_.emplace_back(next, kMaxCodepoint);
  return out;
}

CodepointSet CodepointSet::intersect(const CodepointSet& other) const {
  CodepointSet out;
  size_t i = 0, j = 0;
  while (i < ranges_.size() && j < other.ranges_.size()) {
    uint32_t lo = std::max(ranges_[i].first, other.ranges_[j].first);
    uint32_t hi = std::min(ranges_[i].second, other.ranges_[j].second);
    if (lo <= hi) out.ranges_.emplace_back(lo, hi);
    if (ranges_[i].second < other.ranges_[j].second) ++i; else ++j;
  }
  return out;
}

CodepointSet CodepointSet::minus(const CodepointSet& other) const {
  return intersect(other.complement());
}

bool CodepointSet::contains(uint32_t cp) const {
  for (const auto& r : ranges_) {
    if (cp < r.first) return false;
    if (cp <= r.second) return true;
  }
  return false;
}

uint64_t CodepointSet::count() const {
  uint64_t n = 0;
  for (const auto& r : ranges_) n += uint64_t(r.second) - r.first + 1;
  return n;
}

}  // namespace pagoda::structured
