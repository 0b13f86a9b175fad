// Gated DeltaNet decode step (qwen35 linear-attention layer), one token, batch B.
//
// Per value head h (H of them, head dim 128) and batch row b:
//   conv:   y_c = SiLU(sum_j w[c, j] * x_{t-3+j}[c])            (depthwise, 4 taps)
//   split:  q (key head kh), k (key head kh), v (value head h) from y
//   norm:   q <- q * rsqrt(|q|^2 + 1e-6) / sqrt(128),  k <- k * rsqrt(|k|^2 + 1e-6)
//   gates:  g = ssm_a[h] * softplus(alpha + dt_bias[h]);  decay = exp(g);  beta = sigmoid(beta_proj)
//   state:  S' = decay S;  delta = beta (v - S'^T k);  S_new = S' + k delta^T;  o = S_new^T q
//   gate:   out = RMSNorm(o) * ssm_norm * SiLU(z)                    (per head, eps 1e-6)
//
// The single-pass shortcut: S_new^T q = decay S^T q + delta (k . q), so one read
// of S gives both column sums S^T k and S^T q, and S is read once and written
// once (fp32). Columns of S (value index) are independent given k, which the
// split launch exploits: grid (128 / VC, H, B), each CTA owning VC columns.
// With more than one CTA per head the per-head RMSNorm needs every column: each
// CTA leaves its o slice and partial sum of squares in a workspace, and the last
// CTA to finish a head (one acq_rel atomic counter, reset by that CTA) writes the
// head's output. Launch knobs, results and ablations: tools/deltanet_lab/.
//
// The key-head map is selectable: head_order 0 (Hugging Face) kh = h / (H / HK);
// head_order 1 (qwen35 GGUF, value heads tiled) kh = h % HK.
//
// The conv state is [B, 3, C] (rows x_{t-3}, x_{t-2}, x_{t-1}) and is written
// out of place: several CTAs read the same q/k channels, so shifting in place
// would race. Exactly one CTA writes each channel of conv_out.
#include "common.cuh"

// t4lib:hot deltanet_decode_kernel

