// One GEMV template for every quantized weight format (llama.cpp mmvq style).
//
//   y[m, n] = sum_k x[m, k] * W[n, k]      x: [M, K] fp16 (M = 1..8), W: [N, K] quantized, y: [M, N] fp16
//
// The kernel below knows nothing about a format. A format is a *trait* struct
// with the interface documented here; a family (.cu) defines its traits and
// calls `t4::gemv::launch<Trait>(args, max_ctas, stream)` from its launcher.
// INT4-g{32,64,128} lives in kernels/w4a16.cu; GGUF formats plug in from
// kernels/gguf.cu; FP8 E4M3 (W8A16) the same way.
//
// ---------------------------------------------------------------- trait interface
//
//   struct MyFormat {
//     // K values of one row that one lane consumes per step (a "chunk").
//     // K must be a multiple of it (the host checks before launching).
//     static constexpr int kChunk = 32;
//     // Registers holding one chunk of one row *as loaded* (raw bytes plus
//     // whatever scale the chunk needs). Loading is split from computing so
//     // the kernel can issue U x R independent loads before the first use:
//     // sm_75 has no cp.async, so memory-level parallelism comes from many
//     // loads in flight per thread.
//     struct Frag { ... };
//     // Issue the global loads of chunk `c` of row `n` (no arithmetic).
//     __device__ static void load(Frag& f, const t4::gemv::Weights& w, int n, int c);
//     // acc[r][m] += dot(row rows[r], chunk c, x[m, c*kChunk : (c+1)*kChunk]) for r < R, m < M,
//     // dequantizing f[r] in registers, accumulating in fp32. `x` is the
//     // activation base pointer, `ldx` its row stride in elements. Read each
//     // x value once per chunk and reuse it across the R rows.
//     template <int M, int R>
//     __device__ static void dot(const Frag (&f)[R], const t4::gemv::Weights& w, int c,
//                                const half* __restrict__ x, long long ldx, float (&acc)[R][M]);
//     // Int8-activation traits (opt-in, W4A8 / W8A8 numerics) instead set
//     // `static constexpr bool kInt8X = true;` and take the quantized x (see X8 below):
//     //   template <int M, int R>
//     //   __device__ static void dot(const Frag (&f)[R], const Weights& w, int c, const X8& x, float (&acc)[R][M]);
//     // Optional tuning knobs (t4::gemv::Tuning<Format, M>, defaults below): rows
//     // per warp R, chunks per lane and load stage U, kMinBlocks, and kStages
//     // (register stages of loads), as a function of M.
//   };
//
// `t4::gemv::Weights` carries both layouts the formats need:
//   * separate arrays (INT4, FP8): `data` = packed weights, row n at
//     data + n * row_bytes; `scales` = fp16 scales [N, K / group_size]
//     (group_size == K for per-channel scales); `aux` unused or format-defined.
//   * self-contained blocks (GGUF Q8_0, Q4_K, ...): `data` = rows of
//     contiguous blocks (row_bytes = K / block_values * block_bytes);
//     `scales` = nullptr; `aux` may point at lookup tables (IQ4_NL grid ...).
//
// Work split: a CTA is 4 warps. A warp owns a group of R consecutive rows and
// its lanes stride over the chunks of those rows (lane l takes chunks l,
// l+32*S, ...). When the rows alone cannot fill the GPU (few rows, long K),
// S = 4 warps of one CTA split K of the same row group (intra-CTA split-K) and
// reduce through shared memory in a fixed order. CTAs walk the row groups in
// a grid-stride loop, so any grid size (max_ctas, the occupancy-pacing cap)
// gives bit-identical results: which lane/warp computes which partial sum
// never depends on blockIdx or gridDim. The split S depends only on the
// shape and the SM count.
//
// Numerics: each trait dequantizes to fp16 in registers exactly as its
// Python reference does, forms short fp16 partial dot products (a few
// half2 FMAs) and accumulates them in fp32; the output is rounded once to fp16.
#pragma once
#include <type_traits>

#include "common.cuh"

