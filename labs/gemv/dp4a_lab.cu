// The library's INT4-g128 weights against activations quantized to int8 (W4A8), dot products by
// DP4A as llama.cpp's mmvq does, through the library's GEMV template, for labs/gemv/dp4a_lab.py
// (not part of the library). The question: with about 5 instructions per 8 weights instead of the
// library's 28.5, how close does M = 1 come to copy bandwidth, and at what error?
//
// x quantization (one warp per block of 32 values, as llama.cpp's q8_1): d = max |x| / 127,
// xq = rint(x / d) in int8, stored per packed word in the weight's nibble order: the word's low
// nibbles are values (0, 4, 1, 5) and its high nibbles (2, 6, 3, 7), so xq bytes go
// [x0 x4 x1 x5 | x2 x6 x3 x7]. Beside each block: (d, 8 d sum xq).
// Dot: u = (nibbles ^ 8) = q + 8 in [0, 15], so sum q xq = dp4a(u, xq) - 8 sum xq, and
// y += s_w (d dp4a-sum - 8 d sum xq) per 32-value chunk, in fp32.
// GGUF Q8_0 in the library's GEMV layout (PQ8_0) the same way: its int8 quants meet x's int8 directly
// (x in value order), y += d_w d_x dp4a-sum per 32-value block.
#include "w4a16.cu"
#include "gguf_blocks.cuh"
#include "gguf_gemv_fp16.cuh"
#include "gguf_gemv_int8.cuh"
#include "lab_tuning.cuh"

namespace {
constexpr int kBlock = 32;

// kPermute: bytes in the INT4 word's nibble order (see the top), else in value order.
template <bool kPermute>
__global__ void quantize_q8_kernel(const half* __restrict__ x, int8_t* __restrict__ xq, float2* __restrict__ ds, int K) {
  const int lane = threadIdx.x & 31;
  for (int b = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); b < K / kBlock;
       b += gridDim.x * (blockDim.x >> 5)) {
    const float v = __half2float(x[b * kBlock + lane]);
    float amax = fabsf(v);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    const float d = amax / 127.f;
    const int q = amax == 0.f ? 0 : __float2int_rn(v / d);
    int sum = q;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    const int j = lane & 7;                        // value j of its packed word -> byte position
    const int pos = kPermute ? (j < 4 ? 2 * j : 2 * (j - 4) + 1) : j;
    xq[b * kBlock + (lane & ~7) + pos] = static_cast<int8_t>(q);
    if (lane == 0) ds[b] = make_float2(d, 8.f * d * static_cast<float>(sum));
  }
}

// The library's Int4G loads; dot on int8 activations. x = xq (int8, cast), aux = the (d, 8 d sum) pairs.
struct Int4Q8 : Int4G {
  template <int M, int R>
  __device__ __forceinline__ static void dot(const Frag (&f)[R], const Weights& w, int c, const half* __restrict__ x,
                                             long long ldx, float (&acc)[R][M]) {
    static_assert(M == 1, "the lab quantizes one row of x");
    const int8_t* xq = reinterpret_cast<const int8_t*>(x) + (long long)c * kChunk;
    const uint4 xa = t4::gemv::ldg16(xq), xb = t4::gemv::ldg16(xq + 16);
    const float2 ds = __ldg(static_cast<const float2*>(w.aux) + c);
    const int xw[8] = {(int)xa.x, (int)xa.y, (int)xa.z, (int)xa.w, (int)xb.x, (int)xb.y, (int)xb.z, (int)xb.w};
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const uint32_t* q = reinterpret_cast<const uint32_t*>(&f[r].q);
      int isum = 0;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int lo = (int)t4::lop3<0x6A>(q[j], 0x0F0F0F0Fu, 0x08080808u);       // (q & m) ^ 8: q + 8
        const int hi = (int)t4::lop3<0x6A>(q[j] >> 4, 0x0F0F0F0Fu, 0x08080808u);
        isum = __dp4a(lo, xw[2 * j], isum);
        isum = __dp4a(hi, xw[2 * j + 1], isum);
      }
      acc[r][0] = fmaf(__half2float(f[r].s), fmaf(ds.x, static_cast<float>(isum), -ds.y), acc[r][0]);
    }
  }
};

