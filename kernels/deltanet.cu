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
//
// Design for latency (a decode step moves only a few MB, so the time is a chain
// of memory round trips, not bandwidth): every global load a CTA makes (its
// slice of S as 16-byte streaming loads, the 4 conv taps of its q/k/v channels,
// the gate scalars, z and ssm_norm of its head) is issued at the top, before
// any global store, so they all share one round trip. The conv and the L2
// norms of q and k are then computed redundantly by every CTA that needs them
// (2 x 128 channels x 4 taps, from L2) while the state is still in flight.
//
// RMSNorm couples the 128 columns of a head. 'head' launch: the CTA owns them
// all and finishes in shared memory. 'split' launch (VC <= 32 columns per CTA):
// warp 0 of each CTA holds the CTA's VC values of o; it stores them to a
// workspace, fences, and counts the CTA in with one atomic; the warp that
// brings the head's count to 128 / VC reads the whole o row back from L2,
// normalizes it and writes the output (then resets the counter for the next
// launch, e.g. a CUDA-graph replay). The other warps only store their state.
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

constexpr int kD = 128;  // key and value head dim (rows and columns of S)

__device__ __forceinline__ float to_f(half x) { return __half2float(x); }
__device__ __forceinline__ float to_f(float x) { return x; }
template <typename T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ half from_f<half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ float from_f<float>(float x) { return x; }

__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }
// torch.nn.functional.softplus (beta 1, threshold 20).
__device__ __forceinline__ float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

__device__ __forceinline__ float warp_sum(float a) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
  return a;
}

// Channel of the fused qkv row for conv index idx of a CTA: idx < 128 -> q of
// key head kh; < 256 -> k of key head kh; else value column v0 + idx - 256 of head h.
__device__ __forceinline__ int channel(int idx, int kh, int h, int v0, int HK) {
  if (idx < kD) return kh * kD + idx;
  if (idx < 2 * kD) return HK * kD + kh * kD + (idx - kD);
  return 2 * HK * kD + h * kD + v0 + (idx - 2 * kD);
}

// S_new[row, 4 columns] = decay S + k[row] delta^T (streaming store: written once).
__device__ __forceinline__ void store_row(float* S, int row, float4 s, float k, float4 dl, float decay) {
  float4 n;
  n.x = fmaf(k, dl.x, decay * s.x); n.y = fmaf(k, dl.y, decay * s.y);
  n.z = fmaf(k, dl.z, decay * s.z); n.w = fmaf(k, dl.w, decay * s.w);
  __stcs(reinterpret_cast<float4*>(S + row * kD), n);
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
  float* ws_o;            // [B*H*128] split launch only: un-normalized o
  int* ws_cnt;            // [B*H] split launch only: zero before the launch; left zero after it
  int B, H, HK, head_order;
  float eps;
};

// Warp 0 finishes a head: lane l holds o of columns l + 32 m (m < 4); sz / sn
// hold SiLU's argument z and ssm_norm of the head's 128 columns. Writes out = RMSNorm(o) * w * SiLU(z).
template <typename TO>
__device__ __forceinline__ void finish_head(const float (&o)[4], const float* sz, const float* sn, TO* op, int lane,
                                            float eps) {
  float ss = 0.f;
#pragma unroll
  for (int m = 0; m < 4; ++m) ss = fmaf(o[m], o[m], ss);
  ss = warp_sum(ss);
  const float r = rsqrtf(ss / kD + eps);
#pragma unroll
  for (int m = 0; m < 4; ++m) {
    const int c = lane + 32 * m;
    op[c] = from_f<TO>(sn[c] * (o[m] * r) * silu(sz[c]));
  }
}