namespace t4 {
namespace gemv {

// Everything a format needs to find its bytes; see the header comment.
struct Weights {
  const uint8_t* data;      // packed weights or quant blocks, row-major by output row
  const half* scales;       // per-group fp16 scales [N, K / group_size] or nullptr
  const void* aux;          // format-defined (lookup tables) or nullptr
  long long row_bytes;      // bytes from row n to row n + 1 in `data`
  int N, K;                 // output rows, reduction length
  int group_size;           // values per scale (separate-scale formats), else 0
};

// Activations quantized to int8 per block of 32 consecutive values of a row (llama.cpp's q8_1):
// d = max |x| / 127 (fp32), q = rint(x / d), and the block's exact integer sum of q beside d (formats
// with an offset, q_w = u - o, subtract o * sum once per block). Within each 8 values the int8
// bytes are in value order, or in the INT4 word's nibble order (kNibbleOrder below) so that a
// packed INT4 word's low and high nibbles meet their activations in one DP4A each.
struct XBlock {
  float d;
  int sum;
};
constexpr int kXBlock = 32;  // values per XBlock
struct X8 {
  const int8_t* q;          // [M, K] int8, row stride ldq bytes
  const XBlock* s;          // [M, K / 32], row stride lds blocks
  long long ldq, lds;
};

struct Args {
  Weights w;
  X8 x8;                    // int8 activations (kInt8X traits only), else unused
  const half* x;            // [M, K] activations, row stride ldx elements
  long long ldx;
  half* y;                  // [M, N] output, row stride ldy elements
  long long ldy;
  int M;                    // 1..kMaxM
};

// A GEMV over contiguous rows: x (fp16, or its int8 blocks) [M, K] and y [M, N], strides K and N.
inline Args contiguous_args(const Weights& w, const half* x, half* y, int M) {
  Args a{};
  a.w = w;
  a.x = x;
  a.ldx = w.K;
  a.y = y;
  a.ldy = w.N;
  a.M = M;
  return a;
}
inline Args contiguous_args_x8(const Weights& w, const int8_t* xq, const XBlock* xs, half* y, int M) {
  Args a = contiguous_args(w, nullptr, y, M);
  a.x8 = X8{xq, xs, w.K, w.K / kXBlock};
  return a;
}

constexpr int kMaxM = 8;
constexpr int kWarps = 4;   // warps per CTA
constexpr int kThreads = 32 * kWarps;

// Default tuning: rows per warp R and chunks in flight per lane U. More rows
// per warp reuse each x load across rows (x traffic grows with M); U x R
// independent loads per lane hide DRAM latency without cp.async.
// kMinBlocks feeds __launch_bounds__: 8 CTAs (32 warps) per SM caps registers at 64.
// kStages (optional, default 1; kPipe = true means 2): rotate ST register stages
// of U x R chunks, so the next ST - 1 stages are in flight while one is
// dequantized and multiplied. Each warp then always has loads outstanding,
// instead of alternating between waiting and computing; it pays off where
// dequantization is a large part of a chunk's time (INT4, measured), at ST
// times the registers of one stage.
template <class F, int M>
struct Tuning {
  static constexpr int R = 2;
  static constexpr int U = M == 1 ? 4 : 2;
  static constexpr int kMinBlocks = M <= 2 ? 8 : (M <= 4 ? 5 : 4);
};

// Register stages of loads: Tuning::kStages if given, else 2 with kPipe, else 1.
template <class T, class = void>
struct PipeOf : std::false_type {};
template <class T>
struct PipeOf<T, std::void_t<decltype(T::kPipe)>> : std::bool_constant<T::kPipe> {};
template <class T, class = void>
struct StagesOf : std::integral_constant<int, PipeOf<T>::value ? 2 : 1> {};
template <class T>
struct StagesOf<T, std::void_t<decltype(T::kStages)>> : std::integral_constant<int, T::kStages> {};

// Issue the loads of the U chunks c0, c0 + step, ... of the R rows (no arithmetic).
template <class F, int R, int U>
__device__ __forceinline__ void load_chunks(typename F::Frag (&f)[U][R], const Weights& w, const int (&rows)[R],
                                            int c0, int step, int n_chunks) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int c = c0 + u * step;
    if (c < n_chunks) {
#pragma unroll
      for (int r = 0; r < R; ++r) F::load(f[u][r], w, rows[r], c);
    }
  }
}

// Traits that take int8 activations (kInt8X = true).
template <class T, class = void>
struct TakesX8 : std::false_type {};
template <class T>
struct TakesX8<T, std::void_t<decltype(T::kInt8X)>> : std::bool_constant<T::kInt8X> {};

