// Fused weight-gradient GEMM + AdamW: the Linear layer's weight update without dW in DRAM.
//
//   dW[n, k] = sum_t dY[t, n] * X[t, k]        dY [T, N], X [T, K] fp16 row-major, fp32 accumulate
//   then torch.optim.AdamW on the fp32 master W [N, K] with fp32 moments m, v, in this order:
//     p *= 1 - lr * wd;  m = lerp(m, g, 1 - b1);  v = v * b2 + (1 - b2) * g * g
//     p += -(lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps);  w16 = fp16(p)
//
// GEMM core: WMMA m16n16k16 fp16 tensor cores, fp32 accumulators. The reduction dimension is
// the token dimension T. A CTA owns one 64 x 64 output tile over ALL of T (no split-T, so no
// cross-CTA reduction can change the result); 4 warps in a 2 x 2 grid, 32 x 32 (2 x 2 fragments)
// each. Global loads are synchronous (sm_75 has no cp.async) and software-pipelined through
// registers: the next 64-token stage is loaded while the current one runs on the tensor cores.
// dY^T is the col-major A operand read straight from dY's row-major [t][n] tile; X the row-major
// B operand. Shared rows are skewed by 16 bytes (72 halves) so the 16-byte stores of 8 threads of a
// row and the fragment loads hit disjoint banks.
//
// Epilogue (fused): the accumulator tile goes to shared memory (WMMA's fragment -> (n, k) mapping
// is opaque), then each thread updates elements with coalesced reads and writes of master, m, v
// and the fp16 copy: 12 bytes read + 14 written per parameter, dW never leaves the SM. The tile's
// optimizer state is prefetched into L2 while the last stages of the GEMM run, and the update
// takes 4 parameters per thread with 16-byte accesses, 4 groups in flight (K % 4 == 0 and aligned
// state; else one parameter at a time): the epilogue waits for memory once, not once per element.
// Unfused baseline (a): the same core writes dW fp32, a separate elementwise kernel applies the
// same update (reads dW 4 + 12, writes 14). The update is one device function with explicitly
// rounded intrinsics (no FMA contraction), so fused and unfused give bit-identical results.
// Warp-specialized variant (fused_adamw_ws_kernel): the same tile and epilogue, with 2 producer
// warps filling a shared-memory ring and 4 consumer warps on the tensor cores (see below); it
// accumulates in the same order, so its bits equal the plain kernel's.
// Every kernel walks its work in a grid-stride loop: results are bit-identical for any grid cap.
#include <mma.h>

#include "common.cuh"

// t4lib:hot fused_adamw_gemm_kernel fused_adamw_ws_kernel adamw_update_kernel

