// The row ops of encoder models (bert) on the CPU, also the reference of the CUDA ones
// (kernels/cuda/encoder.cu).
//
// layer_norm_rows: each row of x [n x d] becomes (x - mean) / sqrt(var + eps) * g + b, mean and
// variance summed in double in index order (a row's result never depends on the others).
//
// encoder_attention: bidirectional softmax attention of an encoder batch: every token attends to every
// token of its own input (and no other input's), all heads of the same width, no mask and no
// cache. q, k, v and out are the batch's stacked rows [total x dim] (dim = heads x head_dim);
// input b owns rows [starts[b], starts[b + 1]).
//
// Work is split over (input, head) pairs, one pair per task, so an input's result never
// depends on the batch: each pair runs the same arithmetic whatever else is in the batch and
// however the pairs fall to threads. Per pair, with the head's Q, K and V rows copied out
// contiguously: scores = Q K^T (matmul, F32, on a one-thread pool: batch-invariant
// itself), scaled by 1/sqrt(head_dim), softmax per row (softmax_row), then out = P V
// (matmul against V transposed).
#pragma once

#include <cstdint>
#include <vector>

namespace pagoda::cpu {

class ThreadPool;

void layer_norm_rows(const float* x, int64_t n, int64_t d, const float* g, const float* b, float eps, float* out);

void encoder_attention(ThreadPool& pool, const std::vector<int64_t>& starts, int n_heads, int head_dim,
                       const float* q, const float* k, const float* v, float* out);

}  // namespace pagoda::cpu