template <class F, int M, int R, int U>
__device__ __forceinline__ void dot_chunks(const typename F::Frag (&f)[U][R], const Args& a, int c0, int step,
                                           int n_chunks, float (&acc)[R][M]) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int c = c0 + u * step;
    if (c >= n_chunks) continue;
    if constexpr (TakesX8<F>::value) F::template dot<M, R>(f[u], a.w, c, a.x8, acc);
    else F::template dot<M, R>(f[u], a.w, c, a.x, a.ldx, acc);
  }
}

template <class F, int M, int R, int U, int S>
__global__ void __launch_bounds__(kThreads, Tuning<F, M>::kMinBlocks) gemv_kernel(Args a) {
  static_assert(kWarps % S == 0, "split must divide the warps of a CTA");
  static_assert(R * M <= 32, "one lane stores each of the R x M outputs of a warp");
  constexpr int kGroupsPerCta = kWarps / S;
  __shared__ float red[kGroupsPerCta][S > 1 ? S : 1][R][M];  // per row group of the CTA, per K slice

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int ks = warp % S;                    // which K slice this warp takes
  const int n_chunks = a.w.K / F::kChunk;
  const int n_groups = (a.w.N + R - 1) / R;
  const int n_tasks = (n_groups + kGroupsPerCta - 1) / kGroupsPerCta;

  for (int task = blockIdx.x; task < n_tasks; task += gridDim.x) {  // uniform across the CTA
    const int group = task * kGroupsPerCta + warp / S;
    const int row0 = group * R;
    // Rows past N (last group) load row N-1 and are never stored.
    int rows[R];
#pragma unroll
    for (int r = 0; r < R; ++r) rows[r] = min(row0 + r, a.w.N - 1);
    const bool live = group < n_groups;

    float acc[R][M];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int m = 0; m < M; ++m) acc[r][m] = 0.f;

    // Lane l of K slice ks takes chunks l + 32 ks, then every 32 S-th; U of them per stage.
    // With ST register stages, stage b + ST - 1 is loading while stage b computes, so
    // (ST - 1) / ST of the fragment registers hold loads in flight at any time.
    constexpr int kStep = 32 * S, kStage = kStep * U, ST = StagesOf<Tuning<F, M>>::value;
    if (live && ST == 1) {
      for (int c0 = lane + 32 * ks; c0 < n_chunks; c0 += kStage) {
        typename F::Frag f[U][R];
        load_chunks<F, R, U>(f, a.w, rows, c0, kStep, n_chunks);  // all loads first: U x R in flight
        dot_chunks<F, M, R, U>(f, a, c0, kStep, n_chunks, acc);
      }
    } else if (live) {
      typename F::Frag f[ST][U][R];
      const int c_first = lane + 32 * ks;
#pragma unroll
      for (int b = 0; b + 1 < ST; ++b) load_chunks<F, R, U>(f[b], a.w, rows, c_first + b * kStage, kStep, n_chunks);
      for (int c0 = c_first; c0 < n_chunks; c0 += ST * kStage) {
#pragma unroll
        for (int b = 0; b < ST; ++b) {  // buffer indices are compile-time after unrolling
          const int c = c0 + b * kStage;
          if (c >= n_chunks) break;
          load_chunks<F, R, U>(f[(b + ST - 1) % ST], a.w, rows, c + (ST - 1) * kStage, kStep, n_chunks);
          dot_chunks<F, M, R, U>(f[b], a, c, kStep, n_chunks, acc);
        }
      }
    }
    // Butterfly reduction over the 32 lanes: fixed order, every lane ends with the sum.
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int m = 0; m < M; ++m)
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) acc[r][m] += __shfl_xor_sync(0xffffffffu, acc[r][m], off);

    if (S > 1) {  // intra-CTA split-K: slice partials summed in slice order 0..S-1
      if (lane == 0) {
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
          for (int m = 0; m < M; ++m) red[warp / S][ks][r][m] = acc[r][m];
      }
      __syncthreads();
      if (ks == 0 && lane < R * M) {
        const int r = lane / M, m = lane % M;
        float s = 0.f;
#pragma unroll
        for (int k = 0; k < S; ++k) s += red[warp / S][k][r][m];
        const int n = row0 + r;
        if (live && n < a.w.N && m < a.M) a.y[m * a.ldy + n] = __float2half_rn(s);
      }
      __syncthreads();  // red is reused by the next task
    } else if (live && lane < R * M) {
      const int r = lane / M, m = lane % M;
      float s = 0.f;
#pragma unroll
      for (int rr = 0; rr < R; ++rr)          // select acc[r][m] without dynamic register indexing
#pragma unroll
        for (int mm = 0; mm < M; ++mm) s = (rr == r && mm == m) ? acc[rr][mm] : s;
      const int n = row0 + r;
      if (n < a.w.N && m < a.M) a.y[m * a.ldy + n] = __float2half_rn(s);
    }
  }
}

