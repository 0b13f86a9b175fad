// Lab: launch shapes and cross-CTA hand-offs of the Gated DeltaNet decode step
// (not part of the library; the library kernel is kernels/deltanet.cu).
//
// One kernel template, knobs:
//   VC    value columns per CTA (split = 128 / VC CTAs per head)
//   RPT   state rows per thread (threads = VC/4 column groups x 128/RPT row groups)
//   MODE  1: split hand-off by one acq_rel atomic after a CTA barrier, the last CTA finishes the head
//         2: ablation, no hand-off: each CTA writes o * ssm_norm * SiLU(z) without the RMS factor (wrong output)
//         3: ablation, memory only: S <- decay * S, nothing else (the launch shape's floor)
//         4: each CTA publishes its sum of o^2 with the launch's epoch in one 64-bit word
//            (no fence: flag and value are one single-copy-atomic store), stores its state,
//            waits until its head's other CTAs have published, writes its own output columns
//         5: as 4, but waits and writes its output before storing its state
//         6: as 1, but every CTA stores its state only after the hand-off's atomic, and the
//            last CTA only after it has written the head's output
//   SF    1: the state is loaded first, then the small inputs (0: small inputs first)
//   MB    at least MB CTAs per SM (__launch_bounds__): caps registers so a batch's CTAs fit in one wave
//   FAST  SiLU and sigmoid through __expf and __fdividef instead of expf and IEEE division
// Round 2 (round 1 is in git history): the small inputs are loaded before the
// state, so conv and gates run while the state streams in; the column sums use
// the raw q and k and the L2 norms ride in the same reduction (one barrier
// fewer); the last CTA's output needs one warp reduction, not a block one.
// Row-group partial sums are reduced first across the lanes of a warp that share
// a column group (shuffles), then across warps through shared memory.
#include "common.cuh"

