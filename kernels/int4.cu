// Signed INT4 -> fp16 bulk dequantization with LOP3 (optionally per-group scaled).
// Memory-bound: reads n/2 bytes of packed weights, writes 2n bytes of fp16.
#include "common.cuh"

// t4lib:hot int4_dequant_kernel

namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;  // independent words in flight per thread (latency hiding, no cp.async)

template <bool kScaled>
__global__ void __launch_bounds__(kThreads) int4_dequant_kernel(const uint32_t* __restrict__ packed,
                                                                const half* __restrict__ scales,
                                                                uint4* __restrict__ out, long long n_words,
                                                                int words_per_group) {
  const long long stride = (long long)gridDim.x * kThreads;
  for (long long base = (long long)blockIdx.x * kThreads + threadIdx.x; base < n_words; base += stride * kUnroll) {
    uint32_t q[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {  // issue all loads first
      const long long w = base + u * stride;
      q[u] = w < n_words ? __ldg(packed + w) : 0u;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const long long w = base + u * stride;
      if (w >= n_words) break;
      half2 h[4];
      t4::dequant_int4x8(q[u], h);
      if (kScaled) {
        const half2 s = __half2half2(__ldg(scales + w / words_per_group));
#pragma unroll
        for (int i = 0; i < 4; ++i) h[i] = __hmul2(h[i], s);
      }
      out[w] = make_uint4(t4::as_u32(h[0]), t4::as_u32(h[1]), t4::as_u32(h[2]), t4::as_u32(h[3]));
    }
  }
}

}  // namespace

// packed: n_words int32 words (8 values each); scales: n_words*8/group_size fp16
// or nullptr; out: 8*n_words fp16 (16-byte aligned). max_blocks > 0 caps the
// grid (occupancy pacing); the grid-stride loop makes the result independent of it.
T4_API int t4_int4_dequant(const uint32_t* packed, const half* scales, half* out, long long n_words,
                           int group_size, int max_blocks, cudaStream_t stream) {
  if (n_words <= 0) return 0;
  int grid = t4::grid_for(n_words, kThreads, kUnroll);
  if (max_blocks > 0 && grid > max_blocks) grid = max_blocks;
  if (scales) {
    int4_dequant_kernel<true><<<grid, kThreads, 0, stream>>>(packed, scales, reinterpret_cast<uint4*>(out),
                                                             n_words, group_size / 8);
  } else {
    int4_dequant_kernel<false><<<grid, kThreads, 0, stream>>>(packed, nullptr, reinterpret_cast<uint4*>(out),
                                                              n_words, 1);
  }
  T4_RETURN_LAUNCH_STATUS();
}