// Split chosen from the shape and SM count only (never from max_ctas).
inline int choose_split(int n_groups, int n_chunks, int sms) {
  const int warps_wanted = sms * 16;         // half of an SM's 32 resident warps at 128 threads x 64 regs
  if (n_groups >= warps_wanted) return 1;
  if (n_chunks < 4 * 32) return 1;           // a K slice would leave lanes idle
  return 4;
}

template <class F, int M, int S>
inline int launch_ms(const Args& a, int max_ctas, cudaStream_t stream) {
  using T = Tuning<F, M>;
  constexpr int R = T::R, U = T::U;
  const int n_groups = (a.w.N + R - 1) / R;
  const int n_tasks = (n_groups + kWarps / S - 1) / (kWarps / S);
  int dev = 0, sms = 1, per_sm = 1;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, gemv_kernel<F, M, R, U, S>, kThreads, 0);
  if (per_sm < 1) per_sm = 1;
  int grid = n_tasks < sms * per_sm ? n_tasks : sms * per_sm;  // persistent: at most one resident wave
  if (max_ctas > 0 && grid > max_ctas) grid = max_ctas;
  if (grid < 1) grid = 1;
  gemv_kernel<F, M, R, U, S><<<grid, kThreads, 0, stream>>>(a);
  return static_cast<int>(cudaGetLastError());
}

template <class F, int M>
inline int launch_m(const Args& a, int max_ctas, cudaStream_t stream) {
  using T = Tuning<F, M>;
  int dev = 0, sms = 1;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  const int split = choose_split((a.w.N + T::R - 1) / T::R, a.w.K / F::kChunk, sms);
  return split == 1 ? launch_ms<F, M, 1>(a, max_ctas, stream) : launch_ms<F, M, 4>(a, max_ctas, stream);
}

// Host switch from the runtime M to the template. Returns a cudaError_t as int
// (cudaErrorInvalidValue for M outside 1..kMaxM or K not a multiple of kChunk).
template <class F>
inline int launch(const Args& a, int max_ctas, cudaStream_t stream) {
  if (a.w.N <= 0 || a.M <= 0) return 0;
  if (a.M > kMaxM || a.w.K <= 0 || a.w.K % F::kChunk) return static_cast<int>(cudaErrorInvalidValue);
  switch (a.M) {
    case 1: return launch_m<F, 1>(a, max_ctas, stream);
    case 2: return launch_m<F, 2>(a, max_ctas, stream);
    case 3: return launch_m<F, 3>(a, max_ctas, stream);
    case 4: return launch_m<F, 4>(a, max_ctas, stream);
    case 5: return launch_m<F, 5>(a, max_ctas, stream);
    case 6: return launch_m<F, 6>(a, max_ctas, stream);
    case 7: return launch_m<F, 7>(a, max_ctas, stream);
    default: return launch_m<F, 8>(a, max_ctas, stream);
  }
}

// ---------------------------------------------------------------- shared trait helpers

// 16-byte read-only load (the unit every trait should use for weights).
__device__ __forceinline__ uint4 ldg16(const void* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }

// acc += dot(w[0..7], x[0..7]) for 8 fp16 weights (4 half2) against 8 fp16
// activations (one uint4): 4 chained half2 FMAs, then the two lanes of the
// half2 partial are widened and added in fp32. Worst-case rounding: the fp16
// products and 3 fp16 additions, i.e. <= 4 * 2^-11 of sum |w x| per 8 values.
__device__ __forceinline__ float dot8(const half2 (&w)[4], uint4 xv, float acc) {
  half2 p = __hmul2(w[0], as_half2(xv.x));
  p = __hfma2(w[1], as_half2(xv.y), p);
  p = __hfma2(w[2], as_half2(xv.z), p);
  p = __hfma2(w[3], as_half2(xv.w), p);
  const float2 f = __half22float2(p);
  return acc + (f.x + f.y);
}