namespace {

constexpr int kDk = 128, kDv = 128;

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

__device__ __forceinline__ void st_relaxed_u64(unsigned long long* p, unsigned long long v) {
  asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" :: "l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ unsigned long long ld_relaxed_u64(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
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

template <bool FAST>
__device__ __forceinline__ float silu_(float x) {
  if constexpr (FAST) return __fdividef(x, 1.0f + __expf(-x));
  else return x / (1.0f + expf(-x));
}

template <int VC, int RPT, int MODE, bool FAST, bool SF, int MB>
__global__ void __launch_bounds__((VC / 4) * (kDk / RPT), MB) lab_kernel(const Params p) {
  constexpr int CG = VC / 4, RG = kDk / RPT, NT = CG * RG, NSPLIT = kDv / VC, NW = NT / 32;
  static_assert(NT % 32 == 0 && NT <= 1024, "threads");
  const int j = blockIdx.x, h = blockIdx.y, b = blockIdx.z, t = threadIdx.x;
  const int cg = t % CG, rg = t / CG, w = t / 32;
  const int kh = p.head_order == 0 ? h / (p.H / p.HK) : h % p.HK;
  const long long C = 2LL * p.HK * kDk + (long long)p.H * kDv;
  const long long bh = (long long)b * p.H + h;

  float* S = p.state + bh * kDk * kDv + j * VC + cg * 4;
  float4 s[RPT];
  auto load_state = [&]() {
#pragma unroll
    for (int i = 0; i < RPT; ++i) s[i] = __ldcs(reinterpret_cast<const float4*>(S + (rg + RG * i) * kDv));
  };
  if constexpr (SF) load_state();
  // 1. Small inputs first: they come back ahead of the state, so the conv and
  //    the gates are done by the time the state has arrived.
  const float alpha = __half2float(__ldg(p.alpha + bh));
  const float beta_in = __half2float(__ldg(p.beta + bh));
  const float a_h = __ldg(p.ssm_a + h), dt_h = __ldg(p.dt_bias + h);
  const half* x = p.qkv + b * C;
  const half* cin = p.conv_in + b * 3 * C;
  half* cout = p.conv_out + b * 3 * C;
  constexpr int kChannels = 2 * kDk + VC, kConvIters = (kChannels + NT - 1) / NT;
  float4 cw[kConvIters];
  half cx[kConvIters][4];
  if constexpr (MODE != 3) {
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
  }
  constexpr bool kWhole = NSPLIT == 1 || MODE == 2 || MODE == 4 || MODE == 5;  // a CTA writes only its own columns
  constexpr int kOutCols = kWhole ? VC : kDv, kOutIters = (kOutCols + NT - 1) / NT;
  const half* zp = p.z + bh * kDv + (kWhole ? j * VC : 0);
  const float* nwp = p.ssm_norm + (kWhole ? j * VC : 0);
  float zs[kOutIters], nw[kOutIters];
#pragma unroll
  for (int it = 0; it < kOutIters; ++it) {
    const int c = t + it * NT;
    zs[it] = MODE != 3 && c < kOutCols ? __half2float(__ldg(zp + c)) : 0.f;
    nw[it] = MODE != 3 && c < kOutCols ? __ldg(nwp + c) : 0.f;
  }
  // Modes 4, 5: this launch's epoch is one past the last one's (ws_cnt holds it per head).
  const unsigned epoch = (MODE == 4 || MODE == 5) ? static_cast<unsigned>(__ldcg(p.ws_cnt + bh)) + 1u : 0u;
  if constexpr (!SF) load_state();
  const float decay = expf(a_h * softplus(alpha + dt_h));
  if constexpr (MODE == 3) {
#pragma unroll
    for (int i = 0; i < RPT; ++i) {
      const float4 n = make_float4(decay * s[i].x, decay * s[i].y, decay * s[i].z, decay * s[i].w);
      __stcs(reinterpret_cast<float4*>(S + (rg + RG * i) * kDv), n);
    }
    return;
  }

  __shared__ float sq[kDk], sk[kDk], sv[VC], sdelta[VC];
  __shared__ __align__(16) float red_u[NW][VC];
  __shared__ __align__(16) float red_p[NW][VC];
  __shared__ float red_n[NW][3];
  __shared__ float s_rk, s_ss[NW];
  __shared__ int s_last;

  // 2. Causal conv (+SiLU) into shared memory; one CTA per channel writes conv_out.
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
      y = silu_<FAST>(y);
      if (idx >= 2 * kDk || qk_writer) { cout[c] = cx[it][1]; cout[C + c] = cx[it][2]; cout[2 * C + c] = cx[it][3]; }
      if (idx < kDk) sq[idx] = y;
      else if (idx < 2 * kDk) sk[idx - kDk] = y;
      else sv[idx - 2 * kDk] = y;
    }
  }
  const float beta = FAST ? __fdividef(1.0f, 1.0f + __expf(-beta_in)) : 1.0f / (1.0f + expf(-beta_in));
  __syncthreads();

  // 3. Column sums S^T k and S^T q with the raw (unnormalized) k and q: the
  //    norms are per-head scalars, applied after the reduction. Threads of
  //    column group 0 also sum |q|^2, |k|^2 and q.k over their rows.
  float kraw[RPT], qraw[RPT];
#pragma unroll
  for (int i = 0; i < RPT; ++i) { kraw[i] = sk[rg + RG * i]; qraw[i] = sq[rg + RG * i]; }
  float u[4] = {0.f, 0.f, 0.f, 0.f}, pq[4] = {0.f, 0.f, 0.f, 0.f}, nrm[3] = {0.f, 0.f, 0.f};
#pragma unroll
  for (int i = 0; i < RPT; ++i) {
    const float e[4] = {s[i].x, s[i].y, s[i].z, s[i].w};
#pragma unroll
    for (int c = 0; c < 4; ++c) { u[c] = fmaf(e[c], kraw[i], u[c]); pq[c] = fmaf(e[c], qraw[i], pq[c]); }
    nrm[0] = fmaf(qraw[i], qraw[i], nrm[0]); nrm[1] = fmaf(kraw[i], kraw[i], nrm[1]);
    nrm[2] = fmaf(qraw[i], kraw[i], nrm[2]);
  }
#pragma unroll
  for (int off = CG; off < 32; off <<= 1) {
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      u[c] += __shfl_xor_sync(0xffffffffu, u[c], off);
      pq[c] += __shfl_xor_sync(0xffffffffu, pq[c], off);
    }
#pragma unroll
    for (int c = 0; c < 3; ++c) nrm[c] += __shfl_xor_sync(0xffffffffu, nrm[c], off);
  }
  if ((t & 31) < CG) {
    *reinterpret_cast<float4*>(&red_u[w][cg * 4]) = make_float4(u[0], u[1], u[2], u[3]);
    *reinterpret_cast<float4*>(&red_p[w][cg * 4]) = make_float4(pq[0], pq[1], pq[2], pq[3]);
  }
  if ((t & 31) == 0) { red_n[w][0] = nrm[0]; red_n[w][1] = nrm[1]; red_n[w][2] = nrm[2]; }
  __syncthreads();
  float o = 0.f;
  if (t < VC) {
    float uu = 0.f, pp = 0.f, qq = 0.f, kk = 0.f, qk = 0.f;
#pragma unroll
    for (int g = 0; g < NW; ++g) {
      uu += red_u[g][t]; pp += red_p[g][t]; qq += red_n[g][0]; kk += red_n[g][1]; qk += red_n[g][2];
    }
    const float rq = rsqrtf(qq + 1e-6f) * rsqrtf(static_cast<float>(kDk)), rk = rsqrtf(kk + 1e-6f);
    const float d = beta * (sv[t] - decay * (uu * rk));  // delta = beta (v - S'^T k), S' = decay S
    sdelta[t] = d;
    o = fmaf(d, qk * rq * rk, decay * (pp * rq));      // o = decay S^T q + delta (k . q)
    if (t == 0) s_rk = rk;
  }
  __syncthreads();