namespace {

namespace wmma = nvcuda::wmma;

constexpr int kBM = 64;                    // output rows n (of W [N, K]) per tile
constexpr int kBN = 64;                    // output columns k per tile
constexpr int kBT = 64;                    // tokens per pipeline stage (the GEMM's reduction step)
constexpr int kThreads = 128;              // 4 warps: warp w owns rows 32*(w/2).., columns 32*(w%2)..
constexpr int kSkew = 8;                   // halves of padding per shared row (16 bytes)
constexpr int kLdA = kBM + kSkew, kLdB = kBN + kSkew;
constexpr int kLdC = kBN + 4;              // fp32 epilogue tile stride
constexpr int kChunksA = kBT * kBM / 8 / kThreads;  // 16-byte chunks of dY per thread per stage (4)
constexpr int kChunksB = kBT * kBN / 8 / kThreads;  // of X (4)

struct Smem {
  union {
    struct {
      half a[kBT][kLdA];  // dY[t0 + t, n0 + n]: A = dY^T [n, t] col-major
      half b[kBT][kLdB];  // X[t0 + t, k0 + k]:  B = X [t, k] row-major
    } in;
    float c[kBM][kLdC];   // dW tile for the epilogue
  };
};

// AdamW scalars, computed on the host in double (as torch does) and rounded to fp32 once.
struct AdamWArgs {
  float decay;      // 1 - lr * weight_decay
  float w1;         // 1 - beta1 (lerp weight)
  float b2;         // beta2
  float w2;         // 1 - beta2
  float bc2_sqrt;   // sqrt(1 - beta2^step)
  float eps;
  float neg_step;   // -lr / (1 - beta1^step)
};

// One parameter's update, in torch.optim.AdamW's (single-tensor) operation order. Each operation
// rounds once (_rn intrinsics): no FMA contraction, the same bits in every kernel that calls it.
__device__ __forceinline__ void adamw_update(float g, float& p, float& m, float& v, const AdamWArgs& h) {
  p = __fmul_rn(p, h.decay);
  // torch.lerp(m, g, w): m + w * (g - m) for |w| < 0.5, else g - (g - m) * (1 - w)
  const float d = __fsub_rn(g, m);
  m = h.w1 < 0.5f ? __fadd_rn(m, __fmul_rn(h.w1, d)) : __fsub_rn(g, __fmul_rn(d, __fsub_rn(1.f, h.w1)));
  v = __fadd_rn(__fmul_rn(v, h.b2), __fmul_rn(__fmul_rn(h.w2, g), g));  // addcmul: v + w2 * g * g
  const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), h.bc2_sqrt), h.eps);
  p = __fadd_rn(p, __fdiv_rn(__fmul_rn(h.neg_step, m), denom));       // addcdiv: p + s * m / denom
}

struct Operand {
  const half* __restrict__ ptr;  // [T, cols] row-major
  int cols;
  bool vec;                      // cols % 8 == 0 and 16-byte aligned base: 16-byte loads
};

// 8 halves of row t, columns c .. c+7 (zeros outside [0, T) x [0, cols)).
__device__ __forceinline__ uint4 load8(const Operand& o, int t, int T, int c) {
  if (t >= T || c >= o.cols) return make_uint4(0, 0, 0, 0);
  const half* p = o.ptr + (long long)t * o.cols + c;
  if (o.vec) return __ldg(reinterpret_cast<const uint4*>(p));  // c + 8 <= cols since cols % 8 == 0
  union {
    uint4 u;
    half h[8];
  } r;
#pragma unroll
  for (int j = 0; j < 8; ++j) r.h[j] = c + j < o.cols ? __ldg(p + j) : __float2half(0.f);
  return r.u;
}

struct Stage {
  uint4 a[kChunksA];
  uint4 b[kChunksB];
};

__device__ __forceinline__ void load_stage(Stage& st, const Operand& dy, const Operand& x, int T, int t0, int n0,
                                           int k0) {
#pragma unroll
  for (int i = 0; i < kChunksA; ++i) {
    const int idx = threadIdx.x + i * kThreads, row = idx / (kBM / 8), col = (idx % (kBM / 8)) * 8;
    st.a[i] = load8(dy, t0 + row, T, n0 + col);
  }
#pragma unroll
  for (int i = 0; i < kChunksB; ++i) {
    const int idx = threadIdx.x + i * kThreads, row = idx / (kBN / 8), col = (idx % (kBN / 8)) * 8;
    st.b[i] = load8(x, t0 + row, T, k0 + col);
  }
}

__device__ __forceinline__ void store_stage(const Stage& st, Smem& sm) {
#pragma unroll
  for (int i = 0; i < kChunksA; ++i) {
    const int idx = threadIdx.x + i * kThreads, row = idx / (kBM / 8), col = (idx % (kBM / 8)) * 8;
    *reinterpret_cast<uint4*>(&sm.in.a[row][col]) = st.a[i];
  }
#pragma unroll
  for (int i = 0; i < kChunksB; ++i) {
    const int idx = threadIdx.x + i * kThreads, row = idx / (kBN / 8), col = (idx % (kBN / 8)) * 8;
    *reinterpret_cast<uint4*>(&sm.in.b[row][col]) = st.b[i];
  }
}

