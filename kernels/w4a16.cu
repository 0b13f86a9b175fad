// W4A16: weight-only signed INT4 with fp16 per-group scales (group 32/64/128 along K).
//
// Format (packed in Python, t4lib/quant/w4a16.py):
//   qweight [N, K/8] int32: word (n, j) holds W[n, 8j .. 8j+7] in the LOP3 nibble
//           order of t4lib/ops/int4/reference.py (values v0..v7 in slots 0,4,1,5,2,6,3,7)
//   scales  [N, K/group_size] fp16;  W_deq[n, k] = fp16(q[n, k] * scales[n, k / group_size])
//
// Two kernels:
//   * GEMV (M = 1..8, decode): the format trait `Int4G` below plugged into the
//     one template of gemv.cuh: each weight byte read once with 16-byte loads,
//     dequantized in registers, fp32 accumulation.
//   * GEMM (any M, prefill): WMMA m16n16k16 fp16 tensor cores, fp32
//     accumulators. Each k-step dequantizes a 64 x 128 weight tile into shared
//     memory; global loads are synchronous (sm_75 has no cp.async) and
//     software-pipelined through registers (next tile's loads are issued
//     before the current tile's MMAs). Shared-memory rows are skewed by 16
//     bytes (row stride 272 B): WMMA's load_matrix_sync needs one constant
//     leading dimension, which an XOR swizzle of 16-byte chunks would break;
//     the skew gives the same bank-conflict-free 16-byte stores and fragment
//     loads (8 consecutive rows hit 8 disjoint 4-bank groups).
//     Split-K (chosen from the shape and SM count only) writes fp32 partials
//     to a workspace that a second kernel sums in split order.
// Every kernel walks its work items in a grid-stride loop: results are
// bit-identical for any grid cap (max_ctas, occupancy pacing).
#include <mma.h>

#include "gemv.cuh"

// t4lib:hot gemv_kernel w4a16_gemm_kernel

namespace {

using t4::gemv::Weights;

// ---------------------------------------------------------------- GEMV trait

// INT4, 32 values (one 16-byte load = 4 packed words) per chunk, one fp16 scale per chunk
// (group sizes are multiples of 32, so a chunk never straddles two groups).
struct Int4G {
  static constexpr int kChunk = 32;
  struct Frag {
    uint4 q;
    half s;
  };
  __device__ __forceinline__ static void load(Frag& f, const Weights& w, int n, int c) {
    f.q = t4::gemv::ldg16(w.data + (long long)n * w.row_bytes + (long long)c * 16);
    const int gshift = __ffs(w.group_size) - 1;  // group_size is a power of two (host-checked)
    f.s = __ldg(w.scales + (long long)n * (w.K >> gshift) + ((c * kChunk) >> gshift));
  }
  // acc[r][m] += chunk c of row r . x[m, chunk]; xv(m, j) yields word j (8 values) of row m of x.
  template <int M, int R, class XV>
  __device__ __forceinline__ static void dot_with(const Frag (&f)[R], XV xv, float (&acc)[R][M]) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {  // word j = values 8j..8j+7 of the chunk
      half2 wv[R][4];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        t4::dequant_int4x8(reinterpret_cast<const uint32_t*>(&f[r].q)[j], wv[r]);  // exact integers as fp16 pairs
        const half2 s2 = __half2half2(f[r].s);
#pragma unroll
        for (int i = 0; i < 4; ++i) wv[r][i] = __hmul2(wv[r][i], s2);  // = reference fp16(q * s)
      }
#pragma unroll
      for (int m = 0; m < M; ++m) {  // each x value read once, reused by the R rows
        const uint4 x8 = xv(m, j);
#pragma unroll
        for (int r = 0; r < R; ++r) acc[r][m] = t4::gemv::dot8(wv[r], x8, acc[r][m]);
      }
    }
  }
  template <int M, int R>
  __device__ __forceinline__ static void dot(const Frag (&f)[R], const Weights& w, int c,
                                             const half* __restrict__ x, long long ldx, float (&acc)[R][M]) {
    dot_with<M, R>(f, [&](int m, int j) { return t4::gemv::ldg16(x + m * ldx + (long long)c * kChunk + 8 * j); },
                   acc);
  }
};

