// Block arithmetic shared by the KV cache manager, the scheduler and the engine's cache sizing:
// rounding token counts up to whole blocks, and the one context-shift cut.
#pragma once

namespace pagoda {

// a / b rounded up, for a >= 0 and b > 0.
constexpr int ceil_div(int a, int b) { return (a + b - 1) / b; }

// Where a context shift cuts a sequence of n tokens: the first n_keep stay (the requested count
// rounded up to whole blocks, at most n, so the kept blocks are never rewritten), then
// n_discard tokens go (half of the rest, rounded down to whole blocks, so the blocks after the
// cut keep their slots and only need their K re-roped).
struct ShiftCut {
  int n_keep = 0;
  int n_discard = 0;
};

constexpr ShiftCut context_shift_cut(int n, int requested_keep, int block_size) {
  const int keep_blocks = ceil_div(requested_keep > 0 ? requested_keep : 0, block_size);
  const int n_keep = keep_blocks * block_size < n ? keep_blocks * block_size : n;
  return {n_keep, (n - n_keep) / 2 / block_size * block_size};
}

}  // namespace pagoda
