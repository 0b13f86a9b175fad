// Signed INT4 -> fp16 bulk dequantization with LOP3 (optionally per-group scaled).
// Memory-bound: reads n/2 bytes of packed weights, writes 2n bytes of fp16.
#include "common.cuh"

// t4lib:hot int4_dequant_tiles_kernel int4_dequant_words_kernel

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kTileWords = 128;  // one warp tile: 32 lanes x one 16-byte load = 1024 values, 2 KB out
constexpr int kTileUnroll = 2;   // tiles whose loads are issued before any is decoded (no cp.async on sm_75)
constexpr int kWordUnroll = 4;

__device__ __forceinline__ uint4 decode_word(uint32_t q, const half* scales, long long w, int words_per_group,
                                             bool scaled) {
  half2 h[4];
  t4::dequant_int4x8(q, h);
  if (scaled) {
    const half2 s = __half2half2(__ldg(scales + w / words_per_group));
#pragma unroll
    for (int i = 0; i < 4; ++i) h[i] = __hmul2(h[i], s);
  }
  return make_uint4(t4::as_u32(h[0]), t4::as_u32(h[1]), t4::as_u32(h[2]), t4::as_u32(h[3]));
}

// Full tiles. Lane l loads words 4l..4l+3 of a tile (the warp reads 512
// contiguous bytes) and decodes them into output chunks g = 4l + j (16 bytes
// each). The chunks go through shared memory with the 16-byte XOR swizzle
// (conflict-free on both sides), so each store instruction of the warp then
// writes 512 contiguous bytes: chunk g = 32k + lane.
template <bool kScaled>
__global__ void __launch_bounds__(kThreads) int4_dequant_tiles_kernel(const uint4* __restrict__ packed,
                                                                      const half* __restrict__ scales,
                                                                      uint4* __restrict__ out, long long n_tiles,
                                                                      int words_per_group) {
  __shared__ uint4 stage[kWarps * kTileWords];  // 16 KB: per warp 16 rows x 8 chunks
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  uint4* my = stage + warp * kTileWords;
  const long long stride = (long long)gridDim.x * kWarps;
  for (long long t0 = (long long)blockIdx.x * kWarps + warp; t0 < n_tiles; t0 += stride * kTileUnroll) {
    uint4 q[kTileUnroll];
#pragma unroll
    for (int u = 0; u < kTileUnroll; ++u) {  // issue all loads first
      const long long t = t0 + u * stride;
      if (t < n_tiles) q[u] = __ldg(packed + t * 32 + lane);
    }
#pragma unroll
    for (int u = 0; u < kTileUnroll; ++u) {
      const long long t = t0 + u * stride;
      if (t >= n_tiles) break;  // warp-uniform
      const uint32_t words[4] = {q[u].x, q[u].y, q[u].z, q[u].w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int g = 4 * lane + j;
        my[t4::swizzle16_offset<8>(g >> 3, g & 7) / 16] =
            decode_word(words[j], scales, t * kTileWords + g, words_per_group, kScaled);
      }
      __syncwarp();
      uint4* dst = out + t * kTileWords;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int g = 32 * k + lane;
        dst[g] = my[t4::swizzle16_offset<8>(g >> 3, g & 7) / 16];
      }
      __syncwarp();  // the next tile overwrites the stage
    }
  }
}

// Words [first, n_words): the tail after the full tiles, or everything when
// the input is not 16-byte aligned. One word per thread step, kWordUnroll in flight.
template <bool kScaled>
__global__ void __launch_bounds__(kThreads) int4_dequant_words_kernel(const uint32_t* __restrict__ packed,
                                                                      const half* __restrict__ scales,
                                                                      uint4* __restrict__ out, long long first,
                                                                      long long n_words, int words_per_group) {
  const long long stride = (long long)gridDim.x * kThreads;
  for (long long base = first + (long long)blockIdx.x * kThreads + threadIdx.x; base < n_words;
       base += stride * kWordUnroll) {
    uint32_t q[kWordUnroll];
#pragma unroll
    for (int u = 0; u < kWordUnroll; ++u) {
      const long long w = base + u * stride;
      q[u] = w < n_words ? __ldg(packed + w) : 0u;
    }
#pragma unroll
    for (int u = 0; u < kWordUnroll; ++u) {
      const long long w = base + u * stride;
      if (w >= n_words) break;
      out[w] = decode_word(q[u], scales, w, words_per_group, kScaled);
    }
  }
}

template <bool kScaled>
void launch(const uint32_t* packed, const half* scales, half* out, long long n_words, int words_per_group,
            int max_blocks, cudaStream_t stream) {
  auto cap = [&](int grid) { return max_blocks > 0 && grid > max_blocks ? max_blocks : grid; };
  uint4* o = reinterpret_cast<uint4*>(out);
  const bool aligned = (reinterpret_cast<uintptr_t>(packed) & 15) == 0;
  const long long n_tiles = aligned ? n_words / kTileWords : 0;
  if (n_tiles > 0) {
    const int grid = cap(t4::grid_for(n_tiles, kWarps, kTileUnroll));
    int4_dequant_tiles_kernel<kScaled><<<grid, kThreads, 0, stream>>>(
        reinterpret_cast<const uint4*>(packed), scales, o, n_tiles, words_per_group);
  }
  const long long first = n_tiles * kTileWords;
  if (first < n_words) {
    const int grid = cap(t4::grid_for(n_words - first, kThreads, kWordUnroll));
    int4_dequant_words_kernel<kScaled><<<grid, kThreads, 0, stream>>>(packed, scales, o, first, n_words,
                                                                       words_per_group);
  }
}

}  // namespace

// packed: n_words int32 words (8 values each); scales: n_words*8/group_size fp16
// or nullptr; out: 8*n_words fp16 (16-byte aligned). max_blocks > 0 caps the
// grid (occupancy pacing); the grid-stride loops make the result independent of it.
T4_API int t4_int4_dequant(const uint32_t* packed, const half* scales, half* out, long long n_words,
                           int group_size, int max_blocks, cudaStream_t stream) {
  if (n_words <= 0) return 0;
  if (scales) {
    launch<true>(packed, scales, out, n_words, group_size / 8, max_blocks, stream);
  } else {
    launch<false>(packed, nullptr, out, n_words, 1, max_blocks, stream);
  }
  T4_RETURN_LAUNCH_STATUS();
}