  auto store_state = [&]() {
    const float4 dl = *reinterpret_cast<const float4*>(&sdelta[cg * 4]);
    const float rk = s_rk;
#pragma unroll
    for (int i = 0; i < RPT; ++i) {
      const float kr = kraw[i] * rk;
      float4 n;
      n.x = fmaf(kr, dl.x, decay * s[i].x); n.y = fmaf(kr, dl.y, decay * s[i].y);
      n.z = fmaf(kr, dl.z, decay * s[i].z); n.w = fmaf(kr, dl.w, decay * s[i].w);
      __stcs(reinterpret_cast<float4*>(S + (rg + RG * i) * kDv), n);
    }
  };
  // Sum of o^2 over this CTA's columns (held by threads t < VC): warp shuffles,
  // then the few warp partials through shared memory (one barrier, shared with
  // what follows).
  auto warp_ss = [&]() {
    float ss = t < VC ? o * o : 0.f;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
    if ((t & 31) == 0 && w < (VC + 31) / 32) s_ss[w] = ss;
  };
  constexpr int kSsWarps = (VC + 31) / 32;

  half* op = p.out + bh * kDv;
  if constexpr (MODE == 2) {
    store_state();
    if (t < VC) op[j * VC + t] = __float2half_rn(nw[0] * o * silu_<FAST>(zs[0]));
    return;
  }
  if constexpr (NSPLIT == 1) {
    store_state();
    warp_ss();
    __syncthreads();
    float ss = 0.f;
#pragma unroll
    for (int i = 0; i < kSsWarps; ++i) ss += s_ss[i];
    const float r = rsqrtf(ss / kDv + p.eps);
    if (t < VC) op[t] = __float2half_rn(nw[0] * (o * r) * silu_<FAST>(zs[0]));
    return;
  }
  if constexpr (MODE == 4 || MODE == 5) {
    warp_ss();
    __syncthreads();
    __shared__ float s_part[NSPLIT];
    unsigned long long* slot = reinterpret_cast<unsigned long long*>(p.ws_ss) + bh * NSPLIT;
    float ss_own = 0.f;
#pragma unroll
    for (int i = 0; i < kSsWarps; ++i) ss_own += s_ss[i];
    if (t == 0) st_relaxed_u64(slot + j, (static_cast<unsigned long long>(epoch) << 32) | __float_as_uint(ss_own));
    if (MODE == 4) store_state();
    if (t < NSPLIT) {
      float v = ss_own;
      if (t != j) {
        unsigned long long w64;
        do { w64 = ld_relaxed_u64(slot + t); } while (static_cast<unsigned>(w64 >> 32) != epoch);
        v = __uint_as_float(static_cast<unsigned>(w64));
      }
      s_part[t] = v;
    }
    __syncthreads();
    float tot = 0.f;
#pragma unroll
    for (int i = 0; i < NSPLIT; ++i) tot += s_part[i];  // fixed order: every CTA gets the same sum
    const float r = rsqrtf(tot / kDv + p.eps);
    if (t < VC) op[j * VC + t] = __float2half_rn(nw[0] * (o * r) * silu_<FAST>(zs[0]));
    // Every CTA of the head has read the old epoch once all have published.
    if (t == 0 && j == 0) p.ws_cnt[bh] = static_cast<int>(epoch);
    if (MODE == 5) store_state();
    return;
  }
  if (t < VC) p.ws_o[bh * kDv + j * VC + t] = o;
  warp_ss();
  __syncthreads();  // the CTA's slice is written before thread 0 releases it
  if (t == 0) {
    float ss = 0.f;
#pragma unroll
    for (int i = 0; i < kSsWarps; ++i) ss += s_ss[i];
    p.ws_ss[bh * NSPLIT + j] = ss;
    s_last = atom_add_acq_rel(p.ws_cnt + bh, 1) == NSPLIT - 1;
  }
  if (MODE == 1) store_state();
  __syncthreads();
  if (!s_last) {
    if (MODE == 6) store_state();
    return;
  }
  float tot = 0.f;
#pragma unroll
  for (int i = 0; i < NSPLIT; ++i) tot += __ldcg(p.ws_ss + bh * NSPLIT + i);
  const float r = rsqrtf(tot / kDv + p.eps);
#pragma unroll
  for (int it = 0; it < kOutIters; ++it) {
    const int c = t + it * NT;
    if (c < kDv) op[c] = __float2half_rn(nw[it] * (__ldcg(p.ws_o + bh * kDv + c) * r) * silu_<FAST>(zs[it]));
  }
  if (t == 0) p.ws_cnt[bh] = 0;
  if (MODE == 6) store_state();
}

