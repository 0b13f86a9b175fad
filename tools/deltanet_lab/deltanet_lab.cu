// Lab: launch shapes and cross-CTA hand-offs of the Gated DeltaNet decode step
// (not part of the library; the library kernel is kernels/deltanet.cu).
//
// One kernel template, knobs:
//   VC    value columns per CTA (split = 128 / VC CTAs per head)
//   RPT   state rows per thread (threads = VC/4 column groups x 128/RPT row groups)
//   MODE  0: split hand-off as the library does it (__threadfence, atomicAdd, last CTA finishes the head)
//         1: hand-off by one acq_rel atomic after a CTA barrier (no fence per thread)
//         2: ablation, no hand-off: each CTA writes o * ssm_norm * SiLU(z) without the RMS factor (wrong output)
//         3: ablation, memory only: S <- decay * S, nothing else (the launch shape's floor)
// Row-group partial sums are reduced first across the lanes of a warp that share
// a column group (shuffles), then across warps through shared memory.
#include "common.cuh"

namespace {

constexpr int kDk = 128, kDv = 128;

__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

__device__ __forceinline__ long long conv_channel(int idx, int kh, int h, int col0, int HK) {
  if (idx < kDk) return (long long)kh * kDk + idx;
  if (idx < 2 * kDk) return (long long)HK * kDk + kh * kDk + (idx - kDk);
  return 2LL * HK * kDk + (long long)h * kDv + col0 + (idx - 2 * kDk);
}

// Atomic add with acquire-release semantics at GPU scope (sm_70+): the CTA's
// earlier writes (ordered before it by bar.sync) are visible before the count.
__device__ __forceinline__ int atom_add_acq_rel(int* p, int v) {
  int old;
  asm volatile("atom.add.acq_rel.gpu.global.s32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}

struct Params {
  const half *qkv, *z, *alpha, *beta, *conv_in;
  half* conv_out;
  float* state;
  const float *conv_w, *ssm_a, *dt_bias, *ssm_norm;
  half* out;
  float *ws_o, *ws_ss;
  int* ws_cnt;
  int B, H, HK, head_order;
  float eps;
};

template <int NT>
__device__ __forceinline__ float3 block_sum3(float a, float b, float c, float (*red)[3]) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    a += __shfl_xor_sync(0xffffffffu, a, o);
    b += __shfl_xor_sync(0xffffffffu, b, o);
    c += __shfl_xor_sync(0xffffffffu, c, o);
  }
  constexpr int kWarps = NT / 32;
  if (kWarps == 1) return make_float3(a, b, c);
  const int w = threadIdx.x / 32;
  if ((threadIdx.x & 31) == 0) { red[w][0] = a; red[w][1] = b; red[w][2] = c; }
  __syncthreads();
  float3 r = make_float3(0.f, 0.f, 0.f);
#pragma unroll
  for (int i = 0; i < kWarps; ++i) { r.x += red[i][0]; r.y += red[i][1]; r.z += red[i][2]; }
  __syncthreads();
  return r;
}

template <int VC, int RPT, int MODE>
__global__ void __launch_bounds__((VC / 4) * (kDk / RPT), 1) lab_kernel(const Params p) {
  constexpr int CG = VC / 4, RG = kDk / RPT, NT = CG * RG, NSPLIT = kDv / VC, NW = NT / 32;
  static_assert(NT % 32 == 0 && NT <= 1024, "threads");
  const int j = blockIdx.x, h = blockIdx.y, b = blockIdx.z, t = threadIdx.x;
  const int cg = t % CG, rg = t / CG;
  const int kh = p.head_order == 0 ? h / (p.H / p.HK) : h % p.HK;
  const long long C = 2LL * p.HK * kDk + (long long)p.H * kDv;
  const long long bh = (long long)b * p.H + h;

  float* S = p.state + bh * kDk * kDv + j * VC + cg * 4;
  float4 s[RPT];
#pragma unroll
  for (int i = 0; i < RPT; ++i) s[i] = __ldcs(reinterpret_cast<const float4*>(S + (rg + RG * i) * kDv));
  const float alpha = __half2float(__ldg(p.alpha + bh));
  const float beta_in = __half2float(__ldg(p.beta + bh));
  const float a_h = __ldg(p.ssm_a + h), dt_h = __ldg(p.dt_bias + h);
  const float decay = expf(a_h * softplus(alpha + dt_h));
  if constexpr (MODE == 3) {
#pragma unroll
    for (int i = 0; i < RPT; ++i) {
      const float4 n = make_float4(decay * s[i].x, decay * s[i].y, decay * s[i].z, decay * s[i].w);
      __stcs(reinterpret_cast<float4*>(S + (rg + RG * i) * kDv), n);
    }
    return;
  }

  const half* x = p.qkv + b * C;
  const half* cin = p.conv_in + b * 3 * C;
  half* cout = p.conv_out + b * 3 * C;
  constexpr int kChannels = 2 * kDk + VC, kConvIters = (kChannels + NT - 1) / NT;
  float4 cw[kConvIters];
  half cx[kConvIters][4];
#pragma unroll
  for (int it = 0; it < kConvIters; ++it) {
    const int idx = t + it * NT;
    if (idx < kChannels) {
      const long long c = conv_channel(idx, kh, h, j * VC, p.HK);
      cw[it] = __ldg(reinterpret_cast<const float4*>(p.conv_w) + c);
      cx[it][0] = __ldg(cin + c);
      cx[it][1] = __ldg(cin + C + c);
      cx[it][2] = __ldg(cin + 2 * C + c);
      cx[it][3] = __ldg(x + c);
    }
  }
  constexpr bool kWhole = NSPLIT == 1 || MODE == 2;  // a CTA writes only its own columns
  constexpr int kOutCols = kWhole ? VC : kDv, kOutIters = (kOutCols + NT - 1) / NT;
  const half* zp = p.z + bh * kDv + (kWhole ? j * VC : 0);
  const float* nwp = p.ssm_norm + (kWhole ? j * VC : 0);
  float zs[kOutIters], nw[kOutIters];
#pragma unroll
  for (int it = 0; it < kOutIters; ++it) {
    const int c = t + it * NT;
    zs[it] = c < kOutCols ? __half2float(__ldg(zp + c)) : 0.f;
    nw[it] = c < kOutCols ? __ldg(nwp + c) : 0.f;
  }

  __shared__ float sq[kDk], sk[kDk], sv[VC], sdelta[VC];
  __shared__ __align__(16) float red_u[NW][VC];
  __shared__ __align__(16) float red_p[NW][VC];
  __shared__ float red3[NW][3];
  __shared__ int s_last;

  const bool qk_writer = j == 0 && (p.head_order == 0 ? (h % (p.H / p.HK) == 0) : (h < p.HK));
#pragma unroll
  for (int it = 0; it < kConvIters; ++it) {
    const int idx = t + it * NT;
    if (idx < kChannels) {
      const long long c = conv_channel(idx, kh, h, j * VC, p.HK);
      float y = cw[it].x * __half2float(cx[it][0]);
      y = fmaf(cw[it].y, __half2float(cx[it][1]), y);
      y = fmaf(cw[it].z, __half2float(cx[it][2]), y);
      y = fmaf(cw[it].w, __half2float(cx[it][3]), y);
      y = silu(y);
      if (idx >= 2 * kDk || qk_writer) { cout[c] = cx[it][1]; cout[C + c] = cx[it][2]; cout[2 * C + c] = cx[it][3]; }
      if (idx < kDk) sq[idx] = y;
      else if (idx < 2 * kDk) sk[idx - kDk] = y;
      else sv[idx - 2 * kDk] = y;
    }
  }
  const float beta = 1.0f / (1.0f + expf(-beta_in));
  __syncthreads();

  float aq = 0.f, ak = 0.f, aqk = 0.f;
  for (int i = t; i < kDk; i += NT) {
    const float qi = sq[i], ki = sk[i];
    aq = fmaf(qi, qi, aq); ak = fmaf(ki, ki, ak); aqk = fmaf(qi, ki, aqk);
  }
  const float3 sums = block_sum3<NT>(aq, ak, aqk, red3);
  const float rq = rsqrtf(sums.x + 1e-6f) * rsqrtf(static_cast<float>(kDk));
  const float rk = rsqrtf(sums.y + 1e-6f);
  const float kq = sums.z * rq * rk;

  float kr[RPT], qr[RPT];
#pragma unroll
  for (int i = 0; i < RPT; ++i) { kr[i] = sk[rg + RG * i] * rk; qr[i] = sq[rg + RG * i] * rq; }
  float u[4] = {0.f, 0.f, 0.f, 0.f}, pq[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
  for (int i = 0; i < RPT; ++i) {
    const float e[4] = {s[i].x, s[i].y, s[i].z, s[i].w};
#pragma unroll
    for (int c = 0; c < 4; ++c) { u[c] = fmaf(e[c], kr[i], u[c]); pq[c] = fmaf(e[c], qr[i], pq[c]); }
  }
  // Lanes of a warp with the same column group (lane distance CG, 2CG, ...) first.
#pragma unroll
  for (int off = CG; off < 32; off <<= 1) {
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      u[c] += __shfl_xor_sync(0xffffffffu, u[c], off);
      pq[c] += __shfl_xor_sync(0xffffffffu, pq[c], off);
    }
  }
  const int w = t / 32;
  if ((t & 31) < CG) {
    *reinterpret_cast<float4*>(&red_u[w][cg * 4]) = make_float4(u[0], u[1], u[2], u[3]);
    *reinterpret_cast<float4*>(&red_p[w][cg * 4]) = make_float4(pq[0], pq[1], pq[2], pq[3]);
  }
  __syncthreads();
  float o = 0.f;
  if (t < VC) {
    float uu = 0.f, pp = 0.f;
#pragma unroll
    for (int g = 0; g < NW; ++g) { uu += red_u[g][t]; pp += red_p[g][t]; }
    const float d = beta * (sv[t] - decay * uu);
    sdelta[t] = d;
    o = fmaf(d, kq, decay * pp);
  }
  __syncthreads();

  auto store_state = [&]() {
    const float4 dl = *reinterpret_cast<const float4*>(&sdelta[cg * 4]);
#pragma unroll
    for (int i = 0; i < RPT; ++i) {
      float4 n;
      n.x = fmaf(kr[i], dl.x, decay * s[i].x); n.y = fmaf(kr[i], dl.y, decay * s[i].y);
      n.z = fmaf(kr[i], dl.z, decay * s[i].z); n.w = fmaf(kr[i], dl.w, decay * s[i].w);
      __stcs(reinterpret_cast<float4*>(S + (rg + RG * i) * kDv), n);
    }
  };

  half* op = p.out + bh * kDv;
  if constexpr (MODE == 2) {
    store_state();
    if (t < VC) op[j * VC + t] = __float2half_rn(nw[0] * o * silu(zs[0]));
    return;
  }
  if constexpr (NSPLIT == 1) {
    store_state();
    const float ss = block_sum3<NT>(t < VC ? o * o : 0.f, 0.f, 0.f, red3).x;
    const float r = rsqrtf(ss / kDv + p.eps);
#pragma unroll
    for (int it = 0; it < kOutIters; ++it) {
      const int c = t + it * NT;
      if (c < VC) op[c] = __float2half_rn(nw[it] * (o * r) * silu(zs[it]));
    }
    return;
  }
  if (t < VC) p.ws_o[bh * kDv + j * VC + t] = o;
  const float ss = block_sum3<NT>(t < VC ? o * o : 0.f, 0.f, 0.f, red3).x;
  if (t == 0) p.ws_ss[bh * NSPLIT + j] = ss;
  if constexpr (MODE == 0) {
    __threadfence();
    __syncthreads();
    if (t == 0) s_last = atomicAdd(p.ws_cnt + bh, 1) == NSPLIT - 1;
  } else {
    __syncthreads();  // the CTA's slice is written before thread 0 releases it
    if (t == 0) s_last = atom_add_acq_rel(p.ws_cnt + bh, 1) == NSPLIT - 1;
  }
  store_state();
  __syncthreads();
  if (!s_last) return;
  if constexpr (MODE == 0) __threadfence();
  float tot = 0.f;
#pragma unroll
  for (int i = 0; i < NSPLIT; ++i) tot += __ldcg(p.ws_ss + bh * NSPLIT + i);
  const float r = rsqrtf(tot / kDv + p.eps);
#pragma unroll
  for (int it = 0; it < kOutIters; ++it) {
    const int c = t + it * NT;
    if (c < kDv) op[c] = __float2half_rn(nw[it] * (__ldcg(p.ws_o + bh * kDv + c) * r) * silu(zs[it]));
  }
  if (t == 0) p.ws_cnt[bh] = 0;
}

template <int VC, int RPT, int MODE>
int launch(const Params& p, cudaStream_t s) {
  lab_kernel<VC, RPT, MODE><<<dim3(kDv / VC, p.H, p.B), (VC / 4) * (kDk / RPT), 0, s>>>(p);
  T4_RETURN_LAUNCH_STATUS();
}

// (VC, RPT, MODE) of every variant, in the order Python indexes them.
#define LAB_VARIANTS(X)                                                                            \
  X(128, 8, 1) X(128, 4, 1) X(64, 8, 0) X(64, 8, 1) X(64, 4, 1) X(32, 8, 0) X(32, 8, 1) X(32, 4, 1) \
  X(16, 8, 0) X(16, 8, 1) X(16, 4, 1) X(8, 8, 1) X(8, 4, 1)                                       \
  X(128, 8, 2) X(64, 8, 2) X(32, 8, 2) X(16, 8, 2) X(8, 8, 2)                                     \
  X(128, 8, 3) X(64, 8, 3) X(32, 8, 3) X(16, 8, 3) X(8, 8, 3)

}  // namespace

T4_API int lab_variant(int i, int* vc, int* rpt, int* mode) {
  int k = 0;
#define X(a, b, c) if (k++ == i) { *vc = a; *rpt = b; *mode = c; return 0; }
  LAB_VARIANTS(X)
#undef X
  return -1;
}

T4_API int lab_deltanet(int i, const half* qkv, const half* z, const half* alpha, const half* beta,
                        const half* conv_in, half* conv_out, float* state, const float* conv_w, const float* ssm_a,
                        const float* dt_bias, const float* ssm_norm, half* out, float* ws_o, float* ws_ss,
                        int* ws_cnt, int B, int H, int HK, int head_order, float eps, cudaStream_t s) {
  const Params p{qkv, z, alpha, beta, conv_in, conv_out, state, conv_w, ssm_a, dt_bias, ssm_norm, out,
                 ws_o, ws_ss, ws_cnt, B, H, HK, head_order, eps};
  int k = 0;
#define X(a, b, c) if (k++ == i) return launch<a, b, c>(p, s);
  LAB_VARIANTS(X)
#undef X
  return static_cast<int>(cudaErrorInvalidValue);
}
