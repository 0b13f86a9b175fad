// M=1 INT4-g128 GEMV launch variants for labs/gemv/run_lab.py (not part of the library).
#include "common.cuh"
#include "gemv.cuh"

using t4::gemv::ldg16;

// XM: how x is read. 0 = from global as the library does (lane l: 16 B at 64 l + 16 j),
// 1 = ablation: the same number of 16-byte global loads, contiguous across the warp (wrong values),
// 2 = ablation: no x loads (a constant), 3 = x staged once per CTA in shared memory, 16-byte units
// XOR-swizzled so a quarter-warp's reads hit 8 distinct bank groups (same values as 0).
// NOSCALE: ablation, the scale multiply left out (wrong values).
constexpr int kSmemX = 17408;  // halves of x that XM = 3 can stage (34 KB)

__device__ __forceinline__ int swz(int u) { return u ^ ((u >> 3) & 3); }

template <int R, int U, bool PIPE, bool RO, int MB, int XM = 0, bool NOSCALE = false>
__global__ void __launch_bounds__(128, MB) lab_kernel(const uint8_t* __restrict__ qw, const half* __restrict__ sc,
                                                     const half* __restrict__ x, half* __restrict__ y, int N, int K) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  __shared__ uint4 xs[XM == 3 ? kSmemX / 8 : 1];
  if (XM == 3) {
    for (int u = threadIdx.x; u < K / 8; u += 128) xs[swz(u)] = ldg16(x + 8 * u);
    __syncthreads();
  }
  const int n_chunks = K / 32, n_groups = (N + R - 1) / R, n_tasks = (n_groups + 3) / 4;
  const long long rb = K / 2;
  for (int task = blockIdx.x; task < n_tasks; task += gridDim.x) {
    const int group = task * 4 + warp;
    const int row0 = group * R;
    int rows[R];
#pragma unroll
    for (int r = 0; r < R; ++r) rows[r] = min(row0 + r, N - 1);
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = 0.f;
    uint32_t xr = 0;
    if (group < n_groups) {
      auto body = [&](const uint4 (&q)[R], const half (&s)[R], int c) {
        if (RO) {
#pragma unroll
          for (int r = 0; r < R; ++r) xr ^= q[r].x ^ q[r].y ^ q[r].z ^ q[r].w ^ __half_as_ushort(s[r]);
          return;
        }
        const uint32_t* qq[R];
#pragma unroll
        for (int r = 0; r < R; ++r) qq[r] = reinterpret_cast<const uint32_t*>(&q[r]);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          uint4 xv;
          if (XM == 0) xv = ldg16(x + (long long)c * 32 + 8 * j);
          else if (XM == 1) xv = ldg16(x + (long long)(c - lane) * 32 + 8 * (lane + 32 * j));
          else if (XM == 2) xv = make_uint4(0x3C003C00u, 0x3C003C00u, 0x3C003C00u, 0x3C003C00u);
          else xv = xs[swz(4 * c + j)];
#pragma unroll
          for (int r = 0; r < R; ++r) {
            half2 wv[4];
            t4::dequant_int4x8(qq[r][j], wv);
            const half2 s2 = __half2half2(s[r]);
#pragma unroll
            if (!NOSCALE)
              for (int i = 0; i < 4; ++i) wv[i] = __hmul2(wv[i], s2);
            acc[r] = t4::gemv::dot8(wv, xv, acc[r]);
          }
        }
      };
      auto load_into = [&](uint4 (&q)[U][R], half (&s)[U][R], int c0) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int c = c0 + 32 * u;
          if (c < n_chunks) {
#pragma unroll
            for (int r = 0; r < R; ++r) {
              q[u][r] = ldg16(qw + rows[r] * rb + c * 16);
              s[u][r] = __ldg(sc + rows[r] * (long long)(K >> 7) + (c >> 2));
            }
          }
        }
      };
      if (!PIPE) {
        for (int c0 = lane; c0 < n_chunks; c0 += 32 * U) {
          uint4 q[U][R];
          half s[U][R];
          load_into(q, s, c0);
#pragma unroll
          for (int u = 0; u < U; ++u)
            if (c0 + 32 * u < n_chunks) body(q[u], s[u], c0 + 32 * u);
        }
      } else {
        // register double buffer: the next U chunks are in flight while these U are computed
        uint4 q[2][U][R];
        half s[2][U][R];
        auto load = [&](int buf, int c0) { load_into(q[buf], s[buf], c0); };
        auto comp = [&](int buf, int c0) {
#pragma unroll
          for (int u = 0; u < U; ++u)
            if (c0 + 32 * u < n_chunks) body(q[buf][u], s[buf][u], c0 + 32 * u);
        };
        int c0 = lane;
        load(0, c0);
        for (; c0 < n_chunks; c0 += 64 * U) {
          if (c0 + 32 * U < n_chunks) load(1, c0 + 32 * U);
          comp(0, c0);
          if (c0 + 32 * U >= n_chunks) break;
          if (c0 + 64 * U < n_chunks) load(0, c0 + 64 * U);
          comp(1, c0 + 32 * U);
        }
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (RO) acc[r] = __uint_as_float(xr & 0x3f800000u);
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], off);
      if (lane == 0 && group < n_groups && row0 + r < N) y[row0 + r] = __float2half_rn(acc[r]);
    }
  }
}

