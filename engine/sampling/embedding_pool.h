// Embedding requests (GenerationRequest::embed): which prompt positions a pooling reads, and
// the running reduction of their final-norm hidden states into one L2-normalized vector. The
// scheduler asks for the positions (Scheduler::hidden_rows), the engine feeds the rows here as
// the prompt's chunks are computed.
#pragma once

#include <span>
#include <vector>

#include "engine/engine_api.h"

namespace pagoda {

// The prompt positions [lo, hi) whose hidden states `pooling` reads, for a prompt of n tokens.
struct PoolPositions {
  int lo = 0;
  int hi = 0;
};
PoolPositions pool_positions(Pooling pooling, int n);

// The pooling given by a GGUF `<arch>.pooling_type` (1 mean, 2 CLS, 3 last); false for
// anything else (none, rank, absent).
bool pooling_from_gguf(int pooling_type, Pooling& out);

class PooledEmbedding {
 public:
  // One position's hidden state, in position order (the sum is taken in double, so the result
  // does not depend on how the prompt was chunked beyond the last bits).
  void add(std::span<const float> row);
  int rows() const { return rows_; }
  // The mean of the rows added (one row for CLS and last), L2-normalized; empty when none.
  std::vector<float> finish() const;

 private:
  std::vector<double> sum_;
  int rows_ = 0;
};

// Scales `v` to unit L2 norm (a zero vector stays zero).
void l2_normalize(std::vector<float>& v);

}  // namespace pagoda
