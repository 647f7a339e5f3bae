// GPU sampling: one token id per row of logits, so only ids (4 bytes a row) and, when asked,
// logprobs return to the host.
// First the row's edits (edit_kernel), in the host sampler's order (engine/sampling/sampling.h):
// tokens the allowed-token bitmask clears become -inf, then each TokenEdit's token gets
// edited_logit (logit_bias, repetition / presence / frequency penalties; kernels/draw_params.h).
// The edits are written into the logits row itself; draws sharing a row share its edits and the
// row's first draw applies them. Then per draw (params[row]), on the edited row x:
//   temperature <= 0: argmax (lowest index on ties).
//   otherwise e_j = exp((logit_j - max_k logit_k) / T) (the largest is exactly 1), and a token
//   is kept when e_j >= threshold, threshold = max of
//     top-k: the k-th largest e (ties at it are kept), when 0 < top_k < vocab;
//     top-p: the largest t >= the top-k threshold such that the kept mass sum(e_j >= t) is at
//            least top_p * (mass kept by top-k), when top_p < 1;
//     min-p: min_p (= min_p * the largest probability, in units of e).
//   Then u = philox_uniform(seed, counter) and the token is the first index (in vocab order)
//   whose running sum of kept e exceeds u * (total kept e); a token with e = 0 (a masked one)
//   is never drawn, not even by the rounding fallback.
// Thresholds are found exactly by binary search over the bit patterns of non-negative floats
// (their order matches the values'), each probe one block-wide count/sum over the vocabulary.
// sample_rows draws from chosen rows (draw i reads row rows[i] - row_base, so one row can be drawn
// from several times, e.g. by the n choices of one prompt); sample() is draw i = row i.
// Logprobs (logprobs >= 0): log_z = max + log(sum_j exp(double(x_j - max))) (the sum in double,
// as the host's token_logprob), the drawn token's x - log_z and the `logprobs` largest x (ties:
// lower id; -inf never listed) found by as many block-wide argmax passes.
// Launch: edit_kernel then sample_kernel, each grid (n_draws), 1024 threads. Deterministic:
// fixed reduction trees, and the final scan walks fixed contiguous chunks in index order.
// Assumptions: finite logits before the edits (a mask may make them -inf; a row with no token
// left draws token 0, which the engine discards); vocab >= 1; a mask has (vocab + 31) / 32
// words; edits are distinct tokens in [0, vocab).
// CPU reference: tests/support/draw_reference.h (the host sampler's own mask and edit functions,
// then sample_reference.h's draw and token_logprob).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/philox.h"