// Where the epilogue writes: the optimizer state (fused) or dW (unfused core).
struct Out {
  float* __restrict__ master;
  float* __restrict__ exp_avg;
  float* __restrict__ exp_avg_sq;
  half* __restrict__ w16;
  float* __restrict__ dw;
  bool vec;  // K % 4 == 0 and 16-byte aligned fp32 arrays (8-byte aligned w16): 4 parameters per access
};

__device__ __forceinline__ void prefetch_l2(const float* p) {
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p));
}

// Ask L2 for the tile's master/m/v rows (each 64 fp32 = two 128-byte lines) before the epilogue
// needs them; a hint only, so it changes no result. kNT threads (of index i) share the 384 lines.
template <int kNT>
__device__ __forceinline__ void prefetch_state(const Out& o, int i, int n0, int k0, int N, int K) {
  for (int l = i; l < kBM * 2 * 3; l += kNT) {
    const int r = l / 6, arr = (l % 6) / 2, n = n0 + r, k = k0 + (l % 2) * 32;
    if (n >= N || k >= K) continue;
    const long long idx = (long long)n * K + k;
    prefetch_l2((arr == 0 ? o.master : arr == 1 ? o.exp_avg : o.exp_avg_sq) + idx);
  }
}

// The update (kFused) or the dW store of one tile held in shared memory c, by kNT threads.
template <bool kFused, int kNT>
__device__ __forceinline__ void tile_epilogue(const float (*c)[kLdC], const Out& o, int n0, int k0, int N, int K,
                                              const AdamWArgs& h) {
  if (o.vec) {
    constexpr int kGroups = kBM * kBN / 4, kBatch = 2;  // 4-parameter groups per tile; groups in flight
    for (int e0 = threadIdx.x; e0 < kGroups; e0 += kNT * kBatch) {
      float4 g[kBatch], p[kBatch], m[kBatch], v[kBatch];
      long long idx[kBatch];
      bool ok[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {  // every load of the batch is issued before any is used
        const int e = e0 + j * kNT, r = e / (kBN / 4), c4 = (e % (kBN / 4)) * 4, n = n0 + r, k = k0 + c4;
        ok[j] = e < kGroups && n < N && k < K;  // K % 4 == 0: k < K implies k + 3 < K
        idx[j] = (long long)n * K + k;
        if (!ok[j]) continue;
        g[j] = *reinterpret_cast<const float4*>(&c[r][c4]);
        if (kFused) {
          p[j] = *reinterpret_cast<const float4*>(o.master + idx[j]);
          m[j] = *reinterpret_cast<const float4*>(o.exp_avg + idx[j]);
          v[j] = *reinterpret_cast<const float4*>(o.exp_avg_sq + idx[j]);
        }
      }
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        if (!ok[j]) continue;
        if (kFused) {
          adamw_update(g[j].x, p[j].x, m[j].x, v[j].x, h);
          adamw_update(g[j].y, p[j].y, m[j].y, v[j].y, h);
          adamw_update(g[j].z, p[j].z, m[j].z, v[j].z, h);
          adamw_update(g[j].w, p[j].w, m[j].w, v[j].w, h);
          *reinterpret_cast<float4*>(o.master + idx[j]) = p[j];
          *reinterpret_cast<float4*>(o.exp_avg + idx[j]) = m[j];
          *reinterpret_cast<float4*>(o.exp_avg_sq + idx[j]) = v[j];
          const half2 lo = __floats2half2_rn(p[j].x, p[j].y), hi = __floats2half2_rn(p[j].z, p[j].w);
          *reinterpret_cast<uint2*>(o.w16 + idx[j]) = make_uint2(t4::as_u32(lo), t4::as_u32(hi));
        } else {
          *reinterpret_cast<float4*>(o.dw + idx[j]) = g[j];
        }
      }
    }
    return;
  }
  // Consecutive threads take consecutive k of one row: every global access is coalesced.
  for (int e = threadIdx.x; e < kBM * kBN; e += kNT) {
    const int r = e / kBN, cc = e % kBN, n = n0 + r, k = k0 + cc;
    if (n >= N || k >= K) continue;
    const long long idx = (long long)n * K + k;
    const float g = c[r][cc];
    if (kFused) {
      float p = o.master[idx], m = o.exp_avg[idx], v = o.exp_avg_sq[idx];
      adamw_update(g, p, m, v, h);
      o.master[idx] = p;
      o.exp_avg[idx] = m;
      o.exp_avg_sq[idx] = v;
      o.w16[idx] = __float2half_rn(p);
    } else {
      o.dw[idx] = g;
    }
  }
}

