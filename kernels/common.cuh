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

// Grid size for a grid-stride loop: enough blocks to cover the work, at most
// `waves` resident waves of the device (works on any SM count).
inline int grid_for(long long work_items, int threads, int per_thread = 1) {
  long long blocks = (work_items + (long long)threads * per_thread - 1) / ((long long)threads * per_thread);
  if (blocks < 1) blocks = 1;
  if (blocks > 65535LL * 64) blocks = 65535LL * 64;
  return static_cast<int>(blocks);
}

}  // namespace t4