// ---------------------------------------------------------------- int8 activations: quantization


// Byte position of value j (0..7) of a group of 8 in the INT4 word's nibble order. The word holds
// values 0..7 in nibble slots 0,4,1,5,2,6,3,7 (t4lib/ops/int4/reference.py), so its low nibbles are
// values (0, 4, 1, 5) and its high nibbles (2, 6, 3, 7): the bytes go [x0 x4 x1 x5 | x2 x6 x3 x7].
__host__ __device__ constexpr int nibble_pos(int j) { return j < 4 ? 2 * j : 2 * (j - 4) + 1; }

// One warp per block of 32 values: amax by butterfly, d = amax / 127 (IEEE division), q = rint(x / d)
// (round half to even), sum of q. Grid-stride over the M * K / 32 blocks: any grid, same bytes.
template <bool kNibbleOrder>
__global__ void __launch_bounds__(256) quantize_x8_kernel(const half* __restrict__ x, long long ldx,
                                                          int8_t* __restrict__ q_out, XBlock* __restrict__ s_out,
                                                          int M, int K) {
  const int lane = threadIdx.x & 31, per_row = K / kXBlock;
  const long long n_blocks = (long long)M * per_row;
  for (long long b = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); b < n_blocks;
       b += (long long)gridDim.x * (blockDim.x >> 5)) {
    const int m = static_cast<int>(b / per_row), kb = static_cast<int>(b % per_row);
    const float v = __half2float(x[m * ldx + (long long)kb * kXBlock + lane]);
    float amax = fabsf(v);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    const float d = amax / 127.f;
    const int q = amax == 0.f ? 0 : __float2int_rn(v / d);
    int sum = q;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    const int pos = kNibbleOrder ? (lane & ~7) + nibble_pos(lane & 7) : lane;
    q_out[(long long)m * K + (long long)kb * kXBlock + pos] = static_cast<int8_t>(q);
    if (lane == 0) s_out[(long long)m * per_row + kb] = XBlock{d, sum};
  }
}

// x [M, K] fp16 (row stride ldx) -> q [M, K] int8, s [M, K / 32] (dense rows); K % 32 == 0.
// Returns a cudaError_t as int.
inline int quantize_x8(const half* x, long long ldx, int8_t* q, XBlock* s, int M, int K, bool nibble_order,
                       int max_ctas, cudaStream_t stream) {
  if (M <= 0) return 0;
  if (K <= 0 || K % kXBlock) return static_cast<int>(cudaErrorInvalidValue);
  constexpr int kWarpsPerCta = 8;
  long long grid = ((long long)M * (K / kXBlock) + kWarpsPerCta - 1) / kWarpsPerCta;
  if (grid > 65535) grid = 65535;
  if (max_ctas > 0 && grid > max_ctas) grid = max_ctas;
  if (nibble_order)
    quantize_x8_kernel<true><<<(int)grid, 32 * kWarpsPerCta, 0, stream>>>(x, ldx, q, s, M, K);
  else
    quantize_x8_kernel<false><<<(int)grid, 32 * kWarpsPerCta, 0, stream>>>(x, ldx, q, s, M, K);
  return static_cast<int>(cudaGetLastError());
}

// The int8 x of chunk c (32 values, two 16-byte loads) of row m, and its block.
__device__ __forceinline__ void x8_chunk32(const X8& x, int m, int c, int (&q)[8], XBlock& blk) {
  const int8_t* p = x.q + m * x.ldq + (long long)c * kXBlock;
  const uint4 a = ldg16(p), b = ldg16(p + 16);
  q[0] = (int)a.x; q[1] = (int)a.y; q[2] = (int)a.z; q[3] = (int)a.w;
  q[4] = (int)b.x; q[5] = (int)b.y; q[6] = (int)b.z; q[7] = (int)b.w;
  const int2 s = __ldg(reinterpret_cast<const int2*>(x.s + m * x.lds + c));
  blk = XBlock{__int_as_float(s.x), s.y};
}

}  // namespace gemv
}  // namespace t4