// One CTA: batch row b = blockIdx.z, value head h = blockIdx.y, columns
// [blockIdx.x * VC, +VC). NT threads = CG column groups (a float4 of S each)
// x RG row groups; thread (cg, rg) owns rows rg + RG i, i < R. Within a warp cg
// runs fastest, so a warp's loads cover whole VC*4-byte row segments.
template <int VC, int NT, int MINB, typename TX, typename TO>
__global__ void __launch_bounds__(NT, MINB) deltanet_decode_kernel(const Params p) {
  constexpr int CG = VC / 4, RG = NT / CG, R = kD / RG, NW = NT / 32, NSPLIT = kD / VC;
  constexpr int NCH = 2 * kD + VC;            // conv channels this CTA needs: q, k, its v columns
  constexpr int CPT = (NCH + NT - 1) / NT;    // conv channels per thread
  static_assert(VC % 4 == 0 && 32 % CG == 0 && CG * RG == NT && RG * R == kD, "bad tile");
  static_assert(NT % 32 == 0 && NT <= 1024, "whole warps");
  static_assert(NSPLIT == 1 || VC <= 32, "the split handshake keeps a CTA's o in warp 0");
  static_assert(NT >= kD, "one thread per column of the head (output gate, head launch)");

  const int j = blockIdx.x, h = blockIdx.y, b = blockIdx.z, t = threadIdx.x;
  const int lane = t & 31, warp = t >> 5;
  const int cg = t % CG, rg = t / CG;
  const int ratio = p.H / p.HK;
  const int kh = p.head_order == 0 ? h / ratio : h % p.HK;
  const int C = 2 * p.HK * kD + p.H * kD;  // < 2^31: checked by the launcher
  const long long bh = (long long)b * p.H + h;

  // ---- 1. every global load, up front ------------------------------------------------------
  // State slice: R streaming 16-byte loads per thread (read once: evict-first).
  float* S = p.state + bh * kD * kD + j * VC + cg * 4;
  float4 s[R];
#pragma unroll
  for (int i = 0; i < R; ++i) s[i] = __ldcs(reinterpret_cast<const float4*>(S + (rg + RG * i) * kD));

  // Conv inputs of this CTA's channels: idx < 128 -> q of key head kh, < 256 -> k, else v column.
  const TX* x = static_cast<const TX*>(p.qkv) + (long long)b * C;
  const TX* cin = static_cast<const TX*>(p.conv_in) + (long long)b * 3 * C;
  float4 w[CPT];
  TX x0[CPT], x1[CPT], x2[CPT], x3[CPT];
#pragma unroll
  for (int i = 0; i < CPT; ++i) {
    const int idx = t + NT * i;
    if (idx < NCH) {
      const int c = channel(idx, kh, h, j * VC, p.HK);
      w[i] = __ldg(reinterpret_cast<const float4*>(p.conv_w) + c);
      x0[i] = cin[c]; x1[i] = cin[C + c]; x2[i] = cin[2 * C + c]; x3[i] = x[c];
    }
  }
  // Gate scalars: the last thread computes the gates into shared memory (in the
  // head launch it has no conv channel, so this costs the state no registers).
  float a_in = 0.f, b_in = 0.f, ssm_a = 0.f, dt_b = 0.f;
  if (t == NT - 1) {
    a_in = to_f(static_cast<const TX*>(p.alpha)[bh]);
    b_in = to_f(static_cast<const TX*>(p.beta)[bh]);
    ssm_a = p.ssm_a[h];
    dt_b = p.dt_bias[h];
  }
  // Output gate of the whole head (z, ssm_norm), parked in shared memory for warp 0
  // which finishes the head: the last 128 threads load one column each (in the
  // head launch they are the threads without a conv channel).
  const int zc = t - (NT - kD);
  TX zr = from_f<TX>(0.f);
  float nr = 0.f;
  if (zc >= 0) { zr = static_cast<const TX*>(p.z)[bh * kD + zc]; nr = p.ssm_norm[zc]; }

  __shared__ float sq[kD], sk[kD], sv[VC], sdelta[VC], sz[kD], sn[kD];
  __shared__ __align__(16) float red_u[NW][VC];
  __shared__ __align__(16) float red_p[NW][VC];
  __shared__ float red3[NW][3];
  __shared__ float sgate[2];
  __shared__ float so[NSPLIT == 1 ? kD : 1];

  // ---- 2. conv + SiLU; shift of the conv state (one writer CTA per channel) ----------------
  TX* cout = static_cast<TX*>(p.conv_out) + (long long)b * 3 * C;
  const bool qk_writer = j == 0 && (p.head_order == 0 ? (h % ratio == 0) : (h < p.HK));
#pragma unroll
  for (int i = 0; i < CPT; ++i) {
    const int idx = t + NT * i;
    if (idx < NCH) {
      float y = w[i].x * to_f(x0[i]);
      y = fmaf(w[i].y, to_f(x1[i]), y);
      y = fmaf(w[i].z, to_f(x2[i]), y);
      y = fmaf(w[i].w, to_f(x3[i]), y);
      y = silu(y);
      if (idx >= 2 * kD || qk_writer) {
        const int c = channel(idx, kh, h, j * VC, p.HK);
        cout[c] = x1[i]; cout[C + c] = x2[i]; cout[2 * C + c] = x3[i];
      }
      if (idx < kD) sq[idx] = y;
      else if (idx < 2 * kD) sk[idx - kD] = y;
      else sv[idx - 2 * kD] = y;
    }
  }
  if (zc >= 0) { sz[zc] = to_f(zr); sn[zc] = nr; }
  if (t == NT - 1) {
    sgate[0] = expf(ssm_a * softplus(a_in + dt_b));  // decay
    sgate[1] = 1.0f / (1.0f + expf(-b_in));          // beta
  }
  __syncthreads();

  // ---- 3. L2 norms of q and k and the raw dot k.q: one block reduction ---------------------
  {
    float aq = 0.f, ak = 0.f, aqk = 0.f;
    for (int i = t; i < kD; i += NT) {
      const float qi = sq[i], ki = sk[i];
      aq = fmaf(qi, qi, aq); ak = fmaf(ki, ki, ak); aqk = fmaf(qi, ki, aqk);
    }
    aq = warp_sum(aq); ak = warp_sum(ak); aqk = warp_sum(aqk);
    if (lane == 0) { red3[warp][0] = aq; red3[warp][1] = ak; red3[warp][2] = aqk; }
  }
  __syncthreads();
  float sum_q = 0.f, sum_k = 0.f, sum_qk = 0.f;
#pragma unroll 4
  for (int i = 0; i < NW; ++i) { sum_q += red3[i][0]; sum_k += red3[i][1]; sum_qk += red3[i][2]; }
  const float rq = rsqrtf(sum_q + 1e-6f) * rsqrtf(static_cast<float>(kD));  // q scale incl. 1/sqrt(d)
  const float rk = rsqrtf(sum_k + 1e-6f);
  const float kq = sum_qk * rq * rk;                                        // (normalized k) . (scaled q)
  const float decay = sgate[0], beta = sgate[1];

  // ---- 4. column sums S^T k and S^T q: this thread's rows, then the warp, then the CTA ----
  float4 u = make_float4(0.f, 0.f, 0.f, 0.f), pq = u;
#pragma unroll
  for (int i = 0; i < R; ++i) {
    const float ki = sk[rg + RG * i] * rk, qi = sq[rg + RG * i] * rq;
    u.x = fmaf(s[i].x, ki, u.x); u.y = fmaf(s[i].y, ki, u.y);
    u.z = fmaf(s[i].z, ki, u.z); u.w = fmaf(s[i].w, ki, u.w);
    pq.x = fmaf(s[i].x, qi, pq.x); pq.y = fmaf(s[i].y, qi, pq.y);
    pq.z = fmaf(s[i].z, qi, pq.z); pq.w = fmaf(s[i].w, qi, pq.w);
  }
#pragma unroll
  for (int o = CG; o < 32; o <<= 1) {  // lanes l and l ^ o share a column group
    u.x += __shfl_xor_sync(0xffffffffu, u.x, o); u.y += __shfl_xor_sync(0xffffffffu, u.y, o);
    u.z += __shfl_xor_sync(0xffffffffu, u.z, o); u.w += __shfl_xor_sync(0xffffffffu, u.w, o);
    pq.x += __shfl_xor_sync(0xffffffffu, pq.x, o); pq.y += __shfl_xor_sync(0xffffffffu, pq.y, o);
    pq.z += __shfl_xor_sync(0xffffffffu, pq.z, o); pq.w += __shfl_xor_sync(0xffffffffu, pq.w, o);
  }
  if (lane < CG) {
    *reinterpret_cast<float4*>(&red_u[warp][lane * 4]) = u;
    *reinterpret_cast<float4*>(&red_p[warp][lane * 4]) = pq;
  }
  __syncthreads();
  float o = 0.f;
  if (t < VC) {
    float uu = 0.f, pp = 0.f;
#pragma unroll 4
    for (int g = 0; g < NW; ++g) { uu += red_u[g][t]; pp += red_p[g][t]; }  // fixed order: deterministic
    const float d = beta * (sv[t] - decay * uu);  // delta = beta (v - S'^T k), S' = decay S
    sdelta[t] = d;
    o = fmaf(d, kq, decay * pp);                  // o = decay S^T q + delta (k . q)
    if (NSPLIT == 1) so[t] = o;
  }
  __syncthreads();

  // ---- 5. S_new = decay S + k delta^T, written once (streaming stores) ----------------------
  const float4 dl = *reinterpret_cast<const float4*>(&sdelta[cg * 4]);
  TO* op = static_cast<TO*>(p.out) + bh * kD;
  if (NSPLIT > 1 && warp == 0) {
    // Split: count this CTA in before storing warp 0's share of the state.
    if (lane < VC) __stcg(p.ws_o + bh * kD + j * VC + lane, o);
    __threadfence();  // this lane's o slice is visible device-wide before the count
    __syncwarp();
    int last = 0;
    if (lane == 0) last = atomicAdd(p.ws_cnt + bh, 1) == NSPLIT - 1;
    last = __shfl_sync(0xffffffffu, last, 0);
    float oh[4] = {0.f, 0.f, 0.f, 0.f};
    if (last) {  // the head's last CTA: fetch the whole o row before this warp's state stores
      __threadfence();  // order the count before the reads of the other CTAs' slices
#pragma unroll
      for (int m = 0; m < 4; ++m) oh[m] = __ldcg(p.ws_o + bh * kD + lane + 32 * m);  // L2, not a stale L1 line
    }
#pragma unroll
    for (int i = 0; i < R; ++i) {
      store_row(S, rg + RG * i, s[i], sk[rg + RG * i] * rk, dl, decay);
    }
    if (!last) return;
    finish_head<TO>(oh, sz, sn, op, lane, p.eps);
    if (lane == 0) p.ws_cnt[bh] = 0;  // ready for the next launch (graph replay)
    return;
  }
#pragma unroll
  for (int i = 0; i < R; ++i) {
    store_row(S, rg + RG * i, s[i], sk[rg + RG * i] * rk, dl, decay);
  }
  // ---- 6. head launch: warp 0 applies the output gate from shared memory ------------------
  if (NSPLIT == 1 && warp == 0) {
    float oh[4];
#pragma unroll
    for (int m = 0; m < 4; ++m) oh[m] = so[lane + 32 * m];
    finish_head<TO>(oh, sz, sn, op, lane, p.eps);
  }
}

