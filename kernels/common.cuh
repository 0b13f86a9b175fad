// Shared helpers for every t4lib kernel family. sm_75 only: nothing here may
// use an instruction newer than Turing (no cp.async, bf16, FP8, TMA, wgmma).
#pragma once
#include <cstdint>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

// Exported launcher: C linkage, visible although the library hides the rest.
#define T4_API extern "C" __attribute__((visibility("default")))

// Every library exports its own error-string lookup: each links its own static
// cudart, so Python asks the library that produced the status.
T4_API const char* t4lib_error_string(int status) {
  return cudaGetErrorString(static_cast<cudaError_t>(status));
}

// Return the launch error (or 0) from a launcher.
#define T4_RETURN_LAUNCH_STATUS() return static_cast<int>(cudaGetLastError())

namespace t4 {

// d = LUT(a, b, c) bitwise, for any 3-input boolean function in one instruction.
// The immediate is the truth table evaluated on a=0xF0, b=0xCC, c=0xAA.
template <int kLut>
__device__ __forceinline__ uint32_t lop3(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm volatile("lop3.b32 %0, %1, %2, %3, %4;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c), "n"(kLut));
  return d;
}

__device__ __forceinline__ half2 as_half2(uint32_t u) { return *reinterpret_cast<half2*>(&u); }
__device__ __forceinline__ uint32_t as_u32(half2 h) { return *reinterpret_cast<uint32_t*>(&h); }

// Signed INT4 x8 -> fp16 x8 without branches or tables.
// Packing (done in Python): nibble slots [0,4,1,5,2,6,3,7] of the word hold
// values v0..v7, so shifting by 4*i brings the pair (v_2i, v_2i+1) into the
// low nibbles of the two 16-bit halves.
//   (q & 0x000F000F) ^ 0x64086408  (LUT 0x6A = (a & b) ^ c) places nibble^8 in
//   the mantissa of fp16 1024: 1024 + (s ^ 8) = 1024 + s + 8 for two's
//   complement s in [-8, 7]; subtracting 1032 (0x6408) leaves s exactly.
__device__ __forceinline__ void dequant_int4x8(uint32_t q, half2 (&out)[4]) {
  constexpr uint32_t kMask = 0x000F000Fu, kMagicXor = 0x64086408u;
  const half2 kBias = as_half2(0x64086408u);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    out[i] = __hsub2(as_half2(lop3<0x6A>(q >> (4 * i), kMask, kMagicXor)), kBias);
  }
}

// ------------------------------------------------------------------ FP8 E4M3 (emulated: sm_75 has no FP8)
// E4M3 byte: s eeee mmm, exponent bias 7, no infinities, 0x7F/0xFF are NaN,
// largest finite 448. fp16: s eeeee mmmmmmmmmm, bias 15.
// Decode with integer ops: put the sign at fp16 bit 15 and the 7 bits eeeemmm
// at fp16 bits 13..7. The fp16 then reads 2^(e-15)*(1.m) (or m/8*2^-14 when
// e == 0), exactly 2^-8 times the E4M3 value in both the normal and the
// subnormal case, so one exact multiply by 256 finishes the job.

// 4 E4M3 bytes (byte k = value k) -> out[0] = (v0, v1), out[1] = (v2, v3).
__device__ __forceinline__ void fp8_e4m3x4_to_half2(uint32_t q, half2 (&out)[2]) {
  const half2 k256 = as_half2(0x5C005C00u);  // 2^8 in both halves
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    // prmt: bytes [0, b(2i), 0, b(2i+1)] -> byte 2i at bits 8..15, byte 2i+1 at bits 24..31
    const uint32_t x = __byte_perm(q, 0u, i == 0 ? 0x1404u : 0x3424u);
    const uint32_t em = (x >> 1) & 0x3F803F80u;          // eeeemmm -> fp16 bits 13..7
    const uint32_t nan = (em + 0x00800080u) & 0x40004000u;  // em == 0x7F carries into bit 14
    // sign | em | nan; a NaN byte becomes s 11111 1110000000 (an fp16 NaN) before the rescale
    const uint32_t h = lop3<0xFE>(x & 0x80008000u, em, nan);  // a | b | c
    out[i] = __hmul2(as_half2(h), k256);                 // exact: a power of two, no overflow (max 448)
  }
}

// One E4M3 byte -> fp16 (same arithmetic, one lane).
__device__ __forceinline__ half fp8_e4m3_to_half(uint32_t b) {
  half2 h[2];
  fp8_e4m3x4_to_half2(b & 0xFFu, h);
  return __low2half(h[0]);
}

