// Parse-stack sets and the byte step (see stack_set.h).
#include "engine/structured/stack_set.h"

#include <algorithm>
#include <cstring>

namespace pagoda::structured {

namespace {

uint64_t hash_frames(const uint32_t* f, size_t n) {
  uint64_t h = 1469598103934665603ull ^ n;
  for (size_t i = 0; i < n; ++i) h = (h ^ f[i]) * 1099511628211ull;
  return h;
}

// Recursive expansion; `frames` is restored before returning. Depth is bounded by the
// left-recursion check (no rule reaches itself without consuming) plus the stack's own depth.
bool close_rec(const CompiledGrammar::Impl& g, std::vector<uint32_t>& frames, StackSet& out,
               const StepLimits& limits, size_t depth) {
  if (depth > limits.max_depth + g.rules.size() + 8) return false;
  if (frames.empty()) {
    out.push(nullptr, 0);
    return out.size() <= limits.max_stacks;
  }
  uint32_t x = frames.back();
  const Element& el = g.elements[x];
  switch (el.kind) {
    case Element::Kind::End: {
      frames.pop_back();
      bool ok = close_rec(g, frames, out, limits, depth + 1);
      frames.push_back(x);
      return ok;
    }
    case Element::Kind::Terminal:
      frames.back() = el.value;
      out.push(frames.data(), frames.size());
      frames.back() = x;
      return out.size() <= limits.max_stacks;
    case Element::Kind::RuleRef: {
      frames.pop_back();
      // Tail call: a reference last in its alternative leaves no return position.
      bool has_return = g.elements[x + 1].kind != Element::Kind::End;
      if (has_return) frames.push_back(x + 1);
      bool ok = frames.size() < limits.max_depth;
      if (ok) {
        for (uint32_t a : g.rules[el.value].alternatives) {
          frames.push_back(a);
          ok = close_rec(g, frames, out, limits, depth + 1);
          frames.pop_back();
          if (!ok) break;
        }
      }
      if (has_return) frames.pop_back();
      frames.push_back(x);
      return ok;
    }
  }
  return false;
}

thread_local std::vector<uint32_t> tl_frames;

}  // namespace

void StackSet::dedup() {
  size_t n = size();
  if (n < 2) return;
  if (n <= 16) {
    // Few stacks (the usual case): compact in place, no allocation.
    size_t kept = 0, kept_end = 0, src_begin = 0;
    for (size_t i = 0; i < n; ++i) {
      size_t src_end = ends_[i];
      size_t len = src_end - src_begin;
      bool dup = false;
      for (size_t j = 0, jb = 0; j < kept && !dup; jb = ends_[j], ++j)
        dup = ends_[j] - jb == len &&
              std::memcmp(data_.data() + jb, data_.data() + src_begin, len * sizeof(uint32_t)) == 0;
      if (!dup) {
        if (kept_end != src_begin)
          std::memmove(data_.data() + kept_end, data_.data() + src_begin, len * sizeof(uint32_t));
        kept_end += len;
        ends_[kept++] = static_cast<uint32_t>(kept_end);
      }
      src_begin = src_end;
    }
    data_.resize(kept_end);
    ends_.resize(kept);
    return;
  }
  std::vector<std::pair<uint64_t, uint32_t>> keyed(n);
  for (size_t i = 0; i < n; ++i) keyed[i] = {hash_frames(begin(i), length(i)), static_cast<uint32_t>(i)};
  std::sort(keyed.begin(), keyed.end());
  std::vector<uint8_t> keep(n, 1);
  bool any_dup = false;
  for (size_t i = 1; i < n; ++i) {
    for (size_t j = i; j-- > 0 && keyed[j].first == keyed[i].first;) {
      uint32_t a = keyed[i].second, b = keyed[j].second;
      if (!keep[b]) continue;
      if (length(a) == length(b) &&
          std::memcmp(begin(a), begin(b), length(a) * sizeof(uint32_t)) == 0) {
        keep[std::max(a, b)] = 0;
        any_dup = true;
        if (std::max(a, b) == a) break;
      }
    }
  }
  if (!any_dup) return;
  StackSet out;
  for (size_t i = 0; i < n; ++i)
    if (keep[i]) out.push(begin(i), length(i));
  *this = std::move(out);
}

bool StackSet::remove_empty() {
  if (!has_empty()) return false;
  StackSet out;
  for (size_t i = 0; i < size(); ++i)
    if (length(i)) out.push(begin(i), length(i));
  *this = std::move(out);
  return true;
}

bool close_stack(const CompiledGrammar::Impl& g, std::vector<uint32_t>& frames, StackSet& out,
                 const StepLimits& limits) {
  return close_rec(g, frames, out, limits, 0);
}

bool advance_byte(const CompiledGrammar::Impl& g, const StackSet& in, uint8_t byte, StackSet& out,
                  const StepLimits& limits) {
  out.clear();
  std::vector<uint32_t>& frames = tl_frames;
  bool ok = true;
  for (size_t i = 0; i < in.size() && ok; ++i) {
    size_t n = in.length(i);
    if (n == 0) continue;
    const uint32_t* f = in.begin(i);
    uint32_t next = g.step(f[n - 1], byte);
    if (next == CompiledGrammar::Impl::kNoEdge) continue;
    if (next != kNodeAccept) {
      size_t start = out.size();
      out.push(f, n);
      (void)start;
      // Replace the top in place.
      const_cast<uint32_t*>(out.begin(out.size() - 1))[n - 1] = next;
      continue;
    }
    // The terminal is complete: continue after its element.
    frames.assign(f, f + n);
    frames.back() = g.nodes[f[n - 1]].element + 1;
    ok = close_stack(g, frames, out, limits);
  }
  out.dedup();
  return ok && out.size() <= limits.max_stacks;
}

void byte_cell(const CompiledGrammar::Impl& g, const StackSet& in, uint8_t byte, uint8_t& lo, uint8_t& hi) {
  unsigned l = 0, h = 255;
  for (size_t i = 0; i < in.size(); ++i) {
    const size_t n = in.length(i);
    if (n == 0) continue;
    const DfaNode& node = g.nodes[in.begin(i)[n - 1]];
    const ByteEdge* e = g.edges.data() + node.first_edge;
    // Edges are sorted and disjoint: `byte` lies in one of them or in the gap before the next.
    uint32_t k = 0;
    for (; k < node.edge_count && e[k].hi < byte; ++k) l = std::max<unsigned>(l, e[k].hi + 1u);
    if (k == node.edge_count) continue;
    if (byte < e[k].lo) {
      h = std::min<unsigned>(h, e[k].lo - 1u);
    } else {
      l = std::max<unsigned>(l, e[k].lo);
      h = std::min<unsigned>(h, e[k].hi);
    }
  }
  lo = static_cast<uint8_t>(l);
  hi = static_cast<uint8_t>(h);
}

StackSet initial_stacks(const CompiledGrammar::Impl& g, const StepLimits& limits) {
  StackSet out;
  std::vector<uint32_t> frames{g.start_element};
  close_stack(g, frames, out, limits);
  out.dedup();
  return out;
}

}  // namespace pagoda::structured
