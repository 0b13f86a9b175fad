// Signed INT3 (bitplanes) -> fp16 bulk dequantization with LOP3, optionally
// per-group scaled. Memory-bound: reads 12 bytes per 32 values, writes 64.
// The bit work is t4::dequant_int3x32 in common.cuh (no branches, no table).
#include "common.cuh"

// t4lib:hot int3_dequant_kernel

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kUnroll = 2;  // warp tiles whose planes are loaded before any is decoded

// One warp decodes a tile of 32 blocks (lane = block), 2 KB of fp16 output.
// kStaged: each lane's 64 bytes go through shared memory, stored with the
// 16-byte XOR swizzle (conflict-free both ways), then every store instruction
// of the warp writes 512 contiguous bytes. Without it each lane stores its 4
// chunks itself (a 64-byte stride across the warp).
template <bool kScaled, bool kStaged>
__global__ void __launch_bounds__(kThreads) int3_dequant_kernel(const uint32_t* __restrict__ planes,
                                                                const half* __restrict__ scales,
                                                                uint4* __restrict__ out, long long n_blocks,
                                                                int blocks_per_group) {
  __shared__ uint4 stage[kStaged ? kWarps * 128 : 1];  // per warp: 16 rows x 8 chunks of 16 B
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  uint4* my = stage + (kStaged ? warp * 128 : 0);
  const long long n_tiles = (n_blocks + 31) / 32;
  const long long tile_stride = (long long)gridDim.x * kWarps;
  for (long long t0 = (long long)blockIdx.x * kWarps + warp; t0 < n_tiles; t0 += tile_stride * kUnroll) {
    uint32_t p[kUnroll][3];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {  // issue all loads first
      const long long b = (t0 + u * tile_stride) * 32 + lane;
#pragma unroll
      for (int k = 0; k < 3; ++k) p[u][k] = b < n_blocks ? __ldg(planes + 3 * b + k) : 0u;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const long long tile = t0 + u * tile_stride;
      if (tile >= n_tiles) break;  // warp-uniform
      const long long b = tile * 32 + lane;
      half2 h[16];
      t4::dequant_int3x32(p[u][0], p[u][1], p[u][2], h);
      if (kScaled) {
        const half2 s = __half2half2(__ldg(scales + (b < n_blocks ? b : 0) / blocks_per_group));
#pragma unroll
        for (int i = 0; i < 16; ++i) h[i] = __hmul2(h[i], s);
      }
      uint4 c[4];
#pragma unroll
      for (int k = 0; k < 4; ++k)
        c[k] = make_uint4(t4::as_u32(h[4 * k]), t4::as_u32(h[4 * k + 1]), t4::as_u32(h[4 * k + 2]),
                          t4::as_u32(h[4 * k + 3]));
      if (kStaged && tile * 32 + 32 <= n_blocks) {  // full tile (warp-uniform)
        // chunk g = 4*lane + k of the tile lives at row g/8, column g%8, swizzled
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const int g = 4 * lane + k;
          my[t4::swizzle16_offset<8>(g >> 3, g & 7) / 16] = c[k];
        }
        __syncwarp();
        uint4* dst = out + tile * 128;
#pragma unroll
        for (int k = 0; k < 4; ++k) {  // chunk g = 32k + lane: row 4k + lane/8, column lane%8
          const int g = 32 * k + lane;
          dst[g] = my[t4::swizzle16_offset<8>(g >> 3, g & 7) / 16];
        }
        __syncwarp();  // the next tile overwrites the stage
      } else if (b < n_blocks) {
#pragma unroll
        for (int k = 0; k < 4; ++k) out[b * 4 + k] = c[k];
      }
    }
  }
}

template <bool kStaged>
void launch(const uint32_t* planes, const half* scales, half* out, long long n_blocks, int group_size, int grid,
            cudaStream_t stream) {
  if (scales)
    int3_dequant_kernel<true, kStaged><<<grid, kThreads, 0, stream>>>(planes, scales, reinterpret_cast<uint4*>(out),
                                                                      n_blocks, group_size / 32);
  else
    int3_dequant_kernel<false, kStaged><<<grid, kThreads, 0, stream>>>(planes, nullptr,
                                                                       reinterpret_cast<uint4*>(out), n_blocks, 1);
}

}  // namespace

// planes: 3*n_blocks int32 (block b = words 3b, 3b+1, 3b+2, planes 0..2);
// scales: 32*n_blocks/group_size fp16 or nullptr (group_size a multiple of 32);
// out: 32*n_blocks fp16, 16-byte aligned. max_blocks > 0 caps the grid; the
// grid-stride loop makes the result independent of it. staged != 0 selects the
// shared-memory staged stores.
T4_API int t4_int3_dequant(const uint32_t* planes, const half* scales, half* out, long long n_blocks,
                           int group_size, int max_blocks, int staged, cudaStream_t stream) {
  if (n_blocks <= 0) return 0;
  int grid = t4::grid_for((n_blocks + 31) / 32, kWarps, kUnroll);
  if (max_blocks > 0 && grid > max_blocks) grid = max_blocks;
  if (staged)
    launch<true>(planes, scales, out, n_blocks, group_size, grid, stream);
  else
    launch<false>(planes, scales, out, n_blocks, group_size, grid, stream);
  T4_RETURN_LAUNCH_STATUS();
}