// fp16 -> E4M3 byte, round to nearest even, saturating: |x| > 448 (and +-inf)
// -> +-448 (0x7E/0xFE), NaN -> 0x7F | sign. Branch-free (selects).
__device__ __forceinline__ uint32_t half_to_fp8_e4m3(half x) {
  const uint32_t h = __half_as_ushort(x);
  const uint32_t s = (h >> 8) & 0x80u;
  const uint32_t a = h & 0x7FFFu;
  // normal E4M3 (|x| >= 2^-6, fp16 bits >= 0x2400): drop 7 mantissa bits with
  // round-to-nearest-even (add 0x3F + lsb, carry may bump the exponent), then
  // rebias the exponent 15 -> 7 (subtract 8 << 3 in the 7-bit field).
  const uint32_t n = ((a + 0x3Fu + ((a >> 7) & 1u)) >> 7) - 0x40u;
  // subnormal E4M3 (|x| < 2^-6): multiples of 2^-9; x * 512 is exact in fp32,
  // rint is round-to-nearest-even; 8 is the smallest normal, encoded 0x08.
  const uint32_t d = static_cast<uint32_t>(__float2int_rn(__half2float(__ushort_as_half(
                                                              static_cast<unsigned short>(a))) * 512.f));
  uint32_t r = a < 0x2400u ? d : n;
  r = a > 0x5F00u ? 0x7Eu : r;  // above 448 (0x5F00) incl. inf: saturate
  r = a > 0x7C00u ? 0x7Fu : r;  // NaN
  return r | s;
}

// ------------------------------------------------------------------ signed INT3 bitplanes
// 32 values in three 32-bit planes: bit i of plane p is bit p of value i
// (two's complement, values -4..3). Output pairs in natural order:
// out[k] = (v[2k], v[2k+1]), k = 0..15. No branches, no table.
//   1. For each residue class r = i mod 4, gather the three bits of every value
//      i = 4m + r into one word W_r, field at bits 4m..4m+2 (bit 4m+3 is junk):
//      bit 4m <- plane0 bit i, 4m+1 <- plane1 bit i, 4m+2 <- NOT plane2 bit i
//      (two shifts per plane and two lop3 bit-selects per class).
//   2. Value pair (j, j+16) with j = 4m + r < 16 sits at bits 4m and 4m+16 of
//      W_r: one shift and one lop3 ((w & 0x00070007) | 0x64006400) make the fp16
//      pair 1024 + (v + 4) (inverting the sign bit adds 4 to two's complement).
//   3. prmt re-pairs (j, j+16),(j+1, j+17) into (j, j+1),(j+16, j+17); one hsub2
//      of 1028 leaves v exactly.
template <int kShift>
__device__ __forceinline__ uint32_t shift_signed(uint32_t x) {  // x >> kShift, or x << -kShift
  return kShift >= 0 ? (x >> (kShift & 31)) : (x << ((-kShift) & 31));
}

template <int kR>
__device__ __forceinline__ uint32_t int3_class_word(uint32_t p0, uint32_t p1, uint32_t p2) {
  const uint32_t a = shift_signed<kR>(p0), b = shift_signed<kR - 1>(p1), c = shift_signed<kR - 2>(p2);
  const uint32_t u = lop3<0xE4>(a, b, 0x11111111u);  // bits 4m from a, others from b: (a & c) | (b & ~c)
  return lop3<0xB1>(u, c, 0x33333333u);              // bits 4m+2,4m+3 from ~c:  (a & c) | (~b & ~c)
}

__device__ __forceinline__ void dequant_int3x32(uint32_t p0, uint32_t p1, uint32_t p2, half2 (&out)[16]) {
  const uint32_t w[4] = {int3_class_word<0>(p0, p1, p2), int3_class_word<1>(p0, p1, p2),
                         int3_class_word<2>(p0, p1, p2), int3_class_word<3>(p0, p1, p2)};
  uint32_t h[16];  // h[j] = fp16 pair (v[j] + 1028, v[j+16] + 1028), j = 0..15
#pragma unroll
  for (int j = 0; j < 16; ++j) h[j] = lop3<0xEA>(w[j & 3] >> (4 * (j >> 2)), 0x00070007u, 0x64006400u);
  const half2 kBias = as_half2(0x64046404u);  // 1028
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    out[k] = __hsub2(as_half2(__byte_perm(h[2 * k], h[2 * k + 1], 0x5410u)), kBias);      // (v2k, v2k+1)
    out[k + 8] = __hsub2(as_half2(__byte_perm(h[2 * k], h[2 * k + 1], 0x7632u)), kBias);  // (v2k+16, v2k+17)
  }
}

