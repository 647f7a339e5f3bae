// Loop tables of parse states and the vocabulary splits they give (see loop_split.h).
#include "engine/structured/loop_split.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <string_view>
#include <unordered_map>

namespace pagoda::structured {

namespace {

// Table state for interned `id` at `depth` bytes into a character, added when new.
int16_t table_state_of(LoopTable& t, int32_t id, uint8_t depth) {
  for (size_t a = 0; a < t.interned.size(); ++a)
    if (t.interned[a] == id) return static_cast<int16_t>(a);
  if (t.interned.size() >= 64) return -1;
  t.interned.push_back(id);
  t.depth.push_back(depth);
  t.next.resize(t.interned.size() * 256, -1);
  return static_cast<int16_t>(t.interned.size() - 1);
}

bool is_lead(int b) { return b >= 0xC2 && b <= 0xF4; }
bool is_continuation(int b) { return b >= 0x80 && b <= 0xBF; }

// Table state after byte b from table state a: L, a new or known state inside a character,
// or -1.
int16_t table_target(LoopTable& t, size_t a, int b, int32_t id) {
  if (id == t.interned[0]) return 0;
  if (t.depth[a] == 0 ? is_lead(b) : t.depth[a] < 3 && is_continuation(b))
    return table_state_of(t, id, static_cast<uint8_t>(t.depth[a] + 1));
  return -1;
}

// The interned state after `byte`, or -1 (dead, overflow, table full, or leaving the scope in
// a local walk).
int32_t step_to(const CompiledGrammar::Impl& g, InternedStates& states, int32_t from, int b, bool local,
                const StepLimits& limits, bool& full) {
  int32_t t = states.step(g, from, static_cast<uint8_t>(b), limits);
  if (t == InternedStates::kTableFull) full = true;
  if (t < 0 || (local && (t & 1))) return -1;
  return t >> 1;
}

// The distinct suffixes of `leaving` (suffix start, unique index), sorted, with their tokens.
void build_rest(const TokenVocabulary::Impl& v, const std::vector<std::pair<uint32_t, uint32_t>>& leaving,
                LoopSplit::Rest& rest) {
  // Deduplicated first (many tokens end with the same few bytes), so only distinct suffixes,
  // copied next to each other, are sorted.
  std::unordered_map<std::string_view, uint32_t> index;
  std::vector<std::string_view> distinct;
  std::vector<uint32_t> of(leaving.size());
  for (size_t i = 0; i < leaving.size(); ++i) {
    const std::string_view sfx = std::string_view(v.unique[leaving[i].second]).substr(leaving[i].first);
    auto [it, added] = index.try_emplace(sfx, static_cast<uint32_t>(distinct.size()));
    if (added) distinct.push_back(sfx);
    of[i] = it->second;
  }
  std::vector<uint32_t> order(distinct.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return distinct[a] < distinct[b]; });
  std::vector<uint32_t> rank(distinct.size()), count(distinct.size() + 1, 0);
  for (uint32_t r = 0; r < order.size(); ++r) rank[order[r]] = r;
  for (uint32_t d : of) ++count[rank[d] + 1];
  for (size_t r = 1; r < count.size(); ++r) count[r] += count[r - 1];
  rest.begin = count;
  rest.tokens.resize(leaving.size());
  for (size_t i = 0; i < leaving.size(); ++i) rest.tokens[count[rank[of[i]]]++] = leaving[i].second;
  rest.suffix.reserve(order.size());
  for (uint32_t r = 0; r < order.size(); ++r) {
    const std::string_view sfx = distinct[order[r]];
    uint32_t l = 0;
    if (r > 0) {
      const std::string& prev = rest.suffix.back();
      const size_t m = std::min(prev.size(), sfx.size());
      while (l < m && prev[l] == sfx[l]) ++l;
    }
    rest.suffix.emplace_back(sfx);
    rest.lcp.push_back(l);
  }
}

// Uncached split of the vocabulary by `table`.
std::shared_ptr<const LoopSplit> compute_split(const TokenVocabulary::Impl& v, const LoopTable& table) {
  auto split = std::make_shared<LoopSplit>();
  const std::vector<int16_t>& next = table.next;
  const size_t n = v.unique.size();
  std::vector<int16_t> at(1, 0);       // at[d]: table state after d bytes
  std::vector<uint32_t> anchor(1, 0);  // anchor[d]: the last position <= d in L
  std::vector<std::pair<uint32_t, uint32_t>> leaving[2];  // (suffix start, unique index)
  std::vector<uint32_t> inside;
  size_t k = 0;
  while (k < n) {
    // Every walk here starts at lcp[k] (a failed prefix's tokens are skipped), so the bytes
    // past it, read in order from the vocabulary's tails, are all it needs.
    const size_t lk = v.lcp[k];
    const char* bytes = v.tails.data() + v.tail_begin[k];
    const size_t len = lk + (v.tail_begin[k + 1] - v.tail_begin[k]);
    size_t d = lk;
    if (at.size() < len + 1) {
      at.resize(len + 1);
      anchor.resize(len + 1);
    }
    size_t fail = SIZE_MAX;
    for (; d < len; ++d) {
      int16_t t = next[static_cast<size_t>(at[d]) * 256 + static_cast<uint8_t>(bytes[d - lk])];
      if (t < 0) {
        fail = d;
        break;
      }
      at[d + 1] = t;
      anchor[d + 1] = t == 0 ? static_cast<uint32_t>(d + 1) : anchor[d];
    }
    if (fail == SIZE_MAX) {
      inside.push_back(static_cast<uint32_t>(k++));
      continue;
    }
    size_t end = k + 1;
    while (end < n && v.lcp[end] >= fail + 1) end = v.lcp_drop[end];  // same prefix through the leaving byte
    const uint32_t p = anchor[fail];
    auto& out = leaving[p == 0 ? 0 : 1];
    for (size_t u = k; u < end; ++u) out.emplace_back(p, static_cast<uint32_t>(u));
    k = end;
  }
  split->inside = inside.size();
  if (inside.size() * 2 < n) return split;  // a narrow loop: the plain walk prunes well enough
  split->useful = true;
  split->inside_bits.assign(v.words, 0);
  for (uint32_t u : inside)
    for (uint32_t i = v.ids_begin[u]; i < v.ids_begin[u + 1]; ++i) {
      auto id = static_cast<uint32_t>(v.ids[i]);
      split->inside_bits[id >> 5] |= 1u << (id & 31);
    }
  for (size_t x = 0; x < 2; ++x) build_rest(v, leaving[x], split->rest[x]);
  return split;
}

// The split depends on the table's transitions only.
const std::vector<int16_t>& split_key(const LoopTable& t) { return t.next; }

// Whether `next` is `base` with some ASCII bytes that lead from L back to L leaving instead
// (everything else equal); those bytes are set in x[0..1].
bool less_ascii(const std::vector<int16_t>& base, const std::vector<int16_t>& next, uint64_t x[2]) {
  if (base.size() != next.size()) return false;
  x[0] = x[1] = 0;
  for (size_t i = 0; i < next.size(); ++i) {
    if (base[i] == next[i]) continue;
    if (i >= 0x80 || base[i] != 0 || next[i] != -1) return false;
    x[i >> 6] |= uint64_t{1} << (i & 63);
  }
  return x[0] | x[1];
}

bool has_id(const std::vector<uint32_t>& bits, uint32_t id) { return (bits[id >> 5] >> (id & 31)) & 1; }

// The split by `table` (= base's table less the ASCII bytes x, less_ascii) from `base`'s. A
// token inside base's loop stays inside this one unless it holds an excluded byte; then it
// leaves at its first one, from L (ASCII bytes only follow L in the table). Tokens leaving
// base's loop leave this one too (a transition fewer cannot keep them in): their last visit
// of L is found by walking the table.
std::shared_ptr<const LoopSplit> derive_split(const TokenVocabulary::Impl& v, const LoopSplit& base,
                                              const LoopTable& table, const uint64_t x[2]) {
  auto split = std::make_shared<LoopSplit>();
  split->inside_bits = base.inside_bits;
  const size_t n = v.unique.size();
  auto clear_ids = [&](uint32_t u) {
    for (uint32_t i = v.ids_begin[u]; i < v.ids_begin[u + 1]; ++i) {
      auto id = static_cast<uint32_t>(v.ids[i]);
      split->inside_bits[id >> 5] &= ~(1u << (id & 31));
    }
  };
  size_t inside = base.inside;
  for (uint32_t u = 0; u < n; ++u) {
    // The byte sets first: most tokens hold no excluded byte, and those need nothing more.
    if (!((v.ascii_bytes[2 * u] & x[0]) | (v.ascii_bytes[2 * u + 1] & x[1]))) continue;
    if (!has_id(base.inside_bits, static_cast<uint32_t>(v.ids[v.ids_begin[u]]))) continue;
    --inside;
    const std::string& s = v.unique[u];
    uint32_t q = 0;
    while (true) {
      const auto c = static_cast<uint8_t>(s[q]);
      if (c < 0x80 && ((x[c >> 6] >> (c & 63)) & 1)) break;
      ++q;
    }
    clear_ids(u);
    split->each[q == 0 ? 0 : 1].emplace_back(u, q);
  }
  auto rewalk = [&](uint32_t u) {
    const std::string& s = v.unique[u];
    int16_t at = 0;
    uint32_t anchor = 0;
    for (size_t d = 0; d < s.size(); ++d) {
      at = table.next[static_cast<size_t>(at) * 256 + static_cast<uint8_t>(s[d])];
      if (at < 0) break;
      if (at == 0) anchor = static_cast<uint32_t>(d + 1);
    }
    split->each[anchor == 0 ? 0 : 1].emplace_back(u, anchor);
  };
  for (size_t r = 0; r < 2; ++r) {
    for (uint32_t u : base.rest[r].tokens) rewalk(u);
    for (const auto& [u, p] : base.each[r]) rewalk(u);
  }
  split->inside = inside;
  split->useful = inside * 2 >= n;
  return split;
}

}  // namespace

