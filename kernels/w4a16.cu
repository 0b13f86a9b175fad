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
//     to a workspace that a second kernel sums in split order. A warp-specialized
//     twin (producer warps load and dequantize, consumer warps run the WMMAs)
//     gives the same bits with one split.
//   * MMA GEMM (M = 1..64, batched decode): mma.sync m16n8k8 on the tensor-core
//     layout of t4lib/ops/w4a16/layout.py, weights streamed straight from DRAM
//     into registers (below, "small-M tensor-core GEMM").
// Every kernel walks its work items in a grid-stride loop: results are
// bit-identical for any grid cap (max_ctas, occupancy pacing).
#include <mma.h>

#include "gemv.cuh"

// t4lib:hot gemv_kernel w4a16_gemm_kernel w4a16_gemm_ws_kernel w4a16_mma_kernel

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

// ---------------------------------------------------------------- warp-specialized WMMA GEMM
// The same product through software warp specialization (t4::ws in common.cuh): 2 producer warps
// load x and the packed weights with ordinary loads, dequantize the weights and store both into a
// 2-stage shared-memory ring (64 k per stage), each thread loading the next stage while it stores;
// 4 consumer warps (2 x 2, 32 x 32 each) run the WMMAs on a 64 x 64 output tile. No split-K. Every
// 16 x 16 output fragment accumulates the same k16 products in the same order as
// w4a16_gemm_kernel, so with one split the two kernels give the same bits.
constexpr int kWsConsumers = 128, kWsProducers = 64, kWsThreads = kWsConsumers + kWsProducers;
constexpr int kWsBM = 64, kWsBK = 64, kWsLd = kWsBK + kSkew;  // 2 x 18 KB ring
constexpr int kWsAChunks = kWsBM * kWsBK / 8 / kWsProducers;   // 16-byte x chunks per producer thread (8)
constexpr int kWsBChunks = kBN * kWsBK / 32 / kWsProducers;    // 16-byte (32-value) weight chunks (2)

struct WsSmem {
  union {
    struct {
      half a[kWsBM][kWsLd];  // x tile      [BM, BK]
      half b[kBN][kWsLd];    // W_deq tile  [BN, BK] (= B col-major)
    } ring[t4::ws::kStages];
    float c[kWsBM][kCLd];
  };
};

struct WsRegs {
  uint4 a[kWsAChunks];
  uint4 b[kWsBChunks];
  half s[kWsBChunks];
};

