// The emulator's execution of a launch (see emu.h): every CUDA thread of a block is a fiber with
// its own stack, run cooperatively on the launching OS thread, so a barrier costs a few context
// switches instead of an OS-thread handoff (the emulation used to start one OS thread per CUDA
// thread per launch, which made a whole-model run take hours on a small machine). Semantics
// kept: a thread runs until it waits at a barrier or exits; __syncthreads releases the block's
// threads once every thread that has not exited arrived (exited threads count as arrived, as on
// the hardware for whole warps); warp barriers the same over a warp. A block whose live threads
// all wait without any barrier being able to complete is a deadlock: reported as an exception.
// Launches are serialized (one block at a time, process-wide). Between block barriers, the
// warps of a block run one after the other in index order (each warp's threads one after the
// other between its warp barriers, in index order), or all in reverse with
// PAGODA_EMU_REVERSE=1: a missing __syncthreads shows up as a deterministic wrong result when a
// thread reads what a thread later in that order writes (run both orders to catch it either
// way), also when the warps meet at warp-collective operations (shuffles, mma.sync, ldmatrix)
// in between, since a warp runs on to its next block barrier before the next warp starts.
#include <sys/mman.h>

#include <cstdlib>
#include <cstdint>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "emu.h"

namespace emu {
namespace {

constexpr size_t kStackBytes = 256 * 1024;  // kernels keep small per-thread arrays only
constexpr size_t kGuardBytes = 4096;        // below each stack: an overflow faults

// Saves the callee-saved registers on the current stack, stores the stack pointer in *save,
// switches to `to` and restores what it saved there (x86-64 System V). The FP control words
// (MXCSR, x87) are left alone: no kernel changes them, and loading them costs more than the rest.
extern "C" void emu_fiber_switch(void** save, void* to);
asm(R"(
.text
.globl emu_fiber_switch
.type emu_fiber_switch,@function
emu_fiber_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
.size emu_fiber_switch,.-emu_fiber_switch
.section .note.GNU-stack,"",@progbits
.text
)");

// A barrier over `expected` threads that have not exited; `generation` counts completions.
struct Barrier {
  int expected = 0, arrived = 0;
  unsigned generation = 0;
};

struct Fiber {
  void* sp = nullptr;
  char* stack = nullptr;  // kStackBytes usable, above a guard page
  dim3 idx;
  bool done = false;
  // The barrier it waits at and that barrier's generation then: not worth resuming until the
  // generation moves.
  const Barrier* waiting = nullptr;
  unsigned waiting_gen = 0;
};

struct Block {
  std::vector<Fiber> fibers;
  Barrier block;
  std::vector<Barrier> warps;
  std::vector<float> xchg;
  std::vector<uint32_t> words;  // kWordSlots per thread (word_slots)
  int current = -1;
  void* scheduler_sp = nullptr;
  uint64_t progress = 0;  // barrier completions and exits
  const std::function<void()>* body = nullptr;
  std::exception_ptr error;
};

Block g_block;  // the block being run (launches are serialized)
std::mutex g_launch_mu;

void yield_to_scheduler() {
  Fiber& f = g_block.fibers[static_cast<size_t>(g_block.current)];
  emu_fiber_switch(&f.sp, g_block.scheduler_sp);
}

void complete(Barrier& b) {
  b.arrived = 0;
  ++b.generation;
  ++g_block.progress;
}

void arrive_and_wait(Barrier& b) {
  const unsigned gen = b.generation;
  if (++b.arrived >= b.expected) {
    complete(b);
    return;
  }
  Fiber& f = g_block.fibers[static_cast<size_t>(g_block.current)];
  f.waiting = &b;
  f.waiting_gen = gen;
  while (b.generation == gen) yield_to_scheduler();
  f.waiting = nullptr;
}

// An exited thread no longer holds its block's or warp's barriers back.
void drop(Barrier& b) {
  --b.expected;
  if (b.arrived > 0 && b.arrived >= b.expected) complete(b);
}

[[noreturn]] void fiber_entry() {
  Fiber& f = g_block.fibers[static_cast<size_t>(g_block.current)];
  try {
    (*g_block.body)();
  } catch (...) {
    if (!g_block.error) g_block.error = std::current_exception();
  }
  f.done = true;
  const int t = g_block.current;
  drop(g_block.block);
  drop(g_block.warps[static_cast<size_t>(t / 32)]);
  ++g_block.progress;
  void* dead_sp;
  emu_fiber_switch(&dead_sp, g_block.scheduler_sp);
  __builtin_unreachable();
}

char* new_stack() {
  void* p = mmap(nullptr, kStackBytes + kGuardBytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw std::runtime_error("emulator: cannot map a fiber stack");
  mprotect(p, kGuardBytes, PROT_NONE);
  return static_cast<char*>(p) + kGuardBytes;
}

// Lays out a fresh stack so that switching to it "returns" into fiber_entry with the ABI's
// alignment (rsp = 8 mod 16 at entry) and zeroed callee-saved registers.
void* initial_sp(char* stack) {
  auto top = reinterpret_cast<uintptr_t>(stack + kStackBytes) & ~uintptr_t(15);
  auto* slot = reinterpret_cast<uint64_t*>(top);
  *--slot = 0;                                           // fiber_entry's (unused) return address
  *--slot = reinterpret_cast<uint64_t>(&fiber_entry);    // popped by `ret`
  for (int r = 0; r < 6; ++r) *--slot = 0;               // rbp rbx r12 r13 r14 r15
  return slot;
}

void run_block(int n) {
  Block& b = g_block;
  for (int t = 0; t < n; ++t) {
    Fiber& f = b.fibers[static_cast<size_t>(t)];
    f.sp = initial_sp(f.stack);
    f.done = false;
    f.waiting = nullptr;
  }
  b.block = Barrier{n, 0, 0};
  for (size_t w = 0; w < b.warps.size(); ++w)
    b.warps[w] = Barrier{std::min(32, n - 32 * static_cast<int>(w)), 0, 0};
  static const bool reverse = [] {
    const char* e = std::getenv("PAGODA_EMU_REVERSE");
    return e && std::string(e) == "1";
  }();
  // Warp by warp: each warp runs until all its live threads wait at a barrier that cannot
  // complete yet (in practice the block barrier), before the next warp starts, so warps drift
  // as far apart as the block barriers allow (warp barriers and shuffles keep a warp's lanes
  // together, not the warps).
  const int n_warps = (n + 31) / 32;
  int live = n;
  while (live > 0) {
    const uint64_t before = b.progress;
    for (int wi = 0; wi < n_warps; ++wi) {
      const int w = reverse ? n_warps - 1 - wi : wi;
      const int lanes = std::min(32, n - 32 * w);
      for (bool ran = true; ran;) {
        ran = false;
        for (int i = 0; i < lanes; ++i) {
          const int t = 32 * w + (reverse ? lanes - 1 - i : i);
          Fiber& f = b.fibers[static_cast<size_t>(t)];
          if (f.done || (f.waiting && f.waiting->generation == f.waiting_gen)) continue;
          b.current = t;
          t_threadIdx = f.idx;
          emu_fiber_switch(&b.scheduler_sp, f.sp);
          ran = true;
        }
      }
    }
    live = 0;
    for (int t = 0; t < n; ++t) live += !b.fibers[static_cast<size_t>(t)].done;
    b.current = -1;
    if (b.error) std::rethrow_exception(b.error);
    if (live > 0 && b.progress == before)
      throw std::runtime_error("emulated kernel deadlock: the threads of block (" +
                               std::to_string(t_blockIdx.x) + "," + std::to_string(t_blockIdx.y) +
                               "," + std::to_string(t_blockIdx.z) +
                               ") wait at barriers that cannot complete");
  }
}

}  // namespace

void syncthreads() { arrive_and_wait(g_block.block); }
void warp_sync() { arrive_and_wait(g_block.warps[static_cast<size_t>(flat_tid() / 32)]); }
float* shuffle_slots() { return g_block.xchg.data(); }
uint32_t* word_slots() { return g_block.words.data(); }

void run_grid(const Cfg& c, const std::function<void()>& thread_body) {
  std::lock_guard<std::mutex> lock(g_launch_mu);
  const int n = static_cast<int>(c.block.x * c.block.y * c.block.z);
  Block& b = g_block;
  while (b.fibers.size() < static_cast<size_t>(n)) {
    b.fibers.emplace_back();
    b.fibers.back().stack = new_stack();
  }
  for (int t = 0; t < n; ++t)
    b.fibers[static_cast<size_t>(t)].idx =
        dim3(t % c.block.x, (t / c.block.x) % c.block.y, t / (c.block.x * c.block.y));
  b.warps.assign(static_cast<size_t>((n + 31) / 32), Barrier{});
  b.xchg.assign(static_cast<size_t>(n), 0.0f);
  b.words.assign(static_cast<size_t>(n) * kWordSlots, 0u);
  b.body = &thread_body;
  b.error = nullptr;
  g_blockDim = c.block;
  g_gridDim = c.grid;
  g_smem.assign(c.smem / sizeof(float) + 16, 0.0f);
  const dim3 saved_thread = t_threadIdx;
  for (unsigned z = 0; z < c.grid.z; ++z)
    for (unsigned y = 0; y < c.grid.y; ++y)
      for (unsigned x = 0; x < c.grid.x; ++x) {
        t_blockIdx = dim3(x, y, z);
        run_block(n);
      }
  t_threadIdx = saved_thread;
}

}  // namespace emu