// W4A8 (opt-in): the same weights and loads against int8 activations in the word's nibble order
// (gemv.cuh, X8). Per chunk: u = (nibbles ^ 8) = q + 8 in 0..15 as bytes, so
// sum q * xq = dp4a(u_lo, xq[0..3]) + dp4a(u_hi, xq[4..7]) + ... - 8 * sum xq, an exact integer;
// y += s * (d * that) in fp32. About 5 instructions per 8 weights against Int4G's 28.
struct Int4X8 : Int4G {
  static constexpr bool kInt8X = true;
  template <int M, int R>
  __device__ __forceinline__ static void dot(const Frag (&f)[R], const Weights&, int c, const t4::gemv::X8& x,
                                             float (&acc)[R][M]) {
    int u[R][8];  // bytes q + 8: words 2j (low nibbles of word j) and 2j + 1 (high nibbles)
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const uint32_t* q = reinterpret_cast<const uint32_t*>(&f[r].q);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        u[r][2 * j] = (int)t4::lop3<0x6A>(q[j], 0x0F0F0F0Fu, 0x08080808u);  // (q & m) ^ 8
        u[r][2 * j + 1] = (int)t4::lop3<0x6A>(q[j] >> 4, 0x0F0F0F0Fu, 0x08080808u);
      }
    }
#pragma unroll
    for (int m = 0; m < M; ++m) {
      int xq[8];
      t4::gemv::XBlock blk;
      t4::gemv::x8_chunk32(x, m, c, xq, blk);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        int isum = 0;
#pragma unroll
        for (int i = 0; i < 8; ++i) isum = __dp4a(u[r][i], xq[i], isum);
        acc[r][m] = fmaf(__half2float(f[r].s) * blk.d, static_cast<float>(isum - 8 * blk.sum), acc[r][m]);
      }
    }
  }
};

}  // namespace

namespace t4 {
namespace gemv {
// M = 1: 2 rows x 2 chunks per load stage, two stages in registers (kPipe), up to
// 128 registers. Against one stage of 2 x 4 chunks at 64 registers this took
// 5120x17408 from 23.3 to 21.6 us and 17408x5120 from 26.4 to 21.3 us on an H200
// (a read-only kernel with the same loads takes 14 us: dequantization and the
// dot products, not the loads, are what is left). Larger M: the defaults.
template <int M>
struct Tuning<Int4G, M> {
  static constexpr int R = 2;
  static constexpr int U = 2;
  static constexpr bool kPipe = M == 1;
  static constexpr int kMinBlocks = M == 1 ? 4 : (M <= 2 ? 8 : (M <= 4 ? 5 : 4));
};
// W4A8: M = 1 one stage of 2 rows x 2 chunks at 8 CTAs per SM (64 registers): the fastest of 8
// launch shapes at 5 of 7 shapes on an H200 (results/nvidia-h200/dp4a_lab.json). Larger M: defaults.
template <int M>
struct Tuning<Int4X8, M> {
  static constexpr int R = 2;
  static constexpr int U = 2;
  static constexpr int kMinBlocks = M <= 2 ? 8 : (M <= 4 ? 5 : 4);
};
}  // namespace gemv
}  // namespace t4

