// The emulator's tensor-core instructions (kernels/cuda/mma.cuh; see emu.h: mma.sync m16n8k16
// on bf16 or f16 with f32 accumulators and on s8 with s32 accumulators, ldmatrix x4): each is
// warp-collective, as on the hardware. Every lane publishes its operand registers (or its row
// address) in its word slots, the warp meets at a barrier, and each lane then assembles its own
// result registers from the other lanes' slots by the PTX ISA's fragment placement, and the warp
// meets again before the slots can be reused. So a kernel that builds or reads a fragment with
// the wrong lane / register / half mapping gets wrong numbers here as it would on a GPU.
// Numerics: bf16 and f16 products are exact in f32; the 16 products of an output are summed in k order
// in f32 and then added to the accumulator (the hardware's internal order and precision are
// unspecified; tests allow f32 rounding). s8 products and their sums are exact integers (the
// hardware's too: 16 products of at most 2^14 stay far from the s32 limits).
#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "emu.h"

namespace emu {
namespace {

float bf16_bits_to_float(uint32_t h) {
  const uint32_t u = (h & 0xFFFFu) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

float f16_bits_to_float(uint32_t h) {
  __half_raw r;
  r.x = static_cast<unsigned short>(h & 0xFFFFu);
  return __half2float(__half(r));
}

// The m16n8k16 output fragment of lane `lane`: d[i] += sum over k of A(row, k) * B(k, col) in k
// order, for row g + 8 (i / 2) and column 2 tg + i % 2 (g = lane / 4, tg = lane % 4), read from
// the warp's slots; the slots are free again when it returns.
template <typename T, typename FA, typename FB>
void accumulate_fragment(T (&d)[4], int lane, FA A, FB B) {
  const int g = lane / 4, tg = lane % 4;
  T r[4];
  for (int i = 0; i < 4; ++i) {
    const int row = g + 8 * (i / 2), col = 2 * tg + i % 2;
    T s = 0;
    for (int k = 0; k < 16; ++k) s += A(row, k) * B(k, col);
    r[i] = d[i] + s;
  }
  warp_sync();  // every lane has read the slots
  for (int i = 0; i < 4; ++i) d[i] = r[i];
}

// m16n8k16 with f32 accumulators on 16-bit elements that `to_float` decodes (bf16 or f16).
template <float (*to_float)(uint32_t)>
void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  const int t = flat_tid(), lane = t % 32;
  uint32_t* slots = word_slots();
  uint32_t* mine = slots + t * kWordSlots;
  for (int i = 0; i < 4; ++i) mine[i] = a[i];
  mine[4] = b[0];
  mine[5] = b[1];
  warp_sync();
  const uint32_t* warp = slots + (t / 32) * 32 * kWordSlots;
  // Element `half` (0: low 16 bits) of register `reg` of lane `lane`'s slots.
  auto elem = [&](int lane_of, int reg, int half) { return to_float(warp[lane_of * kWordSlots + reg] >> (16 * half)); };
  // A[row][k] sits in lane (row % 8) * 4 + (k % 8) / 2, register (row >= 8) + 2 (k >= 8),
  // half k % 2; B[k][col] in lane col * 4 + (k % 8) / 2, register 4 + (k >= 8), half k % 2.
  auto A = [&](int row, int k) { return elem((row % 8) * 4 + (k % 8) / 2, (row >= 8) + 2 * (k >= 8), k % 2); };
  auto B = [&](int k, int col) { return elem(col * 4 + (k % 8) / 2, 4 + (k >= 8), k % 2); };
  accumulate_fragment(d, lane, A, B);
}

}  // namespace

void mma_s8_m16n8k16(int (&d)[4], const uint32_t (&a)[2], uint32_t b) {
  const int t = flat_tid(), lane = t % 32;
  uint32_t* slots = word_slots();
  uint32_t* mine = slots + t * kWordSlots;
  mine[0] = a[0];
  mine[1] = a[1];
  mine[2] = b;
  warp_sync();
  const uint32_t* warp = slots + (t / 32) * 32 * kWordSlots;
  // Byte `byte` of register `reg` of lane `lane_of`, as a signed integer.
  auto elem = [&](int lane_of, int reg, int byte) {
    return static_cast<int>(static_cast<int8_t>(warp[lane_of * kWordSlots + reg] >> (8 * byte)));
  };
  // A[row][k] sits in lane (row % 8) * 4 + k / 4, register row >= 8, byte k % 4; B[k][col] in
  // lane col * 4 + k / 4, register 2, byte k % 4.
  auto A = [&](int row, int k) { return elem((row % 8) * 4 + k / 4, row >= 8, k % 4); };
  auto B = [&](int k, int col) { return elem(col * 4 + k / 4, 2, k % 4); };
  accumulate_fragment(d, lane, A, B);
}

void mma_bf16_m16n8k16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  mma_m16n8k16<bf16_bits_to_float>(d, a, b);
}
void mma_f16_m16n8k16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  mma_m16n8k16<f16_bits_to_float>(d, a, b);
}

void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  const int t = flat_tid(), lane = t % 32;
  if (reinterpret_cast<uintptr_t>(row) % 16 != 0)
    throw std::runtime_error("emulated ldmatrix: a row address is not 16-byte aligned");
  uint32_t* slots = word_slots();
  const uint64_t addr = reinterpret_cast<uintptr_t>(row);
  slots[t * kWordSlots] = static_cast<uint32_t>(addr);
  slots[t * kWordSlots + 1] = static_cast<uint32_t>(addr >> 32);
  warp_sync();
  const uint32_t* warp = slots + (t / 32) * 32 * kWordSlots;
  uint32_t got[4];
  for (int j = 0; j < 4; ++j) {
    // Matrix j's row lane / 4 comes from lane 8j + lane / 4's address; this lane takes its
    // columns 2 (lane % 4) and 2 (lane % 4) + 1: the row's 32-bit word lane % 4.
    const int src = 8 * j + lane / 4;
    const uint64_t a = warp[src * kWordSlots] | (static_cast<uint64_t>(warp[src * kWordSlots + 1]) << 32);
    std::memcpy(&got[j], reinterpret_cast<const uint8_t*>(static_cast<uintptr_t>(a)) + 4 * (lane % 4), 4);
  }
  warp_sync();
  for (int j = 0; j < 4; ++j) r[j] = got[j];
}

}  // namespace emu