__global__ void __launch_bounds__(kWsThreads, 2) w4a16_gemm_ws_kernel(const half* __restrict__ x,
                                                                  const uint8_t* __restrict__ qw,
                                                                  const half* __restrict__ scales,
                                                                  half* __restrict__ y, int M, int N, int K,
                                                                  int gshift) {
  __shared__ __align__(128) WsSmem sm;
  const int warp = threadIdx.x >> 5;
  const bool producer = warp >= kWsConsumers / 32;
  const int wm = (warp >> 1) & 1, wn = warp & 1;
  const int tiles_m = (M + kWsBM - 1) / kWsBM, tiles_n = (N + kBN - 1) / kBN;
  const long long n_tiles = (long long)tiles_m * tiles_n;
  const int n_iters = (K + kWsBK - 1) / kWsBK;  // K % 32 == 0: a stage's second half may lie past K

  for (long long tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
    const int m0 = (int)(tile % tiles_m) * kWsBM, n0 = (int)(tile / tiles_m) * kBN;  // m fastest: W reuse in L2
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.f);

    if (producer) {
      const int pt = threadIdx.x - kWsConsumers;
      auto load = [&](WsRegs& st, int it) {
        const int k0 = it * kWsBK;
#pragma unroll
        for (int i = 0; i < kWsAChunks; ++i) {
          const int idx = pt + i * kWsProducers, row = idx / (kWsBK / 8), col = (idx % (kWsBK / 8)) * 8;
          const int m = m0 + row, k = k0 + col;
          st.a[i] = (m < M && k < K) ? t4::gemv::ldg16(x + (long long)m * K + k) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int i = 0; i < kWsBChunks; ++i) {
          const int idx = pt + i * kWsProducers, row = idx / (kWsBK / 32), col = (idx % (kWsBK / 32)) * 32;
          const int n = n0 + row, k = k0 + col;
          const bool ok = n < N && k < K;
          st.b[i] = ok ? t4::gemv::ldg16(qw + (long long)n * (K / 2) + k / 2) : make_uint4(0, 0, 0, 0);
          st.s[i] = ok ? __ldg(scales + (long long)n * (K >> gshift) + (k >> gshift)) : __float2half(0.f);
        }
      };
      auto store = [&](const WsRegs& st, int s) {
#pragma unroll
        for (int i = 0; i < kWsAChunks; ++i) {
          const int idx = pt + i * kWsProducers, row = idx / (kWsBK / 8), col = (idx % (kWsBK / 8)) * 8;
          *reinterpret_cast<uint4*>(&sm.ring[s].a[row][col]) = st.a[i];
        }
#pragma unroll
        for (int i = 0; i < kWsBChunks; ++i) {
          const int idx = pt + i * kWsProducers, row = idx / (kWsBK / 32), col = (idx % (kWsBK / 32)) * 32;
          const uint32_t* q = reinterpret_cast<const uint32_t*>(&st.b[i]);
          const half2 s2 = __half2half2(st.s[i]);
#pragma unroll
          for (int j = 0; j < 4; ++j) {  // the plain kernel's dequantization: fp16(q * s)
            half2 hv[4];
            t4::dequant_int4x8(q[j], hv);
#pragma unroll
            for (int p = 0; p < 4; ++p) hv[p] = __hmul2(hv[p], s2);
            *reinterpret_cast<uint4*>(&sm.ring[s].b[row][col + 8 * j]) =
                make_uint4(t4::as_u32(hv[0]), t4::as_u32(hv[1]), t4::as_u32(hv[2]), t4::as_u32(hv[3]));
          }
        }
      };
      t4::ws::produce<kWsThreads, WsRegs>(n_iters, load, store);
    } else {
      t4::ws::consume<kWsThreads>(n_iters, [&](int s) {
#pragma unroll
        for (int kk = 0; kk < kWsBK; kk += 16) {
          wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> a[2];
          wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> b[2];
#pragma unroll
          for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(a[i], &sm.ring[s].a[wm * 32 + i * 16][kk], kWsLd);
#pragma unroll
          for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(b[j], &sm.ring[s].b[wn * 32 + j * 16][kk], kWsLd);
#pragma unroll
          for (int i = 0; i < 2; ++i)
#pragma unroll
            for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
        }
      });
    }
    __syncthreads();  // every stage consumed: the ring is dead
    if (!producer) {
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j)
          wmma::store_matrix_sync(&sm.c[wm * 32 + i * 16][wn * 32 + j * 16], acc[i][j], kCLd, wmma::mem_row_major);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < kWsBM * kBN; i += kWsThreads) {
      const int r = i / kBN, cidx = i % kBN, m = m0 + r, n = n0 + cidx;
      if (m < M && n < N) y[(long long)m * N + n] = __float2half_rn(sm.c[r][cidx]);
    }
    __syncthreads();  // sm.c is read before the next tile's stages overwrite it
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