// kFused: apply AdamW to master/m/v and write w16 in the epilogue; else write dW (fp32) to dw.
template <bool kFused>
__global__ void __launch_bounds__(kThreads) fused_adamw_gemm_kernel(Operand dy, Operand x, int T, int N, int K,
                                                                    Out o, AdamWArgs h) {
  __shared__ __align__(128) Smem sm;
  const int warp = threadIdx.x >> 5, wm = warp >> 1, wn = warp & 1;
  const int tiles_n = (N + kBM - 1) / kBM, tiles_k = (K + kBN - 1) / kBN;
  const long long n_tiles = (long long)tiles_n * tiles_k;

  for (long long tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
    const int n0 = (int)(tile % tiles_n) * kBM, k0 = (int)(tile / tiles_n) * kBN;  // n fastest: X tile reuse in L2

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.f);

    Stage st;
    if (T > 0) load_stage(st, dy, x, T, 0, n0, k0);
    if (kFused && T <= kBT) prefetch_state<kThreads>(o, threadIdx.x, n0, k0, N, K);
    for (int t0 = 0; t0 < T; t0 += kBT) {
      store_stage(st, sm);
      __syncthreads();
      if (t0 + kBT < T) load_stage(st, dy, x, T, t0 + kBT, n0, k0);  // in flight during the MMAs
      if (kFused && t0 + 2 * kBT >= T && t0 + kBT < T) prefetch_state<kThreads>(o, threadIdx.x, n0, k0, N, K);
#pragma unroll
      for (int kk = 0; kk < kBT; kk += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::col_major> a[2];
        wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::row_major> b[2];
#pragma unroll
        for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(a[i], &sm.in.a[kk][wm * 32 + i * 16], kLdA);
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(b[j], &sm.in.b[kk][wn * 32 + j * 16], kLdB);
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
          for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
      }
      __syncthreads();
    }
    // The input tiles are dead after the last sync: stage the dW tile in the same shared memory.
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j)
        wmma::store_matrix_sync(&sm.c[wm * 32 + i * 16][wn * 32 + j * 16], acc[i][j], kLdC, wmma::mem_row_major);
    __syncthreads();
    tile_epilogue<kFused, kThreads>(sm.c, o, n0, k0, N, K, h);
    __syncthreads();  // sm.c is read before the next tile's stage overwrites it
  }
}

// ---------------------------------------------------------------- warp-specialized variant
// Software warp specialization without cp.async (t4::ws in common.cuh): 2 producer warps stream
// dY/X stages from global memory into a 2-stage shared-memory ring with ordinary loads and stores,
// each thread loading the next stage while it stores the current one; 4 consumer warps run the
// WMMAs. The epilogue is the plain kernel's, run by all 6 warps.
constexpr int kWsConsumers = 128, kWsProducers = 64, kWsThreads = kWsConsumers + kWsProducers;
constexpr int kWsBT = 32;  // tokens per stage (ring of 2 x 9 KB, in a union with the 17 KB dW tile)
constexpr int kWsChunks = 2 * kWsBT * kBM / 8 / kWsProducers;  // 16-byte chunks per producer thread per stage (8)
static_assert(kBM == kBN, "producers split chunks evenly between dY and X");