namespace {

constexpr int kDk = 128;        // key head dim (rows of S)
constexpr int kDv = 128;        // value head dim (columns of S)
constexpr int kRowGroups = 16;  // threads along k; each thread owns kDk / kRowGroups rows
constexpr int kRows = kDk / kRowGroups;

__device__ __forceinline__ float to_f(half x) { return __half2float(x); }
__device__ __forceinline__ float to_f(float x) { return x; }
template <typename T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ half from_f<half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ float from_f<float>(float x) { return x; }

__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }
// torch.nn.functional.softplus (beta 1, threshold 20).
__device__ __forceinline__ float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// Atomic add with acquire-release semantics at GPU scope (sm_70+). After a CTA
// barrier it publishes every write of the CTA before it (bar.sync orders them
// before thread 0's release), so no thread needs a __threadfence of its own.
__device__ __forceinline__ int atom_add_acq_rel(int* p, int v) {
  int old;
  asm volatile("atom.add.acq_rel.gpu.global.s32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}

// Read-only activation load (the inputs are never written during the step).
__device__ __forceinline__ half ldg_x(const half* p) { return __ldg(p); }
__device__ __forceinline__ float ldg_x(const float* p) { return __ldg(p); }

// Channel of the raw QKV row behind conv slot idx of a CTA: q of key head kh
// (idx < 128), k of key head kh (idx < 256), then v of value head h, columns col0...
__device__ __forceinline__ long long conv_channel(int idx, int kh, int h, int col0, int HK) {
  if (idx < kDk) return (long long)kh * kDk + idx;
  if (idx < 2 * kDk) return (long long)HK * kDk + kh * kDk + (idx - kDk);
  return 2LL * HK * kDk + (long long)h * kDv + col0 + (idx - 2 * kDk);
}

struct Params {
  const void* qkv;        // [B, C] raw projection row (pre-conv), TX
  const void* z;          // [B, H*128] output gate, TX
  const void* alpha;      // [B, H] TX
  const void* beta;       // [B, H] TX
  const void* conv_in;    // [B, 3, C] TX
  void* conv_out;         // [B, 3, C] TX, must not alias conv_in
  float* state;           // [B, H, 128, 128] fp32, updated in place
  const float* conv_w;    // [C, 4] fp32, tap 3 multiplies the current token
  const float* ssm_a;     // [H] = -exp(A_log)
  const float* dt_bias;   // [H]
  const float* ssm_norm;  // [128]
  void* out;              // [B, H*128] TO
  float* ws_o;            // [B*H*128] split launch only
  float* ws_ss;           // [B*H*split]
  int* ws_cnt;            // [B*H], zero before the launch; left zero after it
  int B, H, HK, head_order;
  float eps;
};

// CTAs per SM that __launch_bounds__ asks for: a register cap (at most 64K /
// (kMinCtas * threads) each) that keeps a batch's CTAs in one wave. On the H200
// the split-2 kernel took 87 registers uncapped, two CTAs per SM: at B = 4 its
// 384 CTAs ran in two waves, 12.95 us against 10.67 us capped at three per SM
// (tools/deltanet_lab, round 5).
template <int VC>
constexpr int kMinCtas = VC == 128 ? 2 : VC == 64 ? 3 : VC == 32 ? 6 : 8;

// One CTA: batch row b = blockIdx.z, value head h = blockIdx.y, columns
// [blockIdx.x * VC, +VC). NT = 4 * VC threads: VC/4 column groups (a float4 of
// S each) x 16 row groups (8 rows each); thread t has column group t % (VC/4).
template <int VC, typename TX, typename TO>
__global__ void __launch_bounds__(4 * VC, kMinCtas<VC>) deltanet_decode_kernel(const Params p) {
  constexpr int NT = 4 * VC, CG = VC / 4, NSPLIT = kDv / VC, NW = NT / 32;
  const int j = blockIdx.x, h = blockIdx.y, b = blockIdx.z, t = threadIdx.x;
  const int cg = t % CG, rg = t / CG, w = t / 32;
  const int ratio = p.H / p.HK;
  const int kh = p.head_order == 0 ? h / ratio : h % p.HK;
  const long long C = 2LL * p.HK * kDk + (long long)p.H * kDv;
  const long long bh = (long long)b * p.H + h;

  // 1. Issue every global load up front, the state first (the only DRAM-heavy
  //    traffic: loaded first, it measured faster than behind the small inputs),
  //    so the latencies overlap instead of adding up (read-only loads: the
  //    compiler may not hoist them past the conv_out stores otherwise).
  //    ld.global.cs for S: streamed, read once.
  float* S = p.state + bh * kDk * kDv + j * VC + cg * 4;
  float4 s[kRows];
#pragma unroll
  for (int i = 0; i < kRows; ++i) s[i] = __ldcs(reinterpret_cast<const float4*>(S + (rg + kRowGroups * i) * kDv));

  // Conv channels of this CTA: q and k of key head kh, v of its own columns.
  const TX* x = static_cast<const TX*>(p.qkv) + b * C;
  const TX* cin = static_cast<const TX*>(p.conv_in) + b * 3 * C;
  TX* cout = static_cast<TX*>(p.conv_out) + b * 3 * C;
  constexpr int kChannels = 2 * kDk + VC, kConvIters = (kChannels + NT - 1) / NT;
  float4 cw[kConvIters];
  TX cx[kConvIters][4];
#pragma unroll
  for (int it = 0; it < kConvIters; ++it) {
    const int idx = t + it * NT;
    if (idx < kChannels) {
      const long long c = conv_channel(idx, kh, h, j * VC, p.HK);
      cw[it] = __ldg(reinterpret_cast<const float4*>(p.conv_w) + c);
      cx[it][0] = ldg_x(cin + c);
      cx[it][1] = ldg_x(cin + C + c);
      cx[it][2] = ldg_x(cin + 2 * C + c);
      cx[it][3] = ldg_x(x + c);
    }
  }
  const float alpha = to_f(ldg_x(static_cast<const TX*>(p.alpha) + bh));
  const float beta_in = to_f(ldg_x(static_cast<const TX*>(p.beta) + bh));
  const float a_h = __ldg(p.ssm_a + h), dt_h = __ldg(p.dt_bias + h);
  // Output gate inputs of the columns this thread may write (all 128 when split:
  // any CTA of the head can be the one that finishes it).
  constexpr int kOutCols = NSPLIT == 1 ? VC : kDv, kOutIters = (kOutCols + NT - 1) / NT;
  const TX* zp = static_cast<const TX*>(p.z) + bh * kDv;
  float zs[kOutIters], nw[kOutIters];
#pragma unroll
  for (int it = 0; it < kOutIters; ++it) {
    const int c = t + it * NT;
    zs[it] = c < kOutCols ? to_f(ldg_x(zp + c)) : 0.f;
    nw[it] = c < kOutCols ? __ldg(p.ssm_norm + c) : 0.f;
  }

  __shared__ float sq[kDk], sk[kDk], sv[VC], sdelta[VC];
  __shared__ __align__(16) float red_u[NW][VC];
  __shared__ __align__(16) float red_p[NW][VC];
  __shared__ float red_n[NW][3], s_ss[NW];
  __shared__ float s_rk;
  __shared__ int s_last;

  // 2. Causal conv (+SiLU); exactly one CTA per channel writes conv_out.
  const bool qk_writer = j == 0 && (p.head_order == 0 ? (h % ratio == 0) : (h < p.HK));
#pragma unroll
  for (int it = 0; it < kConvIters; ++it) {
    const int idx = t + it * NT;
    if (idx < kChannels) {
      const long long c = conv_channel(idx, kh, h, j * VC, p.HK);
      float y = cw[it].x * to_f(cx[it][0]);
      y = fmaf(cw[it].y, to_f(cx[it][1]), y);
      y = fmaf(cw[it].z, to_f(cx[it][2]), y);
      y = fmaf(cw[it].w, to_f(cx[it][3]), y);
      y = silu(y);
      if (idx >= 2 * kDk || qk_writer) { cout[c] = cx[it][1]; cout[C + c] = cx[it][2]; cout[2 * C + c] = cx[it][3]; }
      if (idx < kDk) sq[idx] = y;
      else if (idx < 2 * kDk) sk[idx - kDk] = y;
      else sv[idx - 2 * kDk] = y;
    }
  }
  // Gates, computed by every thread (no broadcast through shared memory).
  const float decay = expf(a_h * softplus(alpha + dt_h));
  const float beta = 1.0f / (1.0f + expf(-beta_in));
  __syncthreads();

  // 3. Column sums S^T k and S^T q with the raw (unnormalized) k and q: the L2
  //    norms are per-head scalars applied after the reduction, so they ride in
  //    it (column group 0 also sums |q|^2, |k|^2, q.k over its rows) instead of
  //    costing a block reduction of their own before it.
  float kraw[kRows], qraw[kRows];
#pragma unroll
  for (int i = 0; i < kRows; ++i) { kraw[i] = sk[rg + kRowGroups * i]; qraw[i] = sq[rg + kRowGroups * i]; }
  float u[4] = {0.f, 0.f, 0.f, 0.f}, pq[4] = {0.f, 0.f, 0.f, 0.f}, nrm[3] = {0.f, 0.f, 0.f};
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const float e[4] = {s[i].x, s[i].y, s[i].z, s[i].w};
#pragma unroll
    for (int c = 0; c < 4; ++c) { u[c] = fmaf(e[c], kraw[i], u[c]); pq[c] = fmaf(e[c], qraw[i], pq[c]); }
    nrm[0] = fmaf(qraw[i], qraw[i], nrm[0]);
    nrm[1] = fmaf(kraw[i], kraw[i], nrm[1]);
    nrm[2] = fmaf(qraw[i], kraw[i], nrm[2]);
  }
  // Row groups: first across the lanes of a warp with the same column group
  // (lane distance CG, 2 CG, ...), then across warps through shared memory.
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
    const float rq = rsqrtf(qq + 1e-6f) * rsqrtf(static_cast<float>(kDk));  // q scale incl. 1/sqrt(d)
    const float rk = rsqrtf(kk + 1e-6f);
    const float d = beta * (sv[t] - decay * (uu * rk));  // delta = beta (v - S'^T k), S' = decay S
    sdelta[t] = d;
    o = fmaf(d, qk * rq * rk, decay * (pp * rq));      // o = decay S^T q + delta (k . q)
    if (t == 0) s_rk = rk;
  }
  __syncthreads();

  // 4. S_new = decay S + k delta^T, written once (st.global.cs: streamed).
  auto store_state = [&]() {
    const float4 dl = *reinterpret_cast<const float4*>(&sdelta[cg * 4]);
    const float rk = s_rk;
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const float kr = kraw[i] * rk;
      float4 n;
      n.x = fmaf(kr, dl.x, decay * s[i].x); n.y = fmaf(kr, dl.y, decay * s[i].y);
      n.z = fmaf(kr, dl.z, decay * s[i].z); n.w = fmaf(kr, dl.w, decay * s[i].w);
      __stcs(reinterpret_cast<float4*>(S + (rg + kRowGroups * i) * kDv), n);
    }
  };
  // Sum of o^2 over this CTA's columns (threads t < VC): warp shuffles, then the
  // few warp partials through shared memory after the caller's barrier.
  constexpr int kSsWarps = (VC + 31) / 32;
  auto warp_ss = [&]() {
    float ss = t < VC ? o * o : 0.f;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
    if ((t & 31) == 0 && w < kSsWarps) s_ss[w] = ss;
  };
  auto cta_ss = [&]() {
    float ss = 0.f;
#pragma unroll
    for (int i = 0; i < kSsWarps; ++i) ss += s_ss[i];
    return ss;
  };

  // 5. Output gate: RMSNorm over the head's 128 values * ssm_norm * SiLU(z).
  TO* op = static_cast<TO*>(p.out) + bh * kDv;
  if constexpr (NSPLIT == 1) {
    store_state();
    warp_ss();
    __syncthreads();
    const float r = rsqrtf(cta_ss() / kDv + p.eps);
    if (t < VC) op[t] = from_f<TO>(nw[0] * (o * r) * silu(zs[0]));
    return;
  }
  // Split launch: publish this slice, the last CTA of the head finishes it. The
  // slice goes out before the state, so the release waits only for those bytes.
  if (t < VC) p.ws_o[bh * kDv + j * VC + t] = o;
  warp_ss();
  __syncthreads();  // every write of the CTA so far precedes thread 0's release
  if (t == 0) {
    p.ws_ss[bh * NSPLIT + j] = cta_ss();
    s_last = atom_add_acq_rel(p.ws_cnt + bh, 1) == NSPLIT - 1;
  }
  store_state();
  __syncthreads();  // after thread 0's acquire: the other CTAs' slices are visible
  if (!s_last) return;
  float tot = 0.f;
