// FP8 E4M3 emulation on fp16 for sm_75 (no FP8 hardware): bulk decode of E4M3
// bytes to fp16 (integer bit placement + one exact power-of-two rescale, see
// t4::fp8_e4m3x4_to_half2), optionally per-group scaled, and the encode
// direction fp16 -> E4M3 (round-to-nearest-even, saturating to +-448).
// Memory-bound: decode reads 1 byte and writes 2 per value.
#include "common.cuh"

// t4lib:hot fp8_decode_kernel fp8_encode_kernel

namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;  // independent 8-byte groups in flight per thread

// Thread: 8 bytes in (one uint2), 8 fp16 out (one uint4); warps stay coalesced.
template <bool kScaled>
__global__ void __launch_bounds__(kThreads) fp8_decode_kernel(const uint2* __restrict__ in,
                                                              const half* __restrict__ scales,
                                                              uint4* __restrict__ out, long long n_groups8,
                                                              int groups8_per_scale) {
  const long long stride = (long long)gridDim.x * kThreads;
  for (long long base = (long long)blockIdx.x * kThreads + threadIdx.x; base < n_groups8; base += stride * kUnroll) {
    uint2 q[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const long long w = base + u * stride;
      q[u] = w < n_groups8 ? __ldg(in + w) : make_uint2(0u, 0u);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const long long w = base + u * stride;
      if (w >= n_groups8) break;
      half2 lo[2], hi[2];
      t4::fp8_e4m3x4_to_half2(q[u].x, lo);
      t4::fp8_e4m3x4_to_half2(q[u].y, hi);
      if (kScaled) {
        const half2 s = __half2half2(__ldg(scales + w / groups8_per_scale));
        lo[0] = __hmul2(lo[0], s), lo[1] = __hmul2(lo[1], s), hi[0] = __hmul2(hi[0], s), hi[1] = __hmul2(hi[1], s);
      }
      out[w] = make_uint4(t4::as_u32(lo[0]), t4::as_u32(lo[1]), t4::as_u32(hi[0]), t4::as_u32(hi[1]));
    }
  }
}

// Thread: 8 fp16 in (one uint4), 8 bytes out (one uint2).
__global__ void __launch_bounds__(kThreads) fp8_encode_kernel(const uint4* __restrict__ in, uint2* __restrict__ out,
                                                              long long n_groups8) {
  const long long stride = (long long)gridDim.x * kThreads;
  for (long long w = (long long)blockIdx.x * kThreads + threadIdx.x; w < n_groups8; w += stride) {
    const uint4 v = __ldg(in + w);
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
    uint32_t b[8];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const half2 h = t4::as_half2(words[i]);
      b[2 * i] = t4::half_to_fp8_e4m3(__low2half(h));
      b[2 * i + 1] = t4::half_to_fp8_e4m3(__high2half(h));
    }
    // pack four bytes per word: prmt picks byte 0 of each (b0 | b1<<8 | b2<<16 | b3<<24)
    const uint32_t w0 = __byte_perm(__byte_perm(b[0], b[1], 0x0040u), __byte_perm(b[2], b[3], 0x0040u), 0x5410u);
    const uint32_t w1 = __byte_perm(__byte_perm(b[4], b[5], 0x0040u), __byte_perm(b[6], b[7], 0x0040u), 0x5410u);
    out[w] = make_uint2(w0, w1);
  }
}

}  // namespace

// in: n bytes (n % 8 == 0, 8-byte aligned); scales: n/group_size fp16 or
// nullptr (group_size % 8 == 0); out: n fp16, 16-byte aligned. max_blocks > 0
// caps the grid; the result does not depend on it.
T4_API int t4_fp8_e4m3_decode(const uint8_t* in, const half* scales, half* out, long long n, int group_size,
                              int max_blocks, cudaStream_t stream) {
  if (n <= 0) return 0;
  const long long g8 = n / 8;
  int grid = t4::grid_for(g8, kThreads, kUnroll);
  if (max_blocks > 0 && grid > max_blocks) grid = max_blocks;
  if (scales)
    fp8_decode_kernel<true><<<grid, kThreads, 0, stream>>>(reinterpret_cast<const uint2*>(in), scales,
                                                           reinterpret_cast<uint4*>(out), g8, group_size / 8);
  else
    fp8_decode_kernel<false><<<grid, kThreads, 0, stream>>>(reinterpret_cast<const uint2*>(in), nullptr,
                                                            reinterpret_cast<uint4*>(out), g8, 1);
  T4_RETURN_LAUNCH_STATUS();
}

// in: n fp16 (n % 8 == 0, 16-byte aligned); out: n bytes, 8-byte aligned.
T4_API int t4_fp8_e4m3_encode(const half* in, uint8_t* out, long long n, cudaStream_t stream) {
  if (n <= 0) return 0;
  const long long g8 = n / 8;
  const int grid = t4::grid_for(g8, kThreads, 1);
  fp8_encode_kernel<<<grid, kThreads, 0, stream>>>(reinterpret_cast<const uint4*>(in), reinterpret_cast<uint2*>(out),
                                                   g8);
  T4_RETURN_LAUNCH_STATUS();
}