namespace {

// ---------------------------------------------------------------- WMMA GEMM

namespace wmma = nvcuda::wmma;

constexpr int kBN = 64, kBK = 128, kSkew = 8, kLd = kBK + kSkew;  // kLd: smem row stride in halves
constexpr int kGemmThreads = 128;                                  // 4 warps, warp w owns columns 16w..16w+15
constexpr int kCLd = kBN + 4;                                      // fp32 epilogue tile stride

template <int BM>
struct GemmSmem {
  union {
    struct {
      half a[BM][kLd];    // x tile      [BM, BK]
      half b[kBN][kLd];   // W_deq tile  [BN, BK] (= B col-major)
    } in;
    float c[BM][kCLd];    // epilogue staging
  };
};

// Raw global data of one k-tile held in registers (the software pipeline stage).
template <int BM>
struct Stage {
  static constexpr int kAChunks = BM * (kBK / 8) / kGemmThreads;   // 16-byte x chunks per thread
  static constexpr int kBChunks = kBN * (kBK / 32) / kGemmThreads;  // 16-byte weight chunks per thread (2)
  uint4 a[kAChunks];
  uint4 b[kBChunks];
  half s[kBChunks];
};

template <int BM>
__device__ __forceinline__ void load_stage(Stage<BM>& st, const half* __restrict__ x, const uint8_t* __restrict__ qw,
                                           const half* __restrict__ scales, int M, int N, int K, int gshift,
                                           int m0, int n0, int k0) {
  const int t = threadIdx.x;
#pragma unroll
  for (int i = 0; i < Stage<BM>::kAChunks; ++i) {
    const int idx = t + i * kGemmThreads, row = idx / (kBK / 8), col = (idx % (kBK / 8)) * 8;
    const int m = m0 + row, k = k0 + col;
    st.a[i] = (m < M && k < K) ? t4::gemv::ldg16(x + (long long)m * K + k) : make_uint4(0, 0, 0, 0);
  }
#pragma unroll
  for (int i = 0; i < Stage<BM>::kBChunks; ++i) {
    const int idx = t + i * kGemmThreads, row = idx / (kBK / 32), col = (idx % (kBK / 32)) * 32;
    const int n = n0 + row, k = k0 + col;
    const bool ok = n < N && k < K;
    st.b[i] = ok ? t4::gemv::ldg16(qw + (long long)n * (K / 2) + k / 2) : make_uint4(0, 0, 0, 0);
    st.s[i] = ok ? __ldg(scales + (long long)n * (K >> gshift) + (k >> gshift)) : __float2half(0.f);
  }
}

template <int BM>
__device__ __forceinline__ void store_stage(const Stage<BM>& st, GemmSmem<BM>& sm) {
  const int t = threadIdx.x;
#pragma unroll
  for (int i = 0; i < Stage<BM>::kAChunks; ++i) {
    const int idx = t + i * kGemmThreads, row = idx / (kBK / 8), col = (idx % (kBK / 8)) * 8;
    *reinterpret_cast<uint4*>(&sm.in.a[row][col]) = st.a[i];
  }
#pragma unroll
  for (int i = 0; i < Stage<BM>::kBChunks; ++i) {
    const int idx = t + i * kGemmThreads, row = idx / (kBK / 32), col = (idx % (kBK / 32)) * 32;
    const uint32_t* q = reinterpret_cast<const uint32_t*>(&st.b[i]);
    const half2 s2 = __half2half2(st.s[i]);
#pragma unroll
    for (int j = 0; j < 4; ++j) {  // dequantize in registers, one 16-byte store per 8 values
      half2 h[4];
      t4::dequant_int4x8(q[j], h);
#pragma unroll
      for (int p = 0; p < 4; ++p) h[p] = __hmul2(h[p], s2);  // fp16(q * s): same rounding as the reference
      *reinterpret_cast<uint4*>(&sm.in.b[row][col + 8 * j]) =
          make_uint4(t4::as_u32(h[0]), t4::as_u32(h[1]), t4::as_u32(h[2]), t4::as_u32(h[3]));
    }
  }
}

// y[M, N] (or fp32 partials ws[split, M, N]) = x[M, K] @ W_deq[N, K]^T.
// Work item = (m tile, n tile, k split); k-tiles [kt0, kt1) of the split.
template <int BM>
__global__ void __launch_bounds__(kGemmThreads) w4a16_gemm_kernel(const half* __restrict__ x,
                                                                  const uint8_t* __restrict__ qw,
                                                                  const half* __restrict__ scales,
                                                                  half* __restrict__ y, float* __restrict__ ws,
                                                                  int M, int N, int K, int gshift, int splits) {
  __shared__ __align__(128) GemmSmem<BM> sm;
  constexpr int kFrags = BM / 16;
  const int warp = threadIdx.x >> 5;
  const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + kBN - 1) / kBN;
  const int k_tiles = (K + kBK - 1) / kBK;
  const int per_split = (k_tiles + splits - 1) / splits;
  const long long n_items = (long long)tiles_m * tiles_n * splits;