// ---------------------------------------------------------------- small-M tensor-core GEMM
//
// y^T = W_deq . x^T on mma.sync.m16n8k8 (fp16 in, fp32 accumulate): the WEIGHT is the 16 x 8
// A operand (16 output rows n, 8 k) and the activations the 8 x 8 B operand (k x 8 rows m), so
// M = 1..8 fills one n8 tile and M = 64 eight; M is never padded to 16.
//
// Layout (t4lib/ops/w4a16/layout.py; N padded to 32 rows, K to 64, both with zeros):
//   tiles  [N/16][K/64][32 lanes] uint4: the 16 x 64 weight tile (nt, kt) is 512 contiguous
//          bytes and lane (g = lane / 4, t = lane % 4) reads its whole share with ONE 16-byte load.
//   scales [N/16][groups][8] half2: (s[16 nt + g], s[16 nt + 8 + g]) of one group.
// K is permuted inside a tile: k-step ks (0..7) of lane t covers k = 16 t + 2 ks + {0, 1}, so a
// lane's operands of the whole tile are W[g or g+8][16 t .. 16 t + 15] and x[m][16 t .. 16 t + 15]
// (the sum over k does not care about its order). Word j (0..3) of the lane's uint4 holds, in the
// LOP3 nibble order, v0 v1 = W[g][16t+4j+{0,1}], v2 v3 = W[g+8][..same k], v4 v5 = W[g][16t+4j+2+{0,1}],
// v6 v7 = W[g+8][..same k]: the A fragments (a0 = row g, a1 = row g + 8) of k-steps 2j and 2j + 1.
// The B fragment of k-step ks is the half2 x[8 mt + g][16 t + 2 ks .. +1]: word ks of two plain
// 16-byte loads of x (L1-cached: every warp of the SM reads the same x), so neither ldmatrix nor a
// shared-memory stage is needed for the activations.
//
// Work: item = (R consecutive 16-row tiles, one of `splits` K ranges); the 4 warps of a CTA take the
// k-tiles of the range round-robin and are summed in warp order through shared memory; split > 1
// writes fp32 partials that w4a16_splitk_reduce_kernel sums in split order. sm_75 has no cp.async:
// each warp keeps kMmaStages k-tiles of weight loads in flight in registers (the next ones are issued
// before the current one is dequantized and multiplied).
namespace {

constexpr int kMmaWarps = 4, kMmaThreads = 32 * kMmaWarps, kMmaTileK = 64, kMmaStages = 4;

// Read-once weight stream: bypass L1 so x and the scales keep it.
__device__ __forceinline__ uint4 ldg_stream(const uint4* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

// Signed INT4 x8 (LOP3 nibble order, values v0..v7) -> out[i] = (v2i, v2i+1) exactly, 9 instructions.
// Low nibble of a byte: (q & 0x000F000F) ^ 0x64086408 is the fp16 pair 1024 + (v ^ 8) = 1032 + v; - 1032.
// High nibble: (q & 0x00F000F0) ^ 0x64806480 is 1024 + 16 (v + 8); one fma: * 1/16 - 72 = v (exact).
__device__ __forceinline__ void dequant_int4x8_mma(uint32_t q, half2 (&out)[4]) {
  const half2 kSub = t4::as_half2(0x64086408u), kMul = t4::as_half2(0x2C002C00u), kAdd = t4::as_half2(0xD480D480u);
  const uint32_t q8 = q >> 8;
  out[0] = __hsub2(t4::as_half2(t4::lop3<0x6A>(q, 0x000F000Fu, 0x64086408u)), kSub);             // v0 v1
  out[1] = __hfma2(t4::as_half2(t4::lop3<0x6A>(q, 0x00F000F0u, 0x64806480u)), kMul, kAdd);       // v2 v3
  out[2] = __hsub2(t4::as_half2(t4::lop3<0x6A>(q8, 0x000F000Fu, 0x64086408u)), kSub);            // v4 v5
  out[3] = __hfma2(t4::as_half2(t4::lop3<0x6A>(q8, 0x00F000F0u, 0x64806480u)), kMul, kAdd);      // v6 v7
}

// c[16 x 8] += a[16 x 8] . b[8 x 8], fp16 inputs, fp32 accumulators (sm_75's tensor-core shape).
__device__ __forceinline__ void mma_16x8x8(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t b0) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(b0));
}