struct WsSmem {
  union {
    struct {
      half a[kWsBT][kLdA];
      half b[kWsBT][kLdB];
    } ring[t4::ws::kStages];
    float c[kBM][kLdC];
  };
};

struct WsRegs {
  uint4 r[kWsChunks];
};

__global__ void __launch_bounds__(kWsThreads) fused_adamw_ws_kernel(Operand dy, Operand x, int T, int N, int K,
                                                                    Out o, AdamWArgs h) {
  __shared__ __align__(128) WsSmem sm;
  const int warp = threadIdx.x >> 5;
  const bool producer = warp >= kWsConsumers / 32;
  const int wm = (warp >> 1) & 1, wn = warp & 1;
  const int tiles_n = (N + kBM - 1) / kBM, tiles_k = (K + kBN - 1) / kBN;
  const long long n_tiles = (long long)tiles_n * tiles_k;
  const int n_iters = (T + kWsBT - 1) / kWsBT;

  for (long long tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
    const int n0 = (int)(tile % tiles_n) * kBM, k0 = (int)(tile / tiles_n) * kBN;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.f);

    if (producer) {
      const int pt = threadIdx.x - kWsConsumers;
      // Producer chunk i: 0..255 are dY rows, 256..511 X rows, of 8 halves each.
      auto place = [&](int i, int& which, int& row, int& col) {
        const int idx = pt + i * kWsProducers, j = idx % (kWsBT * kBM / 8);
        which = idx / (kWsBT * kBM / 8), row = j / (kBM / 8), col = (j % (kBM / 8)) * 8;
      };
      auto load = [&](WsRegs& st, int it) {
#pragma unroll
        for (int i = 0; i < kWsChunks; ++i) {
          int which, row, col;
          place(i, which, row, col);
          const int t = it * kWsBT + row;
          st.r[i] = which == 0 ? load8(dy, t, T, n0 + col) : load8(x, t, T, k0 + col);
        }
      };
      auto store = [&](const WsRegs& st, int s) {
#pragma unroll
        for (int i = 0; i < kWsChunks; ++i) {
          int which, row, col;
          place(i, which, row, col);
          half* dst = which == 0 ? &sm.ring[s].a[row][col] : &sm.ring[s].b[row][col];
          *reinterpret_cast<uint4*>(dst) = st.r[i];
        }
      };
      t4::ws::produce<kWsThreads, WsRegs>(n_iters, load, store);
      prefetch_state<kWsProducers>(o, pt, n0, k0, N, K);  // while the consumers run the last stage
    } else {
      t4::ws::consume<kWsThreads>(n_iters, [&](int s) {
#pragma unroll
        for (int kk = 0; kk < kWsBT; kk += 16) {
          wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::col_major> a[2];
          wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::row_major> b[2];
#pragma unroll
          for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(a[i], &sm.ring[s].a[kk][wm * 32 + i * 16], kLdA);
#pragma unroll
          for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(b[j], &sm.ring[s].b[kk][wn * 32 + j * 16], kLdB);
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
          wmma::store_matrix_sync(&sm.c[wm * 32 + i * 16][wn * 32 + j * 16], acc[i][j], kLdC, wmma::mem_row_major);
    }
    __syncthreads();
    tile_epilogue<true, kWsThreads>(sm.c, o, n0, k0, N, K, h);
    __syncthreads();
  }
}

// The unfused optimizer step: the same update from a dW in global memory. kVec: 4 elements per
// thread with 16-byte fp32 and 8-byte fp16 accesses (n % 4 == 0 and aligned pointers).
template <bool kVec>
__global__ void __launch_bounds__(256) adamw_update_kernel(const float* __restrict__ dw, float* __restrict__ master,
                                                           float* __restrict__ exp_avg, float* __restrict__ exp_avg_sq,
                                                           half* __restrict__ w16, long long n, AdamWArgs h) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  if (kVec) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n / 4; i += stride) {
      const float4 g = reinterpret_cast<const float4*>(dw)[i];
      float4 p = reinterpret_cast<float4*>(master)[i], m = reinterpret_cast<float4*>(exp_avg)[i],
             v = reinterpret_cast<float4*>(exp_avg_sq)[i];
      adamw_update(g.x, p.x, m.x, v.x, h);
      adamw_update(g.y, p.y, m.y, v.y, h);
      adamw_update(g.z, p.z, m.z, v.z, h);
      adamw_update(g.w, p.w, m.w, v.w, h);
      reinterpret_cast<float4*>(master)[i] = p;
      reinterpret_cast<float4*>(exp_avg)[i] = m;
      reinterpret_cast<float4*>(exp_avg_sq)[i] = v;
      const half2 lo = __floats2half2_rn(p.x, p.y), hi = __floats2half2_rn(p.z, p.w);
      reinterpret_cast<uint2*>(w16)[i] = make_uint2(t4::as_u32(lo), t4::as_u32(hi));
    }
  } else {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
      float p = master[i], m = exp_avg[i], v = exp_avg_sq[i];
      adamw_update(dw[i], p, m, v, h);
      master[i] = p;
      exp_avg[i] = m;
      exp_avg_sq[i] = v;
      w16[i] = __float2half_rn(p);
    }
  }
}

