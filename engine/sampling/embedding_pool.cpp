// Pooling arithmetic for embedding requests (embedding_pool.h).
#include "engine/sampling/embedding_pool.h"

#include <cmath>
#include <stdexcept>

namespace pagoda {

PoolPositions pool_positions(Pooling pooling, int n) {
  switch (pooling) {
    case Pooling::Mean: return {0, n};
    case Pooling::Cls: return {0, n > 0 ? 1 : 0};
    case Pooling::Last: return {n > 0 ? n - 1 : 0, n};
  }
  return {0, n};
}

bool pooling_from_gguf(int pooling_type, Pooling& out) {
  switch (pooling_type) {
    case 1: out = Pooling::Mean; return true;
    case 2: out = Pooling::Cls; return true;
    case 3: out = Pooling::Last; return true;
    default: return false;
  }
}

void PooledEmbedding::add(std::span<const float> row) {
  if (sum_.empty()) sum_.assign(row.size(), 0.0);
  if (row.size() != sum_.size()) throw std::logic_error("PooledEmbedding: rows of different widths");
  for (size_t i = 0; i < row.size(); ++i) sum_[i] += row[i];
  ++rows_;
}

std::vector<float> PooledEmbedding::finish() const {
  std::vector<float> v(sum_.size());
  for (size_t i = 0; i < sum_.size(); ++i) v[i] = static_cast<float>(sum_[i] / rows_);
  l2_normalize(v);
  return v;
}

void l2_normalize(std::vector<float>& v) {
  double ss = 0;
  for (float x : v) ss += static_cast<double>(x) * x;
  if (ss <= 0) return;
  const double inv = 1.0 / std::sqrt(ss);
  for (float& x : v) x = static_cast<float>(x * inv);
}

}  // namespace pagoda