#pragma unroll
  for (int i = 0; i < NSPLIT; ++i) tot += __ldcg(p.ws_ss + bh * NSPLIT + i);  // fixed order: deterministic
  const float r = rsqrtf(tot / kDv + p.eps);
#pragma unroll
  for (int it = 0; it < kOutIters; ++it) {
    const int c = t + it * NT;
    if (c < kDv) {
      const float oc = __ldcg(p.ws_o + bh * kDv + c);  // L2, not a stale L1 line
      op[c] = from_f<TO>(nw[it] * (oc * r) * silu(zs[it]));
    }
  }
  if (t == 0) p.ws_cnt[bh] = 0;  // ready for the next launch (graph replay)
}

template <int VC, typename TX, typename TO>
int launch(const Params& p, cudaStream_t stream) {
  const dim3 grid(kDv / VC, p.H, p.B);
  deltanet_decode_kernel<VC, TX, TO><<<grid, 4 * VC, 0, stream>>>(p);
  T4_RETURN_LAUNCH_STATUS();
}

template <typename TX, typename TO>
int launch_split(const Params& p, int split, cudaStream_t stream) {
  switch (split) {
    case 1: return launch<128, TX, TO>(p, stream);
    case 2: return launch<64, TX, TO>(p, stream);
    case 4: return launch<32, TX, TO>(p, stream);
    case 8: return launch<16, TX, TO>(p, stream);
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
}

}  // namespace