// CTAs per SM for __launch_bounds__: a register cap of 64K / (128 threads * blocks).
template <int MT>
struct MmaMinBlocks : std::integral_constant<int, MT <= 2 ? 4 : (MT <= 4 ? 3 : 2)> {};

// One 16-row tile's k-tile as loaded: the lane's 16 weight bytes and its (row g, row g + 8) scales.
struct MmaFrag {
  uint4 q;
  uint32_t s;
};

struct MmaArgs {
  const uint4* tiles;       // [NT][KT][32]
  const uint32_t* scales;   // [NT][G][8] half2
  const half* x;            // [M, K]
  half* y;                  // [M, N]
  float* ws;                // [splits, M, N] when splits > 1
  int M, N, K, KT, G, gshift, splits, n_items;
};

template <int R>
__device__ __forceinline__ void mma_load(MmaFrag (&f)[R], const MmaArgs& a, int nt0, int kt, int lane) {
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const long long nt = nt0 + r;
    f[r].q = ldg_stream(a.tiles + (nt * a.KT + kt) * 32 + lane);
    f[r].s = __ldg(a.scales + (nt * a.G + ((kt * kMmaTileK + 16 * (lane & 3)) >> a.gshift)) * 8 + (lane >> 2));
  }
}

// acc[r][mt] += tile rows (nt0 + r) . x[8 mt .. 8 mt + 7]^T over k-tile kt.
// Ablations (measurement only, results are garbage): which stage the time goes to.
enum MmaMode { kMmaFull = 0, kMmaLoadsOnly = 1, kMmaNoTensorCores = 2 };

// The lane's B operands of k-tile kt: x[8 mt + g][k .. k + 15], zeros beyond M or K (K % 16 == 0:
// a lane's 16 columns are whole or none).
template <int MT>
__device__ __forceinline__ void mma_load_x(uint4 (&xb)[MT][2], const MmaArgs& a, int kt, int lane) {
  const int g = lane >> 2, k = kt * kMmaTileK + 16 * (lane & 3);
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    const int m = 8 * mt + g;
    if (m < a.M && k < a.K) {
      const half* p = a.x + (long long)m * a.K + k;
      xb[mt][0] = t4::gemv::ldg16(p);
      xb[mt][1] = t4::gemv::ldg16(p + 8);
    } else {
      xb[mt][0] = xb[mt][1] = make_uint4(0, 0, 0, 0);
    }
  }
}

// Accumulator sets per output fragment: even k-steps go to set 0, odd ones to set kChains - 1. With one
// M-tile and one row tile (R = 1) a single set makes every MMA of a tile wait for the previous one;
// R = 2 or more M-tiles interleave independent chains already (and a second set costs registers).
template <int MT, int R>
struct MmaChains : std::integral_constant<int, MT == 1 && R == 1 ? 2 : 1> {};

template <int MT, int R, int Mode, int kChains>
__device__ __forceinline__ void mma_tile(const MmaFrag (&f)[R], const uint4 (&xb)[MT][2],
                                         float (&acc)[kChains][R][MT][4]) {
  if constexpr (Mode == kMmaLoadsOnly) {  // keep every load alive, no dequantization, no MMA
#pragma unroll
    for (int r = 0; r < R; ++r) {
      uint32_t v = f[r].q.x ^ f[r].q.y ^ f[r].q.z ^ f[r].q.w ^ f[r].s;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) v ^= xb[mt][0].x ^ xb[mt][1].w;
      acc[0][r][0][0] += __uint_as_float(v & 0x3FFFFFFFu);
    }
    return;
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const half2 s2 = t4::as_half2(f[r].s);
    const half2 s_lo = __low2half2(s2), s_hi = __high2half2(s2);  // row g, row g + 8
    const uint32_t* q = reinterpret_cast<const uint32_t*>(&f[r].q);
#pragma unroll
    for (int j = 0; j < 4; ++j) {  // word j: k-steps 2j, 2j + 1
      half2 h[4];
      dequant_int4x8_mma(q[j], h);
      // fp16(q * s): the reference's rounding
      const uint32_t a0e = t4::as_u32(__hmul2(h[0], s_lo)), a1e = t4::as_u32(__hmul2(h[1], s_hi));
      const uint32_t a0o = t4::as_u32(__hmul2(h[2], s_lo)), a1o = t4::as_u32(__hmul2(h[3], s_hi));
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const uint32_t* xw = reinterpret_cast<const uint32_t*>(&xb[mt][j >> 1]);
        if constexpr (Mode == kMmaNoTensorCores) {  // dequantized operands kept alive, no MMA
          acc[0][r][mt][j] += __uint_as_float((a0e ^ a1e ^ a0o ^ a1o ^ xw[0] ^ xw[1]) & 0x3FFFFFFFu);
        } else {
          mma_16x8x8(acc[0][r][mt], a0e, a1e, xw[2 * (j & 1)]);
          mma_16x8x8(acc[kChains - 1][r][mt], a0o, a1o, xw[2 * (j & 1) + 1]);
        }
      }
    }
  }
}

