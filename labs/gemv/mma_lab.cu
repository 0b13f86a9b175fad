// INT4-g{32,64,128} GEMV on the tensor cores (mma.sync m16n8k8, available on
// sm_75) for labs/gemv/mma_lab.py; not part of the library.
//
// The library's GEMV does the dot products with half2 FMAs, and every row
// group of a warp loads and multiplies the activations again. Here the weights
// are the A operand (16 output rows per mma) and the activations the B operand
// (up to 8 columns = M). One mma consumes 8 values of K for 16 rows, and the
// activation fragment is shared by those 16 rows.
//
// The permutation trick: an mma sums over its 8 k-slots, so which actual k a
// slot stands for is free, as long as A and B agree. Lane (g = lane / 4,
// t = lane % 4) owns slots 2t, 2t+1. It loads one 16-byte chunk (32 values) of
// row g and of row g + 8, both at chunk index 4 * step + t, and lanes g < M
// load the same 32 activations of row g of x. The mma (j, i) then takes value
// pair 8j + 2i of every lane's chunk. The dequantization (LOP3, then the
// scale) is the library's, so each weight is the same fp16 value; only the
// summation differs (tensor-core fp32 instead of fp16 pairs summed in fp32).
#include "common.cuh"
#include "gemv.cuh"

namespace {

__device__ __forceinline__ void mma16x8x8(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t b0) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a0), "r"(a1), "r"(b0));
}

struct Stage {
  uint4 q[2];      // 32 packed values of row g and of row g + 8
  half s[2];       // their scales
  uint4 x[4];      // 32 activations (lanes g < M), else zero
};

template <int M>
__device__ __forceinline__ void load_stage(Stage& st, const uint8_t* __restrict__ qw, const half* __restrict__ sc,
                                           const half* __restrict__ x, long long rb, int r0, int r1, int c,
                                           int n_chunks, int K, int gshift, int g) {
  if (c < n_chunks) {
    st.q[0] = t4::gemv::ldg16(qw + r0 * rb + (long long)c * 16);
    st.q[1] = t4::gemv::ldg16(qw + r1 * rb + (long long)c * 16);
    const long long gpr = K >> gshift;  // groups per row
    st.s[0] = __ldg(sc + r0 * gpr + ((c * 32) >> gshift));
    st.s[1] = __ldg(sc + r1 * gpr + ((c * 32) >> gshift));
    if (g < M) {
#pragma unroll
      for (int j = 0; j < 4; ++j) st.x[j] = t4::gemv::ldg16(x + (long long)g * K + (long long)c * 32 + 8 * j);
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) st.x[j] = make_uint4(0, 0, 0, 0);
    }
  } else {  // past K: contributes zero
    st.q[0] = st.q[1] = make_uint4(0, 0, 0, 0);  // any finite weight: the scale and x are zero
    st.s[0] = st.s[1] = __float2half(0.f);
#pragma unroll
    for (int j = 0; j < 4; ++j) st.x[j] = make_uint4(0, 0, 0, 0);
  }
}

__device__ __forceinline__ void mma_stage(const Stage& st, float (&c)[4]) {
  const uint32_t* q0 = reinterpret_cast<const uint32_t*>(&st.q[0]);
  const uint32_t* q1 = reinterpret_cast<const uint32_t*>(&st.q[1]);
  const half2 s0 = __half2half2(st.s[0]), s1 = __half2half2(st.s[1]);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    half2 w0[4], w1[4];
    t4::dequant_int4x8(q0[j], w0);
    t4::dequant_int4x8(q1[j], w1);
    const uint32_t* xb = reinterpret_cast<const uint32_t*>(&st.x[j]);
#pragma unroll
    for (int i = 0; i < 4; ++i)
      mma16x8x8(c, t4::as_u32(__hmul2(w0[i], s0)), t4::as_u32(__hmul2(w1[i], s1)), xb[i]);
  }
}