// split = CTAs per value head (1: one CTA per head; 2, 4, 8: split over value
// columns). x_half / out_half select fp16 (1) or fp32 (0) activations / output.
// Head dims are 128 (key and value); H % HK == 0.
T4_API int t4_deltanet_decode(const void* qkv, const void* z, const void* alpha, const void* beta,
                              const void* conv_in, void* conv_out, float* state, const float* conv_w,
                              const float* ssm_a, const float* dt_bias, const float* ssm_norm, void* out,
                              float* ws_o, float* ws_ss, int* ws_cnt, int B, int H, int HK, int head_order,
                              int split, int x_half, int out_half, float eps, cudaStream_t stream) {
  if (B <= 0 || H <= 0 || HK <= 0 || H % HK) return static_cast<int>(cudaErrorInvalidValue);
  if (split > 1 && (!ws_o || !ws_ss || !ws_cnt)) return static_cast<int>(cudaErrorInvalidValue);
  Params p{qkv, z, alpha, beta, conv_in, conv_out, state, conv_w, ssm_a, dt_bias, ssm_norm, out,
           ws_o, ws_ss, ws_cnt, B, H, HK, head_order, eps};
  if (x_half && out_half) return launch_split<half, half>(p, split, stream);
  if (x_half) return launch_split<half, float>(p, split, stream);
  if (out_half) return launch_split<float, half>(p, split, stream);
  return launch_split<float, float>(p, split, stream);
}