template <int MT, int R, int Mode = kMmaFull, int kStages = kMmaStages, int kChains = MmaChains<MT, R>::value>
__global__ void __launch_bounds__(kMmaThreads, MmaMinBlocks<MT>::value) w4a16_mma_kernel(const MmaArgs a) {
  __shared__ float red[kMmaWarps - 1][R * MT * 4][32];  // warps 1..3's partial sums
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int per = (a.KT + a.splits - 1) / a.splits;

  for (int item = blockIdx.x; item < a.n_items; item += gridDim.x) {
    const int split = item % a.splits, nt0 = (item / a.splits) * R;
    const int kt_end = min(a.KT, (split + 1) * per);
    const int first = split * per + warp;
    constexpr int kStep = kMmaWarps * kStages;  // k-tiles between two uses of one stage

    float accs[kChains][R][MT][4];
#pragma unroll
    for (int h = 0; h < kChains; ++h)
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int c = 0; c < 4; ++c) accs[h][r][mt][c] = 0.f;

    MmaFrag st[kStages][R];  // k-tiles first + s * 4, s < kStages, in flight
#pragma unroll
    for (int s = 0; s < kStages; ++s)
      if (first + s * kMmaWarps < kt_end) mma_load<R>(st[s], a, nt0, first + s * kMmaWarps, lane);
    for (int base = first; base < kt_end; base += kStep) {
#pragma unroll
      for (int s = 0; s < kStages; ++s) {
        const int kt = base + s * kMmaWarps;
        if (kt < kt_end) {  // warp-uniform
          MmaFrag cur[R];
#pragma unroll
          for (int r = 0; r < R; ++r) cur[r] = st[s][r];
          if (kt + kStep < kt_end) mma_load<R>(st[s], a, nt0, kt + kStep, lane);  // in flight during the math
          uint4 xb[MT][2];
          mma_load_x<MT>(xb, a, kt, lane);
          mma_tile<MT, R, Mode, kChains>(cur, xb, accs);
        }
      }
    }
    float (&acc)[R][MT][4] = accs[0];
    if constexpr (kChains == 2) {
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int c = 0; c < 4; ++c) acc[r][mt][c] += accs[1][r][mt][c];
    }

    // Sum the 4 warps in warp order; warp 0 stores. C fragment: c0, c1 = (row g, m = 2t, 2t + 1),
    // c2, c3 = (row g + 8, same m).
    if (warp > 0) {
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int c = 0; c < 4; ++c) red[warp - 1][(r * MT + mt) * 4 + c][lane] = acc[r][mt][c];
    }
    __syncthreads();
    if (warp == 0) {
      const int g = lane >> 2, t = lane & 3;
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            float v = acc[r][mt][c];
#pragma unroll
            for (int w = 0; w < kMmaWarps - 1; ++w) v += red[w][(r * MT + mt) * 4 + c][lane];
            const int n = (nt0 + r) * 16 + g + (c >> 1) * 8, m = 8 * mt + 2 * t + (c & 1);
            if (m < a.M && n < a.N) {
              if (a.splits == 1) a.y[(long long)m * a.N + n] = __float2half_rn(v);
              else a.ws[((long long)split * a.M + m) * a.N + n] = v;
            }
          }
    }
    __syncthreads();  // red is rewritten by the next item
  }
}