template <int VC, int RPT, int MODE, int FAST, int SF, int MB>
int launch(const Params& p, cudaStream_t s) {
  lab_kernel<VC, RPT, MODE, FAST != 0, SF != 0, MB><<<dim3(kDv / VC, p.H, p.B), (VC / 4) * (kDk / RPT), 0, s>>>(p);
  T4_RETURN_LAUNCH_STATUS();
}

// (VC, RPT, MODE, FAST, SF, MB) of every variant, in the order Python indexes them.
#define LAB_VARIANTS(X)                                                                                 \
  X(128, 8, 1, 0, 1, 1) X(64, 8, 1, 0, 1, 1) X(64, 8, 1, 0, 1, 3) X(64, 8, 1, 0, 1, 4) X(32, 8, 1, 0, 1, 6) \
  X(32, 8, 1, 0, 1, 1) X(128, 8, 1, 0, 1, 2) X(64, 8, 2, 0, 1, 1) X(64, 8, 2, 0, 1, 3)                    \
  X(64, 8, 1, 1, 1, 3) X(64, 8, 4, 0, 1, 3)

}  // namespace

T4_API int lab_variant(int i, int* vc, int* rpt, int* mode, int* fast, int* sf, int* mb) {
  int k = 0;
#define X(a, b, c, d, e, f) if (k++ == i) { *vc = a; *rpt = b; *mode = c; *fast = d; *sf = e; *mb = f; return 0; }
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
#define X(a, b, c, d, e, f) if (k++ == i) return launch<a, b, c, d, e, f>(p, s);
  LAB_VARIANTS(X)
#undef X
  return static_cast<int>(cudaErrorInvalidValue);
}