namespace {

// The state most printable ASCII bytes lead `from` to, how many do, and how many lead back to
// `from` itself.
struct Printable {
  int32_t target = -1;
  int best = 0, to_self = 0;
};
Printable printable_targets(const CompiledGrammar::Impl& g, InternedStates& states, int32_t from, bool local,
                            const StepLimits& limits, bool& full) {
  int32_t targets[0x7F - 0x20];
  int live = 0;
  Printable out;
  for (int b = 0x20; b < 0x7F; ++b) {
    const int32_t id = step_to(g, states, from, b, local, limits, full);
    if (id >= 0) targets[live++] = id;
    out.to_self += id == from ? 1 : 0;
  }
  std::sort(targets, targets + live);
  for (int i = 0, j = 0; i < live; i = j) {
    while (j < live && targets[j] == targets[i]) ++j;
    if (j - i > out.best) out.best = j - i, out.target = targets[i];
  }
  return out;
}

}  // namespace

bool build_loop_table(const CompiledGrammar::Impl& g, InternedStates& states, int32_t start, bool local,
                      const StepLimits& limits, LoopTable& out) {
  bool full = false;
  // L: the start itself when most printable ASCII bytes lead back to it, else where most of
  // them lead, followed a few characters on (a string with a minimum length counts its first
  // characters before it loops).
  constexpr int kMaxChain = 8;
  int32_t loop = start;
  for (int hop = 0;; ++hop) {
    const Printable p = printable_targets(g, states, loop, local, limits, full);
    if (full) return false;
    if (p.to_self >= kMinLoopBytes) break;
    if (p.best < kMinLoopBytes || hop == kMaxChain) return false;
    loop = p.target;
  }
  out.start = start;
  out.chain = false;
  out.interned.assign(1, loop);
  out.depth.assign(1, 0);
  out.next.assign(256, -1);
  int back = 0;
  for (size_t a = 0; a < out.interned.size(); ++a) {
    const int lo = out.depth[a] == 0 ? 0 : 0x80, hi = out.depth[a] == 0 ? 255 : 0xBF;
    for (int b = lo; b <= hi; ++b) {
      const int32_t id = step_to(g, states, out.interned[a], b, local, limits, full);
      if (full) return false;
      if (id < 0) continue;
      const int16_t target = table_target(out, a, b, id);
      out.next[a * 256 + static_cast<size_t>(b)] = target;
      if (a == 0 && target == 0 && b >= 0x20 && b < 0x7F) ++back;
    }
    if (a == 0 && back < kMinLoopBytes) return false;
  }
  out.disagree.clear();
  if (start == loop) return true;
  // Per first byte: every path the table takes from L must be one the start can take too
  // (a live state at each byte, never leaving the scope); then a token inside the table is
  // accepted from the start as from L. Checked over pairs (table state, the start's interned
  // state) reachable from the pair after the first byte; a pair whose state is the table's
  // own is L's path from there on. Where the start is at L after the first character, the
  // leaving tokens' suffixes after their last visit of L are walked from L; where it reaches
  // L only later (`chain`), those tokens are walked whole from the start. A first byte whose
  // pairs fail is listed in `disagree` (its tokens are walked from the start in full).
  constexpr size_t kMaxPairs = 256;
  std::map<std::pair<int16_t, int32_t>, bool> root_ok;
  std::vector<std::pair<int16_t, int32_t>> pairs;
  auto reachable_ok = [&](std::pair<int16_t, int32_t> root) {
    pairs.assign(1, root);
    for (size_t i = 0; i < pairs.size(); ++i) {
      const auto [a, from] = pairs[i];
      if (from == out.interned[static_cast<size_t>(a)]) continue;
      if (a == 0) out.chain = true;
      const int lo = out.depth[static_cast<size_t>(a)] == 0 ? 0 : 0x80;
      const int hi = out.depth[static_cast<size_t>(a)] == 0 ? 255 : 0xBF;
      for (int b = lo; b <= hi; ++b) {
        const int16_t target = out.next[static_cast<size_t>(a) * 256 + static_cast<size_t>(b)];
        if (target < 0) continue;
        const int32_t id = step_to(g, states, from, b, local, limits, full);
        if (full || id < 0) return false;
        const std::pair<int16_t, int32_t> pair{target, id};
        if (std::find(pairs.begin(), pairs.end(), pair) != pairs.end()) continue;
        if (pairs.size() >= kMaxPairs) return false;
        pairs.push_back(pair);
      }
    }
    return true;
  };
  for (int first = 0; first < 256; ++first) {
    const int16_t t1 = out.next[static_cast<size_t>(first)];
    if (t1 < 0) continue;
    const int32_t a1 = step_to(g, states, start, first, local, limits, full);
    if (full) return false;
    bool agrees = a1 >= 0;
    if (agrees) {
      const std::pair<int16_t, int32_t> root{t1, a1};
      auto it = root_ok.find(root);
      if (it == root_ok.end()) it = root_ok.emplace(root, reachable_ok(root)).first;
      if (full) return false;
      agrees = it->second;
    }
    if (!agrees) out.disagree.push_back(static_cast<uint8_t>(first));
  }
  return true;
}