template <int R, int U, bool PIPE, bool RO, int MB = 8, int XM = 0, bool NOSCALE = false>
static int go(const uint8_t* qw, const half* sc, const half* x, half* y, int N, int K, int persist, cudaStream_t st) {
  int dev = 0, sms = 1, per_sm = 1;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, lab_kernel<R, U, PIPE, RO, MB, XM, NOSCALE>, 128, 0);
  const int n_tasks = ((N + R - 1) / R + 3) / 4;
  int grid = n_tasks;
  if (persist && grid > sms * per_sm) grid = sms * per_sm;
  lab_kernel<R, U, PIPE, RO, MB, XM, NOSCALE><<<grid, 128, 0, st>>>(qw, sc, x, y, N, K);
  return (int)cudaGetLastError();
}

T4_API int lab_gemv(int variant, const void* qw, const void* sc, const void* x, void* y, int N, int K, int persist, cudaStream_t st) {
  auto q = (const uint8_t*)qw;
  auto s = (const half*)sc;
  auto xx = (const half*)x;
  auto yy = (half*)y;
  switch (variant) {
    case 0: return go<2, 4, false, false>(q, s, xx, yy, N, K, persist, st);
    case 1: return go<4, 2, false, false>(q, s, xx, yy, N, K, persist, st);
    case 2: return go<1, 8, false, false>(q, s, xx, yy, N, K, persist, st);
    case 3: return go<2, 2, true, false>(q, s, xx, yy, N, K, persist, st);
    case 4: return go<4, 1, true, false>(q, s, xx, yy, N, K, persist, st);
    case 5: return go<1, 4, true, false>(q, s, xx, yy, N, K, persist, st);
    case 6: return go<2, 4, false, true>(q, s, xx, yy, N, K, persist, st);
    case 7: return go<2, 2, true, true>(q, s, xx, yy, N, K, persist, st);
    case 8: return go<2, 8, false, false, 4>(q, s, xx, yy, N, K, persist, st);
    case 9: return go<2, 2, true, false, 4>(q, s, xx, yy, N, K, persist, st);
    case 10: return go<4, 2, true, false, 4>(q, s, xx, yy, N, K, persist, st);
    case 11: return go<2, 4, false, false, 4>(q, s, xx, yy, N, K, persist, st);
    case 12: return go<4, 4, false, false, 4>(q, s, xx, yy, N, K, persist, st);
    case 13: return go<2, 2, true, false, 4, 1>(q, s, xx, yy, N, K, persist, st);
    case 14: return go<2, 2, true, false, 4, 2>(q, s, xx, yy, N, K, persist, st);
    case 15: return K <= kSmemX ? go<2, 2, true, false, 4, 3>(q, s, xx, yy, N, K, persist, st) : 1;
    case 16: return go<2, 2, true, false, 4, 0, true>(q, s, xx, yy, N, K, persist, st);
    case 17: return K <= kSmemX ? go<4, 2, true, false, 4, 3>(q, s, xx, yy, N, K, persist, st) : 1;
    case 18: return K <= kSmemX ? go<2, 4, false, false, 4, 3>(q, s, xx, yy, N, K, persist, st) : 1;
    default: return 1;
  }
}