namespace pagoda::cuda {
namespace {

constexpr int kThreads = 1024;

__device__ __forceinline__ float bits_to_float(uint32_t b) { return __uint_as_float(b); }

// The draw's logprobs (see the top of the file) into *p.logprobs_out. Called by every thread
// of the block; `mx` is the row's max, `pick` the drawn token.
__device__ void write_logprobs(const float* x, int vocab, float mx, int pick, const DrawParams& p,
                               float* scratch) {
  __shared__ double dsum[kThreads];
  __shared__ int s_top;
  const int tid = threadIdx.x;
  double s = 0.0;
  for (int j = tid; j < vocab; j += kThreads) s += exp(static_cast<double>(x[j] - mx));
  dsum[tid] = s;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (tid < half) dsum[tid] += dsum[tid + half];
    __syncthreads();
  }
  const float log_z = mx + static_cast<float>(log(dsum[0]));
  DrawLogprobs* out = p.logprobs_out;
  if (tid == 0) out->logprob = x[pick] - log_z;
  const int n = min(p.logprobs, kMaxDrawTopLogprobs);
  // Pass k: the most likely token after the (k-1)-th pick (prev_v, prev_i) in the order
  // "larger logit, then lower id".
  float prev_v = INFINITY;
  int prev_i = -1, k = 0;
  for (; k < n; ++k) {
    float best = -INFINITY;
    int best_i = vocab;
    for (int j = tid; j < vocab; j += kThreads) {
      const float v = x[j];
      if ((v < prev_v || (v == prev_v && j > prev_i)) && v > best) {
        best = v;
        best_i = j;
      }
    }
    const float m = block_max(best, scratch);
    if (!(m > -INFINITY)) break;  // no possible token left (the same for every thread)
    if (tid == 0) s_top = vocab;
    __syncthreads();
    if (best == m) atomicMin(&s_top, best_i);
    __syncthreads();
    prev_v = m;
    prev_i = s_top;
    if (tid == 0) {
      out->top_id[k] = prev_i;
      out->top_logprob[k] = m - log_z;
    }
  }
  if (tid == 0) out->n_top = k;
}

// The edits of draw i's row, in place (see the top of the file): only the row's first draw.
__global__ void __launch_bounds__(kThreads)
    edit_kernel(float* logits, int vocab, const int32_t* rows, int64_t row_base, const DrawParams* params) {
  const int i = blockIdx.x, tid = threadIdx.x;
  const DrawParams& p = params[i];
  if (!p.allowed && p.n_edits == 0) return;
  if (rows && i > 0 && rows[i - 1] == rows[i]) return;
  float* x = logits + (rows ? rows[i] - row_base : i) * static_cast<int64_t>(vocab);
  if (p.allowed)
    for (int j = tid; j < vocab; j += kThreads)
      if (!((p.allowed[j >> 5] >> (j & 31)) & 1u)) x[j] = -INFINITY;
  __syncthreads();  // an edit of a masked token reads its -inf
  for (int e = tid; e < p.n_edits; e += kThreads) {
    const TokenEdit t = p.edits[e];
    x[t.token] = edited_logit(x[t.token], t, p.repetition_penalty, p.presence_penalty, p.frequency_penalty);
  }
}

// 1024 threads need at most 64 registers each (64K per block): the bound makes the compiler keep
// to that (spilling if ever needed) instead of producing a kernel whose launch fails on the GPU
// with "too many resources requested".
// (40 registers on sm_80 and 32 on sm_90 without the bound; 32 on both with it.)
__global__ void __launch_bounds__(kThreads)
    sample_kernel(const float* logits, int vocab, const int32_t* rows, int64_t row_base,
                  const DrawParams* params, int32_t* out) {
  __shared__ float scratch[32];
  __shared__ float chunk_sum[kThreads];
  __shared__ int s_idx, s_pick;
  const int row = blockIdx.x, tid = threadIdx.x;
  const int64_t logit_row = rows ? rows[row] - row_base : row;
  const float* x = logits + logit_row * vocab;
  const DrawParams p = params[row];

  // Max logit and its lowest index: reduce (value, index) pairs through shared memory.
  float best = -INFINITY;
  int best_i = vocab;
  for (int j = tid; j < vocab; j += kThreads)
    if (x[j] > best) {  // strictly greater: keeps the lowest index of a tie within a thread
      best = x[j];
      best_i = j;
    }
  const float mx = block_max(best, scratch);
  if (!(mx > -INFINITY)) {  // a mask left no token (the engine ends the sequence)
    if (tid == 0) out[row] = 0;
    return;
  }
  if (tid == 0) s_idx = vocab;
  __syncthreads();
  if (best == mx) atomicMin(&s_idx, best_i);
  __syncthreads();
  if (p.temperature <= 0.0f) {
    if (tid == 0) out[row] = s_idx < vocab ? s_idx : 0;
    if (p.logprobs >= 0) write_logprobs(x, vocab, mx, s_idx < vocab ? s_idx : 0, p, scratch);
    return;
  }

  // (x - max) / T, not x/T - max/T: at small T the two large products would cancel.
  const float inv_t = 1.0f / p.temperature;
  auto e = [&](int j) { return expf((x[j] - mx) * inv_t); };

  // Count of e_j >= t and mass of e_j >= t, over the whole row.
  auto count_ge = [&](float t) {
    float c = 0.0f;
    for (int j = tid; j < vocab; j += kThreads) c += e(j) >= t ? 1.0f : 0.0f;
    return block_sum(c, scratch);
  };
  auto mass_ge = [&](float t) {
    float s = 0.0f;
    for (int j = tid; j < vocab; j += kThreads) {
      const float v = e(j);
      if (v >= t) s += v;
    }
    return block_sum(s, scratch);
  };

  const uint32_t one_bits = __float_as_uint(1.0f);
  float thr = 0.0f;
  if (p.top_k > 0 && p.top_k < vocab) {
    // Largest b in [0, bits(1)] with count(e >= b) >= k. count(0) = vocab >= k holds.
    uint32_t lo = 0, hi = one_bits;
    while (lo < hi) {
      const uint32_t mid = lo + (hi - lo + 1) / 2;
      if (count_ge(bits_to_float(mid)) >= (float)p.top_k) lo = mid; else hi = mid - 1;
    }
    thr = bits_to_float(lo);
  }
  if (p.top_p < 1.0f) {
    const float target = p.top_p * mass_ge(thr);
    uint32_t lo = __float_as_uint(thr), hi = one_bits;  // cond holds at lo
    while (lo < hi) {
      const uint32_t mid = lo + (hi - lo + 1) / 2;
      if (mass_ge(bits_to_float(mid)) >= target) lo = mid; else hi = mid - 1;
    }
    thr = fmaxf(thr, bits_to_float(lo));
  }
  if (p.min_p > 0.0f) thr = fmaxf(thr, fminf(p.min_p, 1.0f));

  // Kept mass per contiguous chunk, then a sequential walk over chunks in index order.
  const int chunk = (vocab + kThreads - 1) / kThreads;
  const int c_begin = tid * chunk, c_end = min(vocab, c_begin + chunk);
  float s = 0.0f;
  for (int j = c_begin; j < c_end; ++j) {
    const float v = e(j);
    if (v >= thr) s += v;
  }
  chunk_sum[tid] = s;
  __syncthreads();
  if (tid == 0) {
    float total = 0.0f;
    for (int c = 0; c < kThreads; ++c) total += chunk_sum[c];
    const float target = philox_uniform(p.seed, p.counter) * total;
    int pick = -1, last_kept = -1;
    float run = 0.0f;
    for (int c = 0; c < kThreads && pick < 0; ++c) {
      if (chunk_sum[c] == 0.0f) continue;
      if (run + chunk_sum[c] <= target) {  // the draw lies beyond this chunk
        run += chunk_sum[c];
        // remember the chunk's last kept token in case rounding leaves the draw past the end
        for (int j = min(vocab, (c + 1) * chunk) - 1; j >= c * chunk; --j)
          if (e(j) >= thr && e(j) > 0.0f) { last_kept = j; break; }
        continue;
      }
      for (int j = c * chunk; j < min(vocab, (c + 1) * chunk); ++j) {
        const float v = e(j);
        if (v < thr || !(v > 0.0f)) continue;  // a zero weight (a masked token) is never drawn
        last_kept = j;
        run += v;
        if (run > target) { pick = j; break; }
      }
    }
    if (pick < 0) pick = last_kept >= 0 ? last_kept : s_idx;  // rounding fallback
    out[row] = pick;
    s_pick = pick;
  }
  if (p.logprobs >= 0) {
    __syncthreads();
    write_logprobs(x, vocab, mx, s_pick, p, scratch);
  }
}

}  // namespace

void sample(float* logits, int64_t n_rows, int vocab, const DrawParams* params, int32_t* out, void* stream) {
  sample_rows(logits, vocab, nullptr, 0, n_rows, params, out, stream);
}

void sample_rows(float* logits, int vocab, const int32_t* rows, int64_t row_base, int64_t n_draws,
                 const DrawParams* params, int32_t* out, void* stream) {
  if (vocab <= 0) throw CudaError("sample: empty vocabulary");
  if (n_draws <= 0) return;
  edit_kernel<<<static_cast<unsigned>(n_draws), kThreads, 0, as_stream(stream)>>>(logits, vocab, rows, row_base,
                                                                                params);
  CUDA_CHECK_LAUNCH();
  sample_kernel<<<static_cast<unsigned>(n_draws), kThreads, 0, as_stream(stream)>>>(
      logits, vocab, rows, row_base, params, out);
  CUDA_CHECK_LAUNCH();
}

}  // namespace pagoda::cuda