int sm_count() {
  int dev = 0, sms = 1;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  return sms;
}

bool aligned(const void* p, int bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

Out make_out(float* master, float* m, float* v, half* w16, float* dw, int K) {
  const bool vec = K % 4 == 0 && (dw ? aligned(dw, 16)
                                     : aligned(master, 16) && aligned(m, 16) && aligned(v, 16) && aligned(w16, 8));
  return Out{master, m, v, w16, dw, vec};
}

AdamWArgs make_args(float decay, float w1, float b2, float w2, float bc2_sqrt, float eps, float neg_step) {
  return AdamWArgs{decay, w1, b2, w2, bc2_sqrt, eps, neg_step};
}

template <bool kFused>
int gemm_launch(const half* dy, const half* x, int T, int N, int K, float* master, float* m, float* v, half* w16,
                float* dw, const AdamWArgs& h, int max_ctas, cudaStream_t stream) {
  const Operand a{dy, N, N % 8 == 0 && aligned(dy, 16)};
  const Operand b{x, K, K % 8 == 0 && aligned(x, 16)};
  const long long tiles = (long long)((N + kBM - 1) / kBM) * ((K + kBN - 1) / kBN);
  int per_sm = 1;
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fused_adamw_gemm_kernel<kFused>, kThreads, 0);
  long long grid = (long long)sm_count() * (per_sm > 0 ? per_sm : 1);
  if (grid > tiles) grid = tiles;
  if (max_ctas > 0 && grid > max_ctas) grid = max_ctas;
  fused_adamw_gemm_kernel<kFused><<<(int)grid, kThreads, 0, stream>>>(a, b, T, N, K,
                                                                      make_out(master, m, v, w16, dw, K), h);
  T4_RETURN_LAUNCH_STATUS();
}

}  // namespace

// Fused: dW = dY[T, N]^T @ X[T, K] (never stored), then AdamW in place on master/exp_avg/exp_avg_sq
// [N, K] fp32 and w16 = fp16(master). T may be 0 (then g = 0, as torch with a zero gradient).
T4_API int t4_fused_adamw_gemm(const half* dy, const half* x, float* master, float* exp_avg, float* exp_avg_sq,
                               half* w16, int T, int N, int K, float decay, float w1, float b2, float w2,
                               float bc2_sqrt, float eps, float neg_step, int max_ctas, cudaStream_t stream) {
  if (T < 0 || N < 0 || K < 0) return static_cast<int>(cudaErrorInvalidValue);
  if (N == 0 || K == 0) return 0;
  const AdamWArgs h = make_args(decay, w1, b2, w2, bc2_sqrt, eps, neg_step);
  return gemm_launch<true>(dy, x, T, N, K, master, exp_avg, exp_avg_sq, w16, nullptr, h, max_ctas, stream);
}

