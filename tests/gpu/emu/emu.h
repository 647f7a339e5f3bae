// CPU emulation of the CUDA execution model, just enough to run pagoda's kernels (as rewritten by
// gen.py) on a machine without a GPU. Every CUDA thread of a block is a fiber (its own stack,
// switched cooperatively on the launching OS thread: emu_runtime.cpp); blocks of a launch run
// one after another; __syncthreads is a barrier over the block's threads that have not exited,
// warp shuffles go through a per-thread exchange buffer and a warp barrier, as do the
// tensor-core instructions of kernels/cuda/mma.cuh (emu_mma.cpp: mma.sync m16n8k16 bf16 / f16 / s8
// and ldmatrix x4, with the hardware's per-lane fragment placement), and __syncwarp is the warp
// barrier (a lane reading what another lane of its warp wrote to shared memory waits there for
// the writer, as the hardware's memory ordering requires); a block whose
// threads wait at different barriers is reported as a deadlock (an exception) instead of
// hanging; "__shared__" variables become function statics (shared by the block's threads,
// reused by the next block). It checks indexing, synchronisation structure, arithmetic and each launch's configuration against the hardware
// limits (check_launch); it says nothing about speed, memory coalescing, registers,
// occupancy, races the real scheduler could expose, or warp-divergent shuffles (it assumes all
// 32 lanes of a warp reach each shuffle, as pagoda's kernels do). Used by
// scripts/gpu-check.sh emu; never part of the real build.
// Stream capture (CUDA graphs): while the host thread captures, launches, async copies/memsets
// and GEMMs are recorded instead of run, and a graph launch runs the recording in order;
// synchronising calls (stream/event/device sync, malloc/free, plain cudaMemcpy) fail then, as
// the real runtime refuses them during a capture.
#pragma once
// Kernel headers pick the emulator's versions of instructions g++ cannot compile (mma.cuh).
#define PAGODA_CUDA_EMU 1
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <algorithm>
#include <cstdint>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <memory>
#include <mutex>
#include <vector>

namespace emu {
// Dynamic shared memory a block may opt into on sm_80 (the smaller of the two targets).
constexpr int kMaxSmemOptIn = 163 * 1024;
extern thread_local dim3 t_threadIdx, t_blockIdx;
extern dim3 g_blockDim, g_gridDim;
extern std::vector<float> g_smem;
// The recording of the capture in progress on this thread, or null (see emu_runtime.cpp).
extern thread_local std::vector<std::function<void()>>* t_capture;
extern std::mutex g_atomic_mu;
inline int flat_tid() { return t_threadIdx.x + g_blockDim.x * (t_threadIdx.y + g_blockDim.y * t_threadIdx.z); }
// Barriers of the block being run (emu_runtime.cpp): the calling CUDA thread waits until every
// thread of its block (syncthreads) or of its warp (warp_sync) that has not exited arrives.
void syncthreads();
void warp_sync();
// The per-thread value exchange of the block's warp shuffles.
float* shuffle_slots();
inline float shfl_xor(float v, int off) {
  const int t = flat_tid(), w = t / 32, lane = t % 32;
  float* xchg = shuffle_slots();
  xchg[t] = v;
  warp_sync();
  const float r = xchg[w * 32 + (lane ^ off)];
  warp_sync();
  return r;
}
// Per-thread words for warp-collective operations that exchange more than one float
// (kWordSlots per thread of the block).
constexpr int kWordSlots = 16;
uint32_t* word_slots();
// The tensor-core instructions of kernels/cuda/mma.cuh (emu_mma.cpp), warp-collective with the
// PTX ISA's fragment placement.
void mma_bf16_m16n8k16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]);
void mma_f16_m16n8k16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]);
void mma_s8_m16n8k16(int (&d)[4], const uint32_t (&a)[2], uint32_t b);
void ldmatrix_x4(uint32_t (&r)[4], const void* row);
struct Cfg { dim3 grid, block; size_t smem; };

// Dynamic shared memory limits each kernel was opted into with
// cudaFuncSetAttribute(cudaFuncAttributeMaxDynamicSharedMemorySize) (see the macro below).
std::map<const void*, int>& smem_opt_in();
template <class K>
cudaError_t func_set_attribute(K* kernel, cudaFuncAttribute attr, int value) {
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
    if (value < 0 || value > kMaxSmemOptIn) return cudaErrorInvalidValue;
    smem_opt_in()[reinterpret_cast<const void*>(kernel)] = value;
  }
  return cudaSuccess;
}