constexpr int kMmaMaxMT = 8;      // M <= 64
constexpr int kMmaMaxSplits = 16;

// R (16-row tiles per work item): 2 halves the x reads per weight byte and doubles each warp's loads in
// flight, 1 doubles the work items. Measured on an H200 (results/nvidia-h200/labs/w4a16_mma_lab_r1.json,
// R1/R2 cases): R = 2 won at 17408x5120 for every M and at 5120x17408 for M = 2..32 (M = 64 within 4%);
// R = 1 won or tied at 1536x8960 (M <= 16), 896x4864 and 4864x896, tied at 8960x1536 (M <= 16).
int mma_default_r(int K, int n_tiles16) { return K >= 4096 && n_tiles16 >= 64 ? 2 : 1; }

template <int MT, int R>
int mma_occupancy() {
  int per_sm = 0;
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, w4a16_mma_kernel<MT, R>, kMmaThreads, 0);
  return per_sm > 0 ? per_sm : 1;
}

template <int MT>
int mma_occupancy_r(int R) { return R == 1 ? mma_occupancy<MT, 1>() : mma_occupancy<MT, 2>(); }

int mma_occupancy_for(int MT, int R) {
  switch (MT) {
    case 1: return mma_occupancy_r<1>(R);
    case 2: return mma_occupancy_r<2>(R);
    case 3: return mma_occupancy_r<3>(R);
    case 4: return mma_occupancy_r<4>(R);
    case 5: return mma_occupancy_r<5>(R);
    case 6: return mma_occupancy_r<6>(R);
    case 7: return mma_occupancy_r<7>(R);
    default: return mma_occupancy_r<8>(R);
  }
}

// Splits minimising a cost in k-tile steps of one warp: resident rounds x (k-tiles per warp +
// pipeline fill) + the fp32 partials' write and re-read (and the reduce launch) when split.
int mma_choose_splits(int M, int N, int K, int R, int slots) {
  const int MT = (M + 7) / 8;
  const long long items1 = (long long)((N + 31) / 32 * 2) / R;
  const int KT = (K + kMmaTileK - 1) / kMmaTileK;
  const double step_bytes = (double)slots * kMmaWarps * R * 512;  // weight bytes of one k-step of all warps
  double best = 1e300;
  int best_s = 1;
  for (int s = 1; s <= kMmaMaxSplits && s <= KT; ++s) {
    const int per = (KT + s - 1) / s;
    if ((long long)per * (s - 1) >= KT) break;  // an empty split
    const long long items = items1 * s;
    const double rounds = (double)((items + slots - 1) / slots);
    double cost = rounds * ((per + kMmaWarps - 1) / kMmaWarps + 2.0);
    if (s > 1) cost += 2.0 * s * M * (double)N * 4 / step_bytes + 2.0;
    if (cost < best * 0.98) best = cost, best_s = s;  // a split must pay for itself clearly
  }
  (void)MT;
  return best_s;
}

template <int MT, int R, int Mode = kMmaFull, int kStages = kMmaStages, int kChains = MmaChains<MT, R>::value>
int mma_launch_t(const MmaArgs& a, int max_ctas, cudaStream_t stream) {
  int per_sm = 0;
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, w4a16_mma_kernel<MT, R, Mode, kStages, kChains>,
                                                kMmaThreads, 0);
  long long grid = (long long)sm_count() * (per_sm > 0 ? per_sm : 1);
  if (grid > a.n_items) grid = a.n_items;
  if (max_ctas > 0 && grid > max_ctas) grid = max_ctas;
  w4a16_mma_kernel<MT, R, Mode, kStages, kChains><<<(int)grid, kMmaThreads, 0, stream>>>(a);
  return static_cast<int>(cudaGetLastError());
}