template <int VC, int NT, int MINB, typename TX, typename TO>
int launch(const Params& p, cudaStream_t stream) {
  const dim3 grid(kD / VC, p.H, p.B);
  deltanet_decode_kernel<VC, NT, MINB, TX, TO><<<grid, NT, 0, stream>>>(p);
  T4_RETURN_LAUNCH_STATUS();
}

// split = CTAs per head. head: 512 threads, 8 rows x float4 each, two CTAs per SM
// (B = 4 keeps all 192 CTAs resident). split 4: 32 columns (128-byte row
// segments) x 256 threads; split 8: 16 columns x 128 threads; 4 rows each.
template <typename TX, typename TO>
int launch_split(const Params& p, int split, cudaStream_t stream) {
  switch (split) {
    case 1: return launch<128, 512, 2, TX, TO>(p, stream);
    case 4: return launch<32, 256, 4, TX, TO>(p, stream);
    case 8: return launch<16, 128, 8, TX, TO>(p, stream);
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
}

}  // namespace

// split = CTAs per value head (1: one CTA per head; 4, 8: split over value
// columns). x_half / out_half select fp16 (1) or fp32 (0) activations / output.
// Head dims are 128 (key and value); H % HK == 0. ws_ss is unused (kept for
// ABI stability); ws_o [B*H*128] and ws_cnt [B*H] (zeroed once) serve the split.
T4_API int t4_deltanet_decode(const void* qkv, const void* z, const void* alpha, const void* beta,
                              const void* conv_in, void* conv_out, float* state, const float* conv_w,
                              const float* ssm_a, const float* dt_bias, const float* ssm_norm, void* out,
                              float* ws_o, float* ws_ss, int* ws_cnt, int B, int H, int HK, int head_order,
                              int split, int x_half, int out_half, float eps, cudaStream_t stream) {
  (void)ws_ss;
  if (B <= 0 || H <= 0 || HK <= 0 || H % HK) return static_cast<int>(cudaErrorInvalidValue);
  if (B > 65535 || H > 65535 || 2LL * HK * 128 + (long long)H * 128 > (1LL << 28))  // 3 C fits an int
    return static_cast<int>(cudaErrorInvalidValue);
  if (split > 1 && (!ws_o || !ws_cnt)) return static_cast<int>(cudaErrorInvalidValue);
  Params p{qkv, z, alpha, beta, conv_in, conv_out, state, conv_w, ssm_a, dt_bias, ssm_norm, out,
           ws_o, ws_cnt, B, H, HK, head_order, eps};
  if (x_half && out_half) return launch_split<half, half>(p, split, stream);
  if (x_half) return launch_split<half, float>(p, split, stream);
  if (out_half) return launch_split<float, half>(p, split, stream);
  return launch_split<float, float>(p, split, stream);
}