std::shared_ptr<const LoopSplit> loop_split(const TokenVocabulary::Impl& v, const LoopTable& table) {
  {
    std::lock_guard<std::mutex> lock(v.loop_mutex);
    auto it = v.loop_splits.find(split_key(table));
    if (it != v.loop_splits.end()) return it->second;
  }
  std::shared_ptr<const LoopSplit> base;
  uint64_t x[2] = {0, 0};
  {
    std::lock_guard<std::mutex> lock(v.loop_mutex);
    for (const auto& [key, cached] : v.loop_splits)
      if (cached->useful && less_ascii(key, table.next, x)) {
        base = cached;
        break;
      }
  }
  std::shared_ptr<const LoopSplit> split = base ? derive_split(v, *base, table, x) : compute_split(v, table);
  std::lock_guard<std::mutex> lock(v.loop_mutex);
  if (v.loop_splits.size() >= TokenVocabulary::Impl::kMaxLoopSplits) return split;
  return v.loop_splits.try_emplace(split_key(table), split).first->second;
}

}  // namespace pagoda::structured

namespace pagoda::structured {

void prewarm_loop_splits(const TokenVocabulary::Impl& v) {
  // The string characters of JSON as the schema converter writes them, and with DEL excluded
  // too (as JSON grammars often write them); the escapes leave the loop either way.
  for (const char* chars : {R"([^"\\\x00-\x1F])", R"([^"\\\x7F\x00-\x1F])"}) {
    const std::string gbnf = std::string("root ::= \"\\\"\" (") + chars + R"( | "\\" ["\\/bfnrt])* "\"")";
    const std::shared_ptr<const CompiledGrammar> grammar = compile_gbnf(gbnf, nullptr);
    const CompiledGrammar::Impl& g = grammar->impl();
    StepLimits limits;
    InternedStates states(256);
    const int32_t start = states.intern(initial_stacks(g, limits));
    const int32_t t = states.step(g, start, '"', limits);
    LoopTable table;
    if (t >= 0 && build_loop_table(g, states, t >> 1, false, limits, table)) loop_split(v, table);
  }
}

}  // namespace pagoda::structured