// W warps per CTA, S of them split K for the same 16-row tile, U stages of loads in flight.
template <int M, int U, int W, int S, int MB>
__global__ void __launch_bounds__(32 * W, MB) mma_gemv(const uint8_t* __restrict__ qw, const half* __restrict__ sc,
                                                       const half* __restrict__ x, half* __restrict__ y, int N, int K,
                                                       int gshift) {
  static_assert(W % S == 0, "the split must divide the warps");
  constexpr int kTilesPerCta = W / S;
  __shared__ float red[kTilesPerCta][S][32][4];  // per tile of the CTA: its K slices
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int ks = warp % S;
  const int n_chunks = K / 32, n_steps = (n_chunks + 3) / 4;
  const int n_tiles = (N + 15) / 16, n_tasks = (n_tiles + kTilesPerCta - 1) / kTilesPerCta;
  const long long rb = K / 2;
  for (int task = blockIdx.x; task < n_tasks; task += gridDim.x) {
    const int local = warp / S, tile = task * kTilesPerCta + local;
    const bool live = tile < n_tiles;
    const int r0 = min(tile * 16 + g, N - 1), r1 = min(tile * 16 + g + 8, N - 1);
    float c[4] = {0.f, 0.f, 0.f, 0.f};
    if (live) {
      for (int s0 = ks; s0 < n_steps; s0 += S * U) {
        Stage st[U];
#pragma unroll
        for (int u = 0; u < U; ++u)
          load_stage<M>(st[u], qw, sc, x, rb, r0, r1, 4 * (s0 + u * S) + t, n_chunks, K, gshift, g);
#pragma unroll
        for (int u = 0; u < U; ++u)
          if (s0 + u * S < n_steps) mma_stage(st[u], c);
      }
    }
    if (S > 1) {  // K slices summed in slice order through shared memory
#pragma unroll
      for (int e = 0; e < 4; ++e) red[local][ks][lane][e] = c[e];
      __syncthreads();
      if (ks == 0) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float s = 0.f;
#pragma unroll
          for (int k = 0; k < S; ++k) s += red[local][k][lane][e];
          c[e] = s;
        }
      }
      __syncthreads();
    }
    if (live && ks == 0) {
      // c[0], c[1]: row g, columns 2t, 2t + 1; c[2], c[3]: row g + 8
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int m = 2 * t + (e & 1), n = tile * 16 + g + (e >> 1) * 8;
        if (m < M && n < N) y[(long long)m * N + n] = __float2half_rn(c[e]);
      }
    }
  }
}

template <int M, int U, int W, int S, int MB>
int go(const uint8_t* q, const half* s, const half* x, half* y, int N, int K, int gshift, cudaStream_t st) {
  int dev = 0, sms = 1, per_sm = 1;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, mma_gemv<M, U, W, S, MB>, 32 * W, 0);
  const int n_tasks = ((N + 15) / 16 + W / S - 1) / (W / S);
  const int grid = n_tasks < sms * per_sm ? n_tasks : sms * per_sm;
  mma_gemv<M, U, W, S, MB><<<grid, 32 * W, 0, st>>>(q, s, x, y, N, K, gshift);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

// variant: see mma_lab.py. M = 1 only.
T4_API int lab_mma_gemv(int variant, const void* qw, const void* sc, const void* x, void* y, int N, int K,
                        int group_size, cudaStream_t st) {
  if (K % 32 || group_size < 32 || (group_size & (group_size - 1))) return 1;
  const int gshift = __builtin_ctz(group_size);
  auto q = static_cast<const uint8_t*>(qw);
  auto s = static_cast<const half*>(sc);
  auto xx = static_cast<const half*>(x);
  auto yy = static_cast<half*>(y);
  switch (variant) {
    case 0: return go<1, 2, 4, 4, 4>(q, s, xx, yy, N, K, gshift, st);
    case 1: return go<1, 4, 4, 4, 2>(q, s, xx, yy, N, K, gshift, st);
    case 2: return go<1, 4, 8, 8, 1>(q, s, xx, yy, N, K, gshift, st);
    case 3: return go<1, 2, 8, 8, 2>(q, s, xx, yy, N, K, gshift, st);
    case 4: return go<1, 4, 4, 1, 2>(q, s, xx, yy, N, K, gshift, st);
    case 5: return go<1, 2, 4, 2, 4>(q, s, xx, yy, N, K, gshift, st);
    default: return 1;
  }
}
