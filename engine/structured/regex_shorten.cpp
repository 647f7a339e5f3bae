// A sub-language of a regex tree whose strings are at most a given number of code points long,
// written as a tree again (regex_within_length, regex.h): the length budget is shared out over
// concatenations and repeats, so a format such as e-mail beside maxLength keeps strings of
// every part (local part, labels) instead of being cut at some small total.
#include <algorithm>

#include "engine/structured/regex.h"

namespace pagoda::structured {

std::optional<RegexNode> regex_within_length(const RegexNode& node, uint64_t budget) {
  auto [lo, hi] = regex_length_range(node);
  if (lo > budget) return std::nullopt;
  if (hi && *hi <= budget) return node;
  switch (node.kind) {
    case RegexNode::Kind::Alternation: {
      RegexNode out = node;
      out.children.clear();
      for (const auto& c : node.children)
        if (auto shorter = regex_within_length(c, budget)) out.children.push_back(std::move(*shorter));
      if (out.children.empty()) return std::nullopt;
      return out;
    }
    case RegexNode::Kind::Concat: {
      // Each child gets its shortest length plus an equal share of what is left; children that
      // need less than a share give the rest back to the others.
      std::vector<uint64_t> mins, maxs, give(node.children.size());
      uint64_t spare = budget;
      for (const auto& c : node.children) {
        auto [clo, chi] = regex_length_range(c);
        mins.push_back(clo);
        maxs.push_back(chi ? *chi : UINT64_MAX);
        spare -= clo;
      }
      std::vector<bool> settled(node.children.size(), false);
      for (bool changed = true; changed;) {
        changed = false;
        size_t open = 0;
        for (size_t i = 0; i < node.children.size(); ++i) open += !settled[i];
        if (open == 0) break;
        uint64_t share = spare / open;
        for (size_t i = 0; i < node.children.size(); ++i)
          if (!settled[i] && maxs[i] - mins[i] <= share) {
            settled[i] = true, give[i] = maxs[i], spare -= maxs[i] - mins[i], changed = true;
            break;
          }
        if (!changed)
          for (size_t i = 0; i < node.children.size(); ++i)
            if (!settled[i]) give[i] = mins[i] + share;
      }
      RegexNode out = node;
      for (size_t i = 0; i < node.children.size(); ++i) {
        auto shorter = regex_within_length(node.children[i], give[i]);
        if (!shorter) return std::nullopt;
        out.children[i] = std::move(*shorter);
      }
      return out;
    }
    case RegexNode::Kind::Repeat: {
      const RegexNode& child = node.children[0];
      auto [clo, chi] = regex_length_range(child);
      if (chi && *chi == 0) return RegexNode{};  // only the empty string
      uint64_t floor = std::max<uint64_t>(node.min, 1);
      RegexNode out = node;
      if (!chi || *chi > budget / floor) {
        // The child itself shortened: to what `floor` copies (at least a few when optional) fit.
        uint64_t copies = std::max<uint64_t>(floor, node.max ? std::min<uint32_t>(*node.max, 4) : 4);
        auto shorter = regex_within_length(child, std::max<uint64_t>(clo, budget / copies));
        if (!shorter) return node.min == 0 ? std::optional<RegexNode>(RegexNode{}) : std::nullopt;
        out.children[0] = std::move(*shorter);
        chi = regex_length_range(out.children[0]).second;
      }
      uint64_t count = *chi == 0 ? node.min : budget / *chi;
      if (node.max) count = std::min<uint64_t>(count, *node.max);
      if (count < node.min) return std::nullopt;
      out.max = uint32_t(count);
      return out;
    }
    default:
      return std::nullopt;  // a single character or anchor fits any budget its range allows
  }
}

}  // namespace pagoda::structured