// PQ8_0's loads (4 planes of 16 quants, the two blocks' fp16 d); dot on int8 x in value order, aux = (d, -).
struct PQ8_0Q8 : t4::gguf::gv::PQ8_0 {
  template <int M, int R>
  __device__ __forceinline__ static void dot(const Frag (&f)[R], const Weights& w, int c, const half* __restrict__ x,
                                             long long ldx, float (&acc)[R][M]) {
    static_assert(M == 1, "the lab quantizes one row of x");
    const int8_t* xq = reinterpret_cast<const int8_t*>(x) + (long long)c * kChunk;
    uint4 xv[4];
#pragma unroll
    for (int p = 0; p < 4; ++p) xv[p] = t4::gemv::ldg16(xq + 16 * p);
    const float2* ds = static_cast<const float2*>(w.aux) + 2 * c;
    const float dx0 = __ldg(&ds[0].x), dx1 = __ldg(&ds[1].x);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      int isum[2] = {0, 0};
#pragma unroll
      for (int p = 0; p < 4; ++p) {  // plane p = values 16p..16p+15: block p / 2
        const uint4 q = f[r].q[p];
        int& s = isum[p >> 1];
        s = __dp4a((int)q.x, (int)xv[p].x, s);
        s = __dp4a((int)q.y, (int)xv[p].y, s);
        s = __dp4a((int)q.z, (int)xv[p].z, s);
        s = __dp4a((int)q.w, (int)xv[p].w, s);
      }
      const float d0 = t4::gguf::gv::h2f(f[r].d), d1 = t4::gguf::gv::h2f(f[r].d >> 16);
      acc[r][0] = fmaf(d0 * dx0, static_cast<float>(isum[0]), fmaf(d1 * dx1, static_cast<float>(isum[1]), acc[r][0]));
    }
  }
};

}  // namespace

// Launch knobs through lab::Tuned (lab_tuning.cuh): R rows per warp, U chunks per stage, P two register stages,
// MB CTAs per SM at least.
template <int R, int U, bool P, int MB>
using Q8Tuned = lab::Tuned<Int4Q8, R, U, P, MB>;
template <int R, int U, bool P, int MB>
using Q80Tuned = lab::Tuned<PQ8_0Q8, R, U, P, MB>;

// x [K] fp16 -> xq [K] int8 (permute: in the INT4 word order, else in value order), ds [K / 32]
// (d, 8 d sum). K % 32 == 0.
T4_API int dp4a_lab_quantize(const void* x, void* xq, void* ds, int K, int permute, cudaStream_t st) {
  const int blocks = K / kBlock, warps = 8, grid = (blocks + warps - 1) / warps;
  if (permute)
    quantize_q8_kernel<true><<<grid, 32 * warps, 0, st>>>(static_cast<const half*>(x), static_cast<int8_t*>(xq),
                                                          static_cast<float2*>(ds), K);
  else
    quantize_q8_kernel<false><<<grid, 32 * warps, 0, st>>>(static_cast<const half*>(x), static_cast<int8_t*>(xq),
                                                           static_cast<float2*>(ds), K);
  T4_RETURN_LAUNCH_STATUS();
}

// y[1, N] from Q8_0 weights in the library's GEMV layout (pack_for_gemv) and the value-order int8 x.
T4_API int dp4a_lab_q8_0(int v, const void* packed, const void* xq, const void* ds, void* y, int N, int K,
                         cudaStream_t st) {
  t4::gemv::Args a = lab::block_args(packed, 0, xq, y, 1, N, K);
  a.w.aux = ds;
  switch (v) {
    case 0: return t4::gemv::launch_m<Q80Tuned<4, 1, false, 4>, 1>(a, 0, st);  // the library's Q8_0 knobs
    case 1: return t4::gemv::launch_m<Q80Tuned<2, 1, false, 6>, 1>(a, 0, st);
    case 2: return t4::gemv::launch_m<Q80Tuned<2, 2, false, 4>, 1>(a, 0, st);
    case 3: return t4::gemv::launch_m<Q80Tuned<2, 1, true, 4>, 1>(a, 0, st);
    case 4: return t4::gemv::launch_m<Q80Tuned<4, 1, false, 3>, 1>(a, 0, st);
    case 5: return t4::gemv::launch_m<Q80Tuned<1, 2, false, 6>, 1>(a, 0, st);
    default: return -2;
  }
}

// y[1, N] = dequant(W) . x~ with x~ the int8 activations of dp4a_lab_quantize. Variants: launch knobs
// (R rows per warp, U chunks per stage, pipe, MB CTAs per SM at least). -2 for an unknown variant.
T4_API int dp4a_lab_gemv(int v, const void* qw, const void* sc, const void* xq, const void* ds, void* y, int N, int K,
                         cudaStream_t st) {
  t4::gemv::Args a = lab::int4_args(qw, sc, xq, y, N, K);
  a.w.aux = ds;
  switch (v) {
    case 0: return t4::gemv::launch_m<Q8Tuned<2, 2, true, 4>, 1>(a, 0, st);  // the library's INT4 knobs
    case 1: return t4::gemv::launch_m<Q8Tuned<2, 4, false, 8>, 1>(a, 0, st);
    case 2: return t4::gemv::launch_m<Q8Tuned<4, 2, false, 8>, 1>(a, 0, st);
    case 3: return t4::gemv::launch_m<Q8Tuned<2, 2, true, 6>, 1>(a, 0, st);
    case 4: return t4::gemv::launch_m<Q8Tuned<4, 2, true, 4>, 1>(a, 0, st);
    case 5: return t4::gemv::launch_m<Q8Tuned<2, 4, true, 4>, 1>(a, 0, st);
    case 6: return t4::gemv::launch_m<Q8Tuned<4, 4, false, 4>, 1>(a, 0, st);
    case 7: return t4::gemv::launch_m<Q8Tuned<2, 2, false, 8>, 1>(a, 0, st);
    default: return -2;
  }
}