// What the real runtime refuses at launch (cudaErrorInvalidConfiguration and friends), which
// the emulation would otherwise run happily: empty or oversized grids and blocks, and dynamic
// shared memory above 48 KiB without the opt-in, or above what sm_80 allows at all (163 KiB;
// sm_90 allows 227 KiB). Throws, naming the kernel's problem.
template <class K>
void check_launch(K* kernel, const Cfg& c) {
  auto fail = [](const std::string& what) {
    throw std::runtime_error("emulated CUDA launch refused: " + what);
  };
  const unsigned long long threads = 1ull * c.block.x * c.block.y * c.block.z;
  if (threads == 0 || threads > 1024 || c.block.z > 64)
    fail("block of " + std::to_string(c.block.x) + "x" + std::to_string(c.block.y) + "x" +
         std::to_string(c.block.z) + " threads (1..1024, z <= 64)");
  if (c.grid.x == 0 || c.grid.y == 0 || c.grid.z == 0 || c.grid.x > 2147483647u ||
      c.grid.y > 65535 || c.grid.z > 65535)
    fail("grid of " + std::to_string(c.grid.x) + "x" + std::to_string(c.grid.y) + "x" +
         std::to_string(c.grid.z) + " blocks (x 1..2^31-1, y and z 1..65535)");
  if (c.smem > 48 * 1024) {
    const auto it = smem_opt_in().find(reinterpret_cast<const void*>(kernel));
    const size_t allowed = it == smem_opt_in().end() ? 48 * 1024 : static_cast<size_t>(it->second);
    if (c.smem > allowed)
      fail(std::to_string(c.smem) + " bytes of dynamic shared memory, " + std::to_string(allowed) +
           " allowed (cudaFuncSetAttribute(MaxDynamicSharedMemorySize) opts in above 48 KiB)");
  }
}
inline Cfg cfg(dim3 g, dim3 b, size_t smem = 0, cudaStream_t = nullptr) { return Cfg{g, b, smem}; }
inline float* dynamic_smem() { return g_smem.data(); }

// Runs `thread_body` as every CUDA thread of every block of the grid `c` (emu_runtime.cpp).
void run_grid(const Cfg& c, const std::function<void()>& thread_body);

template <class K, class... A>
void run_launch(K kernel, Cfg c, A... args) {
  run_grid(c, [&] { kernel(args...); });
}

template <class K, class... A>
void launch(K kernel, Cfg c, A... args) {
  check_launch(kernel, c);  // the real runtime refuses these at launch (and at capture)
  if (t_capture) {
    t_capture->push_back([=] { run_launch(kernel, c, args...); });
    return;
  }
  run_launch(kernel, c, args...);
}
}  // namespace emu

#undef __shared__
#define __shared__ static
#undef __launch_bounds__
#define __launch_bounds__(...)
#define threadIdx (::emu::t_threadIdx)
#define blockIdx (::emu::t_blockIdx)
#define blockDim (::emu::g_blockDim)
#define gridDim (::emu::g_gridDim)
#define __syncthreads() ::emu::syncthreads()
#define __syncwarp(...) ::emu::warp_sync()
#define __shfl_xor_sync(mask, v, off) ::emu::shfl_xor((v), (off))
#define cudaFuncSetAttribute(kernel, attr, value) ::emu::func_set_attribute((kernel), (attr), (value))
inline int atomicMin(int* p, int v) { std::lock_guard<std::mutex> l(emu::g_atomic_mu); int o = *p; *p = std::min(o, v); return o; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __frcp_rn(float a) { return 1.0f / a; }
inline int __float2int_rn(float a) { return static_cast<int>(std::nearbyint(a)); }  // ties to even
// dp4a: the four signed byte products of a and b (byte k with byte k) summed into c.
inline int __dp4a(int a, int b, int c) {
  for (int k = 0; k < 4; ++k)
    c += static_cast<int>(static_cast<int8_t>(static_cast<unsigned>(a) >> (8 * k))) *
         static_cast<int>(static_cast<int8_t>(static_cast<unsigned>(b) >> (8 * k)));
  return c;
}
inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
using std::min;
using std::max;