  for (long long item = blockIdx.x; item < n_items; item += gridDim.x) {
    const int split = (int)(item % splits);
    const long long tile = item / splits;
    const int m0 = (int)(tile % tiles_m) * BM, n0 = (int)(tile / tiles_m) * kBN;  // m fastest: W tile reuse in L2
    const int kt0 = split * per_split, kt1 = min(k_tiles, kt0 + per_split);

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[kFrags];
#pragma unroll
    for (int f = 0; f < kFrags; ++f) wmma::fill_fragment(acc[f], 0.f);

    Stage<BM> st;
    if (kt0 < kt1) load_stage<BM>(st, x, qw, scales, M, N, K, gshift, m0, n0, kt0 * kBK);
    for (int kt = kt0; kt < kt1; ++kt) {
      store_stage<BM>(st, sm);
      __syncthreads();
      if (kt + 1 < kt1) load_stage<BM>(st, x, qw, scales, M, N, K, gshift, m0, n0, (kt + 1) * kBK);  // in flight during MMAs
#pragma unroll
      for (int kk = 0; kk < kBK; kk += 16) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> b;
        wmma::load_matrix_sync(b, &sm.in.b[warp * 16][kk], kLd);
#pragma unroll
        for (int f = 0; f < kFrags; ++f) {
          wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> a;
          wmma::load_matrix_sync(a, &sm.in.a[f * 16][kk], kLd);
          wmma::mma_sync(acc[f], a, b, acc[f]);
        }
      }
      __syncthreads();
    }
    // Epilogue through shared memory (the input tiles are dead after the last sync).
#pragma unroll
    for (int f = 0; f < kFrags; ++f)
      wmma::store_matrix_sync(&sm.c[f * 16][warp * 16], acc[f], kCLd, wmma::mem_row_major);
    __syncthreads();
    for (int i = threadIdx.x; i < BM * kBN; i += kGemmThreads) {
      const int r = i / kBN, cidx = i % kBN, m = m0 + r, n = n0 + cidx;
      if (m < M && n < N) {
        if (splits == 1) y[(long long)m * N + n] = __float2half_rn(sm.c[r][cidx]);
        else ws[((long long)split * M + m) * N + n] = sm.c[r][cidx];
      }
    }
    __syncthreads();
  }
}

// y = fp16(sum over splits in order 0..S-1 of ws[s]).
__global__ void w4a16_splitk_reduce_kernel(const float* __restrict__ ws, half* __restrict__ y, long long mn,
                                           int splits) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < mn; i += (long long)gridDim.x * blockDim.x) {
    float s = 0.f;
    for (int k = 0; k < splits; ++k) s += ws[k * mn + i];
    y[i] = __float2half_rn(s);
  }
}

int bm_for(int M) { return M <= 16 ? 16 : (M <= 32 ? 32 : 64); }

int sm_count() {
  int dev = 0, sms = 1;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  return sms;
}

template <int BM>
int gemm_launch(const half* x, const uint8_t* qw, const half* scales, half* y, float* ws, int M, int N, int K,
                int gshift, int splits, int max_ctas, cudaStream_t stream) {
  const long long items = (long long)((M + BM - 1) / BM) * ((N + kBN - 1) / kBN) * splits;
  int per_sm = 1;
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, w4a16_gemm_kernel<BM>, kGemmThreads, 0);
  long long grid = (long long)sm_count() * (per_sm > 0 ? per_sm : 1);
  if (grid > items) grid = items;
  if (max_ctas > 0 && grid > max_ctas) grid = max_ctas;
  w4a16_gemm_kernel<BM><<<(int)grid, kGemmThreads, 0, stream>>>(x, qw, scales, y, ws, M, N, K, gshift, splits);
  return static_cast<int>(cudaGetLastError());
}

bool valid_group(int g) { return g == 32 || g == 64 || g == 128; }

}  // namespace

// y[M, N] = x[M, K] @ W_deq[N, K]^T for M = 1..8. qweight [N, K/8] int32, scales [N, K/group_size] fp16.
// Requires K % group_size == 0, group_size in {32, 64, 128}, 16-byte aligned x and qweight.
T4_API int t4_w4a16_gemv(const uint32_t* qweight, const half* scales, const half* x, half* y, int M, int N, int K,
                         int group_size, int max_ctas, cudaStream_t stream) {
  if (!valid_group(group_size) || K % group_size) return static_cast<int>(cudaErrorInvalidValue);
  const t4::gemv::Weights w{reinterpret_cast<const uint8_t*>(qweight), scales, nullptr, (long long)K / 2, N, K,
                            group_size};
  return t4::gemv::launch<Int4G>(t4::gemv::contiguous_args(w, x, y, M), max_ctas, stream);
}

