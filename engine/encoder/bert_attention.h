// Bidirectional softmax attention of an encoder batch on the CPU: every token attends to every
// token of its own input (and no other input's), all heads of the same width, no mask and no
// cache. q, k, v and out are the batch's stacked rows [total x dim] (dim = heads x head_dim);
// input b owns rows [starts[b], starts[b + 1]).
//
// Work is split over (input, head) pairs, one pair per task, so an input's result never
// depends on the batch: each pair runs the same arithmetic whatever else is in the batch and
// however the pairs fall to threads. Per pair, with the head's Q, K and V rows copied out
// contiguously: scores = Q K^T (cpu::matmul, F32, on a one-thread pool: batch-invariant
// itself), scaled by 1/sqrt(head_dim), softmax per row (cpu::softmax_row), then out = P V
// (cpu::matmul against V transposed).
#pragma once

#include <cstdint>
#include <vector>

namespace pagoda::cpu { class ThreadPool; }

namespace pagoda::encoder {

void encoder_attention(cpu::ThreadPool& pool, const std::vector<int64_t>& starts, int n_heads, int head_dim,
                       const float* q, const float* k, const float* v, float* out);

}  // namespace pagoda::encoder
