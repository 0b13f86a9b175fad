// Shared-memory layouts for a row-major tile read column-wise with 16-byte
// accesses (lane t takes chunk c of row t, the fragment-load pattern of the
// GEMM kernels): naive (128-byte rows, "stride 32" words), padded (144-byte
// rows) and the 16-byte XOR swizzle of common.cuh. A clock64()
// microbenchmark gives cycles per access; the offsets kernel and the
// round-trip kernel are the known-answer tests of t4::swizzle16.
#include "common.cuh"

// t4lib:hot swizzle_bench_kernel

namespace {

constexpr int kRows = 32, kChunks = 8;  // 32 rows of 128 bytes (8 chunks of 16 B)
enum Layout { kNaive = 0, kPadded = 1, kSwizzled = 2 };

template <int kLayout>
__device__ __forceinline__ int chunk_index(int row, int chunk) {  // in units of 16 bytes
  if (kLayout == kNaive) return row * kChunks + chunk;
  if (kLayout == kPadded) return row * (kChunks + 1) + chunk;  // +16 B per row
  return row * kChunks + t4::swizzle16<kChunks>(row, chunk);
}

__device__ __forceinline__ uint4 ld_shared_v4(uint32_t addr) {  // volatile: never hoisted or merged
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr));
  return v;
}

// kDependent (latency mode, launch one warp): each load's address depends on
// the previous load's data (through `mask`, 0 at run time), so cycles per
// access = latency + conflict replays. Otherwise (throughput mode, several
// warps): 8 independent loads per iteration; cycles per access = elapsed
// cycles / loads issued by the whole block.
template <int kLayout, bool kDependent>
__global__ void swizzle_bench_kernel(long long* cycles, uint32_t* sink, int iters, uint32_t mask) {
  __shared__ uint4 tile[kRows * (kChunks + 1)];
  for (int i = threadIdx.x; i < kRows * (kChunks + 1); i += blockDim.x) tile[i] = make_uint4(i, 0u, 0u, 0u);
  __syncthreads();
  const int row = threadIdx.x & 31;
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(tile));
  uint32_t acc = 0;
  const long long t0 = clock64();
  if (kDependent) {
    for (int it = 0; it < iters; ++it) {
      const int c = (it + (acc & mask)) & 7;
      acc += ld_shared_v4(base + 16u * chunk_index<kLayout>(row, c)).x;
    }
  } else {
    for (int it = 0; it < iters; ++it) {
#pragma unroll
      for (int u = 0; u < 8; ++u) acc += ld_shared_v4(base + 16u * chunk_index<kLayout>(row, u)).x;
    }
  }
  __syncthreads();
  const long long t1 = clock64();
  if (threadIdx.x == 0) cycles[0] = t1 - t0;
  sink[threadIdx.x] = acc;  // keeps the loads alive
}

// out[r * row_chunks + c] = swizzle16<row_chunks>(r, c) for every (r, c).
template <int kRowChunks>
__global__ void swizzle_offsets_kernel(int* out, int rows) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < rows * kRowChunks) out[i] = t4::swizzle16_offset<kRowChunks>(i / kRowChunks, i % kRowChunks) / 16;
}

// One block, 256 threads, a 32 x 8 tile of 16-byte chunks: stored row-wise
// into swizzled shared memory, read back column-wise (thread t: chunk c = t/32
// of row t%32), written transposed: out[c][r] = in[r][c].
__global__ void swizzle_transpose_kernel(const uint4* __restrict__ in, uint4* __restrict__ out) {
  __shared__ uint4 tile[kRows * kChunks];
  const int t = threadIdx.x;
  {
    const int r = t / kChunks, c = t % kChunks;  // row-wise store
    tile[t4::swizzle16_offset<kChunks>(r, c) / 16] = in[t];
  }
  __syncthreads();
  const int r = t % kRows, c = t / kRows;  // column-wise read: a warp = one column, 32 rows
  out[c * kRows + r] = tile[t4::swizzle16_offset<kChunks>(r, c) / 16];
}

template <int kLayout>
void bench(long long* cycles, uint32_t* sink, int iters, int warps, cudaStream_t s) {
  if (warps <= 1)
    swizzle_bench_kernel<kLayout, true><<<1, 32, 0, s>>>(cycles, sink, iters, 0u);
  else
    swizzle_bench_kernel<kLayout, false><<<1, 32 * warps, 0, s>>>(cycles, sink, iters, 0u);
}

}  // namespace

// layout: 0 naive, 1 padded, 2 swizzled. warps <= 1: dependent-chain latency
// mode (one warp); warps in 2..32: independent-load throughput mode.
// cycles: 1 int64 (clock64 ticks of the timed loop); sink: 32 * max(warps, 1) uint32.
T4_API int t4_swizzle_bench(int layout, long long* cycles, uint32_t* sink, int iters, int warps,
                            cudaStream_t stream) {
  if (warps > 32 || iters <= 0) return static_cast<int>(cudaErrorInvalidValue);
  if (layout == kNaive) bench<kNaive>(cycles, sink, iters, warps, stream);
  else if (layout == kPadded) bench<kPadded>(cycles, sink, iters, warps, stream);
  else if (layout == kSwizzled) bench<kSwizzled>(cycles, sink, iters, warps, stream);
  else return static_cast<int>(cudaErrorInvalidValue);
  T4_RETURN_LAUNCH_STATUS();
}

// row_chunks in {2, 4, 8, 16}; out: rows * row_chunks int32 chunk indices.
T4_API int t4_swizzle_offsets(int* out, int rows, int row_chunks, cudaStream_t stream) {
  const int n = rows * row_chunks, grid = (n + 255) / 256;
  if (rows <= 0) return 0;
  switch (row_chunks) {
    case 2: swizzle_offsets_kernel<2><<<grid, 256, 0, stream>>>(out, rows); break;
    case 4: swizzle_offsets_kernel<4><<<grid, 256, 0, stream>>>(out, rows); break;
    case 8: swizzle_offsets_kernel<8><<<grid, 256, 0, stream>>>(out, rows); break;
    case 16: swizzle_offsets_kernel<16><<<grid, 256, 0, stream>>>(out, rows); break;
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
  T4_RETURN_LAUNCH_STATUS();
}

// in, out: 256 chunks of 16 bytes (a 32 x 8 tile), 16-byte aligned.
T4_API int t4_swizzle_transpose(const void* in, void* out, cudaStream_t stream) {
  swizzle_transpose_kernel<<<1, 256, 0, stream>>>(static_cast<const uint4*>(in), static_cast<uint4*>(out));
  T4_RETURN_LAUNCH_STATUS();
}
