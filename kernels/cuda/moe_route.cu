// Mixture-of-experts routing of a few tokens on the device, so that a decode step's MoE layers
// need no host round-trip (and the step can be a CUDA graph): per token the top-k experts of
// softmax(router logits) and their weights, by cpu::moe_route_row's rule; the shared expert's
// gate sigmoid(logit[n_experts]) when there is one; and the grouping of the step's (token, slot)
// entries by expert that cpu::moe_group makes (experts in id order, each expert's entries in
// token order), plus the grouped dp4a GEMV's tables: for each count c, the (expert, first row)
// pairs of the experts with c entries, in expert order, and how many there are.
// Numerics: the maximum is exact; each exp(logit - max) is taken in double as on the CPU and
// summed by one thread in expert order (the CPU's order); the selection compares the float
// logits with the lower id first on ties. So ids are the CPU's and weights are too, up to the
// last bit of the device's double exp (within 1 ulp of the host's; both round to float after).
// The shared gate is (float)exp(-(double)x) where the CPU calls expf: the correctly rounded value
// both approximate.
// Launch: one block of 256 threads: warp w routes token w (lanes stride over the experts; k
// rounds of a warp-wide (logit, lower id) maximum, separated by block barriers), then threads
// stride over the experts to count, place and tabulate the entries (thread 0 adds up the
// offsets). A few microseconds for 8 tokens of 128 experts: one launch per layer.
// Assumptions: 1 <= n <= kMoeRouteMaxTokens, 1 <= k <= n_experts; the logits are F32 rows of ld
// floats with n_experts (+ 1 with a shared expert) values.
#include <algorithm>
#include <cfloat>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace pagoda::cuda {
namespace {

constexpr int kThreads = 256;

struct RouteArgs {
  const float* logits;
  int64_t ld;
  int n, n_experts, k;
  bool normalize, shared;
};

// Pointers into the layout's buffer.
struct RouteOut {
  double* exps;  // [n][n_experts]
  double* sums;  // [n]
  int* taken;    // [n][n_experts]
  int* ids;      // [n * k]
  int* counts;   // [n_experts]
  int* offsets;  // [n_experts + 1]
  int* token_of_row, *place;
  float* weights, *shared_weights;
  int* n_groups;  // [kMoeRouteMaxTokens + 1]
  int* tables;
  int table_at[kMoeRouteMaxTokens + 1];  // int offsets of each count's table in `tables`
};

// The better of two candidates: the larger logit, the lower id among equal ones; id < 0: none.
__device__ __forceinline__ bool better(float v, int id, float bv, int bid) {
  if (id < 0) return false;
  if (bid < 0) return true;
  return v > bv || (v == bv && id < bid);
}

__global__ void moe_route_kernel(RouteArgs a, RouteOut o) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, ne = a.n_experts;
  const bool routing = warp < a.n;  // this warp's token
  const float* row = a.logits + (int64_t)warp * a.ld;
  double* ex = o.exps + (int64_t)warp * ne;
  int* taken = o.taken + (int64_t)warp * ne;
  if (routing) {
    float mx = -FLT_MAX;
    for (int e = lane; e < ne; e += 32) mx = fmaxf(mx, row[e]);
    mx = warp_max(mx);
    for (int e = lane; e < ne; e += 32) {
      ex[e] = exp((double)row[e] - (double)mx);
      taken[e] = 0;
    }
  }
  __syncthreads();
  if (routing && lane == 0) {
    double sum = 0;
    for (int e = 0; e < ne; ++e) sum += ex[e];
    o.sums[warp] = sum;
  }
  __syncthreads();
  double chosen_sum = 0;  // lane 0's
  for (int j = 0; j < a.k; ++j) {
    if (routing) {
      float bv = 0.0f;
      int bid = -1;
      for (int e = lane; e < ne; e += 32)
        if (!taken[e] && better(row[e], e, bv, bid)) bv = row[e], bid = e;
      for (int off = 16; off > 0; off >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, off);
        const int oid = (int)__shfl_xor_sync(0xffffffffu, (float)bid, off);  // ids < 2^24: exact
        if (better(ov, oid, bv, bid)) bv = ov, bid = oid;
      }
      if (lane == 0) {
        taken[bid] = 1;
        const double p = ex[bid] / o.sums[warp];
        o.ids[warp * a.k + j] = bid;
        o.weights[warp * a.k + j] = (float)p;
        chosen_sum += p;
      }
    }
    __syncthreads();  // `taken` seen by every lane before the next round
  }
  if (routing && lane == 0) {
    if (a.normalize)
      for (int j = 0; j < a.k; ++j)
        o.weights[warp * a.k + j] = (float)((double)o.weights[warp * a.k + j] / chosen_sum);
    if (a.shared) o.shared_weights[warp] = 1.0f / (1.0f + (float)exp(-(double)row[ne]));
  }
  __syncthreads();

  // Grouping by expert.
  const int rows = a.n * a.k;
  for (int e = threadIdx.x; e < ne; e += blockDim.x) {
    int c = 0;
    for (int r = 0; r < rows; ++r) c += o.ids[r] == e;
    o.counts[e] = c;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    o.offsets[0] = 0;
    for (int e = 0; e < ne; ++e) o.offsets[e + 1] = o.offsets[e] + o.counts[e];
  }
  if (threadIdx.x >= 1 && threadIdx.x <= kMoeRouteMaxTokens) {
    int g = 0;
    for (int e = 0; e < ne; ++e) g += o.counts[e] == (int)threadIdx.x;
    o.n_groups[threadIdx.x] = g;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < ne; e += blockDim.x) {
    const int c = o.counts[e], first = o.offsets[e];
    if (c == 0) continue;
    int j = 0;
    for (int r = 0; r < rows; ++r)
      if (o.ids[r] == e) {
        o.place[r] = first + j;
        o.token_of_row[first + j] = r / a.k;
        ++j;
      }
    int at = 0;  // this expert's place among those with c entries
    for (int f = 0; f < e; ++f) at += o.counts[f] == c;
    int* t = o.tables + o.table_at[c] + 2 * at;
    t[0] = e;
    t[1] = first;
  }
}

}  // namespace

