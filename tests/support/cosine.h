// Cosine similarity of two equally long vectors, summed in double: the measure the encoder
// tests hold embeddings to (against a reference, another backend or another path).
#pragma once

#include <cmath>
#include <cstddef>
#include <vector>

namespace pagoda::testing {

template <class A, class B>
double cosine(const std::vector<A>& a, const std::vector<B>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const double x = static_cast<double>(a[i]), y = static_cast<double>(b[i]);
    ab += x * y, aa += x * x, bb += y * y;
  }
  return ab / std::sqrt(aa * bb);
}

}  // namespace pagoda::testing
