// UTF-8 byte classes and the vocabulary folded by them (see utf8_classes.h).
#include "engine/structured/utf8_classes.h"

#include <algorithm>
#include <numeric>

namespace pagoda::structured {

namespace {
// First bytes of the classes above ASCII (each ASCII byte is its own class).
constexpr uint8_t kBounds[] = {0x80, 0x90, 0xA0, 0xC0, 0xC2, 0xE0, 0xE1, 0xED, 0xEE, 0xF0, 0xF1, 0xF4, 0xF5};

bool is_boundary(unsigned b) {
  return b <= 0x80 || b > 0xFF || std::find(std::begin(kBounds), std::end(kBounds), b) != std::end(kBounds);
}
}  // namespace

uint8_t utf8_class(uint8_t b) {
  if (b < 0x80) return b;
  uint8_t first = 0x80;
  for (uint8_t bound : kBounds)
    if (bound <= b) first = bound;
  return first;
}

bool edges_fold_utf8(const CompiledGrammar::Impl& g) {
  for (const ByteEdge& e : g.edges)
    if (!is_boundary(e.lo) || !is_boundary(e.hi + 1u)) return false;
  return true;
}

std::vector<uint32_t> lcp_drops(const std::vector<uint32_t>& lcp) {
  const size_t n = lcp.size();
  std::vector<uint32_t> drop(n, static_cast<uint32_t>(n));
  std::vector<uint32_t> waiting;  // positions still waiting for a smaller common prefix
  for (size_t k = 0; k < n; ++k) {
    while (!waiting.empty() && lcp[waiting.back()] > lcp[k]) {
      drop[waiting.back()] = static_cast<uint32_t>(k);
      waiting.pop_back();
    }
    waiting.push_back(static_cast<uint32_t>(k));
  }
  return drop;
}

void fold_strings(const std::vector<std::string>& unique, FoldedStrings& out) {
  std::vector<std::string> folded(unique.size());
  for (size_t u = 0; u < unique.size(); ++u) {
    folded[u] = unique[u];
    for (char& c : folded[u]) c = static_cast<char>(utf8_class(static_cast<uint8_t>(c)));
  }
  std::vector<uint32_t> order(unique.size());
  std::iota(order.begin(), order.end(), 0u);
  // Stable: the unique strings of one folded string stay in vocabulary order.
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return folded[a] < folded[b]; });
  out = FoldedStrings{};
  for (uint32_t u : order) {
    if (out.s.empty() || out.s.back() != folded[u]) {
      uint32_t l = 0;
      if (!out.s.empty()) {
        const std::string& prev = out.s.back();
        const size_t m = std::min(prev.size(), folded[u].size());
        while (l < m && prev[l] == folded[u][l]) ++l;
      }
      out.s.push_back(folded[u]);
      out.lcp.push_back(l);
      out.begin.push_back(static_cast<uint32_t>(out.unique.size()));
    }
    out.unique.push_back(u);
  }
  out.begin.push_back(static_cast<uint32_t>(out.unique.size()));
  out.lcp_drop = lcp_drops(out.lcp);
}

}  // namespace pagoda::structured