// ------------------------------------------------------------------ 16-byte XOR swizzle for shared memory
// A tile of rows of kRowChunks 16-byte chunks, row-major. Reading it
// column-wise with 16-byte accesses (thread t takes chunk c of row t, as
// ldmatrix / manual fragment loads of a row-major tile do) puts the 8 threads
// of one 128-byte phase on the same 4 banks when rows are 128 bytes apart (an
// 8-way conflict). Storing chunk c of row r at chunk c ^ f(r) spreads any 8
// consecutive rows over the 8 distinct 16-byte bank groups of a 128-byte line;
// rows and columns stay a bijection, and row-wise accesses stay conflict-free.
//   kRowChunks >= 8 (row of >= 128 B): c ^ (r & 7) (only the low 3 bits of c change)
//   kRowChunks 4, 2 (several rows per 128 B): c ^ ((r / (8 / kRowChunks)) & (kRowChunks - 1))
template <int kRowChunks>
__device__ __host__ __forceinline__ int swizzle16(int row, int chunk) {
  static_assert(kRowChunks == 2 || kRowChunks == 4 || kRowChunks % 8 == 0, "row must be 32, 64 or k*128 bytes");
  if (kRowChunks >= 8) return chunk ^ (row & 7);
  return chunk ^ ((row / (8 / kRowChunks)) & (kRowChunks - 1));
}

// Byte offset of 16-byte chunk `chunk` of row `row` in a swizzled tile.
template <int kRowChunks>
__device__ __host__ __forceinline__ int swizzle16_offset(int row, int chunk) {
  return (row * kRowChunks + swizzle16<kRowChunks>(row, chunk)) * 16;
}

// Grid size for a grid-stride loop: enough blocks to cover the work, at most
// `waves` resident waves of the device (works on any SM count).
inline int grid_for(long long work_items, int threads, int per_thread = 1) {
  long long blocks = (work_items + (long long)threads * per_thread - 1) / ((long long)threads * per_thread);
  if (blocks < 1) blocks = 1;
  if (blocks > 65535LL * 64) blocks = 65535LL * 64;
  return static_cast<int>(blocks);
}

// ------------------------------------------------------------------ software warp specialization
// Producer warps move global memory into a 2-stage shared-memory ring with ordinary loads and
// stores (sm_75 has no cp.async or TMA); consumer warps compute on it. Named barrier FULL(s) = 1 + s
// hands stage it over in slot s = it % 2: producers wait on it after storing the stage, consumers
// before reading. Every barrier counts all kThreads of the block (id 0 is __syncthreads), so each
// one orders every access before it against every access after it, in all warps, and no EMPTY
// barrier is needed: a producer passes FULL for stage it only once the consumers have reached it,
// that is, finished stage it - 1, so slot (it + 1) % 2, which held stage it - 1, is free when the
// producer stores stage it + 1 there. Every thread waits at each barrier, none only arrives:
// racecheck reports hazards on accesses that a bar.arrive hand-over orders (tools/racecheck_probe).
namespace ws {

constexpr int kStages = 2;

// barrier.sync, not bar.sync: bar.sync is barrier.sync.aligned, which promises that every warp of
// a barrier generation waits at the same instruction; producers and consumers wait at different
// ones (synccheck reports the aligned form here as a divergent barrier).
__device__ __forceinline__ void bar_sync(int id, int count) {
  asm volatile("barrier.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

// Producer loop over stages 0..n_iters-1: load(regs, it) issues stage it's global loads into
// registers, store(regs, slot) writes them (dequantized, if it must) into ring slot `slot`. Stage
// it + 1 is loaded before the producer waits on FULL for stage it - 1 (whose passing frees slot
// it % 2: the consumers have finished stage it - 2) and stores stage it, so each producer thread
// keeps its next stage's loads in flight while it waits and stores: one warp-specialized thread
// must cover the loads that two threads of a non-specialized block would.
template <int kThreads, class Regs, class Load, class Store>
__device__ __forceinline__ void produce(int n_iters, Load load, Store store) {
  Regs cur, nxt;
  if (n_iters > 0) load(cur, 0);
  for (int it = 0; it < n_iters; ++it) {
    if (it + 1 < n_iters) load(nxt, it + 1);  // in flight while stage it waits for its slot and is stored
    if (it > 0) bar_sync(1 + (it - 1) % kStages, kThreads);  // FULL for stage it - 1
    store(cur, it % kStages);
    if (it + 1 < n_iters) cur = nxt;
  }
  if (n_iters > 0) bar_sync(1 + (n_iters - 1) % kStages, kThreads);  // FULL for the last stage
}

// Consumer loop: compute(slot) on every stage in order, overlapping the producers' store of the
// next stage. Not unrolled: unrolling by the two slots costs the W4A16 kernel 40 registers.
template <int kThreads, class Compute>
__device__ __forceinline__ void consume(int n_iters, Compute compute) {
#pragma unroll 1
  for (int it = 0; it < n_iters; ++it) {
    const int s = it % kStages;
    bar_sync(1 + s, kThreads);
    compute(s);
  }
}

}  // namespace ws

}  // namespace t4