MoeRouteLayout moe_route_layout(int64_t n, int k, int n_experts) {
  MoeRouteLayout L;
  const int64_t rows = n * k;
  size_t off = 0;  // in 4-byte words; the doubles first (8-byte aligned)
  auto place = [&](int64_t words) {
    const size_t at = off;
    off += static_cast<size_t>(words);
    return at;
  };
  L.exps = place(2 * n * n_experts);
  L.sums = place(2 * n);
  L.taken = place(n * n_experts);
  L.ids = place(rows);
  L.counts = place(n_experts);
  L.offsets = place(n_experts + 1);
  L.token_of_row = place(rows);
  L.place = place(rows);
  L.weights = place(rows);
  L.shared_weights = place(n);
  L.n_groups = place(kMoeRouteMaxTokens + 1);
  L.tables = off;
  for (int c = 1; c <= kMoeRouteMaxTokens; ++c) {
    // At most rows / c experts can have c entries (and none more than n: a token's experts differ).
    L.table_cap[c] = c <= n ? static_cast<int>(std::min<int64_t>(n_experts, rows / c)) : 0;
    L.table_at[c] = place(2 * L.table_cap[c]);
  }
  L.bytes = off * 4;
  return L;
}

void moe_route(const float* logits, int64_t ld, int64_t n, int n_experts, int k, bool normalize, bool shared,
               void* buf, void* stream) {
  if (n < 1 || n > kMoeRouteMaxTokens || k < 1 || k > n_experts)
    throw CudaError("moe_route: need 1 <= n <= kMoeRouteMaxTokens and 1 <= k <= n_experts");
  const MoeRouteLayout L = moe_route_layout(n, k, n_experts);
  auto* w = static_cast<int*>(buf);
  RouteOut o;
  o.exps = reinterpret_cast<double*>(w + L.exps);
  o.sums = reinterpret_cast<double*>(w + L.sums);
  o.taken = w + L.taken;
  o.ids = w + L.ids;
  o.counts = w + L.counts;
  o.offsets = w + L.offsets;
  o.token_of_row = w + L.token_of_row;
  o.place = w + L.place;
  o.weights = reinterpret_cast<float*>(w + L.weights);
  o.shared_weights = reinterpret_cast<float*>(w + L.shared_weights);
  o.n_groups = w + L.n_groups;
  o.tables = w + L.tables;
  for (int c = 0; c <= kMoeRouteMaxTokens; ++c) o.table_at[c] = static_cast<int>(L.table_at[c] - L.tables);
  const RouteArgs a{logits, ld, static_cast<int>(n), n_experts, k, normalize, shared};
  moe_route_kernel<<<1, kThreads, 0, as_stream(stream)>>>(a, o);
  CUDA_CHECK_LAUNCH();
}

}  // namespace pagoda::cuda