// The same as t4_fused_adamw_gemm through the warp-specialized kernel (bit-identical results).
T4_API int t4_fused_adamw_gemm_ws(const half* dy, const half* x, float* master, float* exp_avg, float* exp_avg_sq,
                                  half* w16, int T, int N, int K, float decay, float w1, float b2, float w2,
                                  float bc2_sqrt, float eps, float neg_step, int max_ctas, cudaStream_t stream) {
  if (T < 0 || N < 0 || K < 0) return static_cast<int>(cudaErrorInvalidValue);
  if (N == 0 || K == 0) return 0;
  const AdamWArgs h = make_args(decay, w1, b2, w2, bc2_sqrt, eps, neg_step);
  const Operand a{dy, N, N % 8 == 0 && aligned(dy, 16)};
  const Operand b{x, K, K % 8 == 0 && aligned(x, 16)};
  const long long tiles = (long long)((N + kBM - 1) / kBM) * ((K + kBN - 1) / kBN);
  int per_sm = 1;
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fused_adamw_ws_kernel, kWsThreads, 0);
  long long grid = (long long)sm_count() * (per_sm > 0 ? per_sm : 1);
  if (grid > tiles) grid = tiles;
  if (max_ctas > 0 && grid > max_ctas) grid = max_ctas;
  fused_adamw_ws_kernel<<<(int)grid, kWsThreads, 0, stream>>>(
      a, b, T, N, K, make_out(master, exp_avg, exp_avg_sq, w16, nullptr, K), h);
  T4_RETURN_LAUNCH_STATUS();
}

// Unfused GEMM core of baseline (a): dw[N, K] fp32 = dY[T, N]^T @ X[T, K].
T4_API int t4_fused_adamw_wgrad(const half* dy, const half* x, float* dw, int T, int N, int K, int max_ctas,
                                cudaStream_t stream) {
  if (T < 0 || N < 0 || K < 0) return static_cast<int>(cudaErrorInvalidValue);
  if (N == 0 || K == 0) return 0;
  const AdamWArgs h{};
  return gemm_launch<false>(dy, x, T, N, K, nullptr, nullptr, nullptr, nullptr, dw, h, max_ctas, stream);
}

// Unfused optimizer step of baseline (a): the same update from dw [n] fp32 in global memory.
T4_API int t4_fused_adamw_step(const float* dw, float* master, float* exp_avg, float* exp_avg_sq, half* w16,
                               long long n, float decay, float w1, float b2, float w2, float bc2_sqrt, float eps,
                               float neg_step, int max_ctas, cudaStream_t stream) {
  if (n < 0) return static_cast<int>(cudaErrorInvalidValue);
  if (n == 0) return 0;
  const AdamWArgs h = make_args(decay, w1, b2, w2, bc2_sqrt, eps, neg_step);
  const bool vec = n % 4 == 0 && aligned(dw, 16) && aligned(master, 16) && aligned(exp_avg, 16) &&
                   aligned(exp_avg_sq, 16) && aligned(w16, 8);
  const long long work = vec ? n / 4 : n;
  long long grid = (work + 255) / 256;
  const long long cap = 8LL * sm_count();
  if (grid > cap) grid = cap;
  if (max_ctas > 0 && grid > max_ctas) grid = max_ctas;
  if (vec) adamw_update_kernel<true><<<(int)grid, 256, 0, stream>>>(dw, master, exp_avg, exp_avg_sq, w16, n, h);
  else adamw_update_kernel<false><<<(int)grid, 256, 0, stream>>>(dw, master, exp_avg, exp_avg_sq, w16, n, h);
  T4_RETURN_LAUNCH_STATUS();
}