// kOtherChains: the accumulator-set count MmaChains does not pick (a measurement variant).
template <int MT, int Mode = kMmaFull, int kStages = kMmaStages, bool kOtherChains = false>
int mma_launch_r(const MmaArgs& a, int R, int max_ctas, cudaStream_t stream) {
  constexpr int kC1 = kOtherChains ? 3 - MmaChains<MT, 1>::value : MmaChains<MT, 1>::value;
  constexpr int kC2 = kOtherChains ? 3 - MmaChains<MT, 2>::value : MmaChains<MT, 2>::value;
  return R == 1 ? mma_launch_t<MT, 1, Mode, kStages, kC1>(a, max_ctas, stream)
                : mma_launch_t<MT, 2, Mode, kStages, kC2>(a, max_ctas, stream);
}

// Measurement variants exist for M-tile counts 1, 2 and 8 only (M = 1..8, 9..16, 57..64).
template <int Mode, int kStages = kMmaStages, bool kOtherChains = false>
int mma_launch_variant(const MmaArgs& a, int R, int max_ctas, cudaStream_t stream) {
  switch ((a.M + 7) / 8) {
    case 1: return mma_launch_r<1, Mode, kStages, kOtherChains>(a, R, max_ctas, stream);
    case 2: return mma_launch_r<2, Mode, kStages, kOtherChains>(a, R, max_ctas, stream);
    case 8:  // the other chain count is not built for 8 M-tiles (8 independent chains already)
      if constexpr (kOtherChains) return static_cast<int>(cudaErrorInvalidValue);
      else return mma_launch_r<8, Mode, kStages, kOtherChains>(a, R, max_ctas, stream);
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
}

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

// The same as t4_w4a16_gemm with one split, through the warp-specialized kernel (the same bits).
T4_API int t4_w4a16_gemm_ws(const uint32_t* qweight, const half* scales, const half* x, half* y, int M, int N, int K,
                            int group_size, int max_ctas, cudaStream_t stream) {
  if (!valid_group(group_size) || K % group_size) return static_cast<int>(cudaErrorInvalidValue);
  if (M <= 0 || N <= 0) return 0;
  const long long tiles = (long long)((M + kWsBM - 1) / kWsBM) * ((N + kBN - 1) / kBN);
  int per_sm = 1;
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, w4a16_gemm_ws_kernel, kWsThreads, 0);
  long long grid = (long long)sm_count() * (per_sm > 0 ? per_sm : 1);
  if (grid > tiles) grid = tiles;
  if (max_ctas > 0 && grid > max_ctas) grid = max_ctas;
  w4a16_gemm_ws_kernel<<<(int)grid, kWsThreads, 0, stream>>>(x, reinterpret_cast<const uint8_t*>(qweight), scales, y,
                                                             M, N, K, __builtin_ctz(group_size));
  T4_RETURN_LAUNCH_STATUS();
}

// ---------------------------------------------------------------- small-M tensor-core GEMM launchers

// Launch configuration of t4_w4a16_mma for this shape on the current device: out[0] = R (16-row
// tiles per work item), out[1] = K splits (the caller allocates splits * M * N fp32 when > 1).
// r_force (1 or 2) fixes R, splits_force (>= 1) fixes the splits (measurement labs); 0 = choose.
T4_API int t4_w4a16_mma_config(int M, int N, int K, int r_force, int splits_force, int* out) {
  if (M < 1 || M > 8 * kMmaMaxMT || N < 1 || K < 1 || r_force < 0 || r_force > 2 || splits_force < 0)
    return static_cast<int>(cudaErrorInvalidValue);
  const int MT = (M + 7) / 8, n_tiles16 = (N + 31) / 32 * 2, sms = sm_count();
  int R = r_force ? r_force : mma_default_r(K, n_tiles16);
  const int slots = sms * mma_occupancy_for(MT, R);
  const int KT = (K + kMmaTileK - 1) / kMmaTileK;
  int splits = splits_force ? splits_force : mma_choose_splits(M, N, K, R, slots);
  if (splits > KT) splits = KT;
  const int per = (KT + splits - 1) / splits;
  out[0] = R;
  out[1] = (KT + per - 1) / per;  // no empty split
  return 0;
}