// W4A8: x [M, K] fp16 -> int8 blocks for t4_w4a16_gemv_x8 (q [M, K] int8 in the INT4 word's nibble
// order, s [M, K / 32] of (float d, int sum)). K % 32 == 0; q 16-byte aligned, s 8-byte aligned.
T4_API int t4_w4a16_quantize_x8(const half* x, int8_t* q, void* s, int M, int K, int max_ctas, cudaStream_t stream) {
  return t4::gemv::quantize_x8(x, K, q, static_cast<t4::gemv::XBlock*>(s), M, K, /*nibble_order=*/true, max_ctas,
                               stream);
}

// y[M, N] = x~[M, K] @ (q * s)[N, K]^T with x~ the int8 activations of t4_w4a16_quantize_x8 (W4A8).
T4_API int t4_w4a16_gemv_x8(const uint32_t* qweight, const half* scales, const int8_t* xq, const void* xs, half* y,
                            int M, int N, int K, int group_size, int max_ctas, cudaStream_t stream) {
  if (!valid_group(group_size) || K % group_size) return static_cast<int>(cudaErrorInvalidValue);
  const t4::gemv::Weights w{reinterpret_cast<const uint8_t*>(qweight), scales, nullptr, (long long)K / 2, N, K,
                            group_size};
  const auto a = t4::gemv::contiguous_args_x8(w, xq, static_cast<const t4::gemv::XBlock*>(xs), y, M);
  return t4::gemv::launch<Int4X8>(a, max_ctas, stream);
}

// Number of K splits the GEMM will use for this shape on the current device
// (the caller allocates a workspace of splits * M * N fp32 when it is > 1).
T4_API int t4_w4a16_gemm_splits(int M, int N, int K) {
  const int bm = bm_for(M);
  const long long tiles = (long long)((M + bm - 1) / bm) * ((N + kBN - 1) / kBN);
  const int k_tiles = (K + kBK - 1) / kBK;
  const long long want = 2LL * sm_count();  // two CTAs per SM
  if (tiles >= want || k_tiles < 4) return 1;
  long long s = (want + tiles - 1) / tiles;
  if (s > 8) s = 8;
  if (s > k_tiles / 2) s = k_tiles / 2;  // each split keeps >= 2 k-tiles
  int per = (k_tiles + (int)s - 1) / (int)s;
  return (k_tiles + per - 1) / per;      // no empty split
}

// y[M, N] = x[M, K] @ W_deq[N, K]^T, any M, WMMA tensor cores. ws: splits * M * N fp32 (nullptr if splits == 1).
T4_API int t4_w4a16_gemm(const uint32_t* qweight, const half* scales, const half* x, half* y, float* ws, int M,
                         int N, int K, int group_size, int splits, int max_ctas, cudaStream_t stream) {
  if (!valid_group(group_size) || K % group_size || splits < 1 || (splits > 1 && !ws))
    return static_cast<int>(cudaErrorInvalidValue);
  if (M <= 0 || N <= 0) return 0;
  const int gshift = __builtin_ctz(group_size);
  const uint8_t* qw = reinterpret_cast<const uint8_t*>(qweight);
  int st;
  switch (bm_for(M)) {
    case 16: st = gemm_launch<16>(x, qw, scales, y, ws, M, N, K, gshift, splits, max_ctas, stream); break;
    case 32: st = gemm_launch<32>(x, qw, scales, y, ws, M, N, K, gshift, splits, max_ctas, stream); break;
    default: st = gemm_launch<64>(x, qw, scales, y, ws, M, N, K, gshift, splits, max_ctas, stream); break;
  }
  if (st || splits == 1) return st;
  const long long mn = (long long)M * N;
  long long grid = (mn + 255) / 256;
  const long long cap = 4LL * sm_count() * 8;
  if (grid > cap) grid = cap;
  if (max_ctas > 0 && grid > max_ctas) grid = max_ctas;
  w4a16_splitk_reduce_kernel<<<(int)grid, 256, 0, stream>>>(ws, y, mn, splits);
  T4_RETURN_LAUNCH_STATUS();
}