// y[M, N] = x[M, K] @ W_deq[N, K]^T for M = 1..64 from the tensor-core layout (see the MMA section):
// tiles [ceil(N/32)*2][ceil(K/64)][32] uint4, scales [ceil(N/32)*2][groups][8] half2 with
// groups = ceil(K/64) * 64 / group_size. x 16-byte aligned, K % 32 == 0. R and splits from
// t4_w4a16_mma_config; ws: splits * M * N fp32 (nullptr if splits == 1).
// variant: 0 = the kernel. Measurement variants, M in 1..16 or 57..64 only: 1 = loads only and
// 2 = loads and dequantization without the MMAs (output meaningless), 3 / 4 = 2 / 6 register
// stages of weight loads instead of 4, 5 = the other accumulator-set count (M <= 16).
T4_API int t4_w4a16_mma(const void* tiles, const void* scales, const half* x, half* y, float* ws, int M, int N,
                        int K, int group_size, int R, int splits, int max_ctas, int variant, cudaStream_t stream) {
  if (variant < 0 || variant > 5 || !valid_group(group_size) || K % group_size || M < 1 || M > 8 * kMmaMaxMT || N < 1 || (R != 1 && R != 2) ||
      splits < 1 || (splits > 1 && !ws))
    return static_cast<int>(cudaErrorInvalidValue);
  MmaArgs a{};
  a.tiles = static_cast<const uint4*>(tiles);
  a.scales = static_cast<const uint32_t*>(scales);
  a.x = x;
  a.y = y;
  a.ws = ws;
  a.M = M;
  a.N = N;
  a.K = K;
  a.KT = (K + kMmaTileK - 1) / kMmaTileK;
  a.G = a.KT * kMmaTileK / group_size;
  a.gshift = __builtin_ctz(group_size);
  const int per = (a.KT + splits - 1) / splits;
  if ((long long)per * (splits - 1) >= a.KT) return static_cast<int>(cudaErrorInvalidValue);  // an empty split
  a.splits = splits;
  a.n_items = (N + 31) / 32 * 2 / R * splits;
  int st;
  if (variant == 1) return mma_launch_variant<kMmaLoadsOnly>(a, R, max_ctas, stream);
  if (variant == 2) return mma_launch_variant<kMmaNoTensorCores>(a, R, max_ctas, stream);
  if (variant == 3) st = mma_launch_variant<kMmaFull, 2>(a, R, max_ctas, stream);
  else if (variant == 4) st = mma_launch_variant<kMmaFull, 6>(a, R, max_ctas, stream);
  else if (variant == 5) st = mma_launch_variant<kMmaFull, kMmaStages, true>(a, R, max_ctas, stream);
  else switch ((M + 7) / 8) {
    case 1: st = mma_launch_r<1>(a, R, max_ctas, stream); break;
    case 2: st = mma_launch_r<2>(a, R, max_ctas, stream); break;
    case 3: st = mma_launch_r<3>(a, R, max_ctas, stream); break;
    case 4: st = mma_launch_r<4>(a, R, max_ctas, stream); break;
    case 5: st = mma_launch_r<5>(a, R, max_ctas, stream); break;
    case 6: st = mma_launch_r<6>(a, R, max_ctas, stream); break;
    case 7: st = mma_launch_r<7>(a, R, max_ctas, stream); break;
    default: st = mma_launch_r<8>(a, R, max_ctas, stream); break;
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
