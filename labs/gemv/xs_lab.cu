// An x-stationary M = 1 INT4 GEMV under several launch knobs, against the library's
// row-group kernel, for `labs/gemv/m1_lab.py xs` (not part of the library; measured
// on an H200 it was no faster, see labs/gemv/xs_lab.json). It compiles the
// library's w4a16 family itself, so the trait is the library's Int4G.
#include "w4a16.cu"
#include "lab_tuning.cuh"

namespace {
// Int4G with x held in registers: one chunk of one row of x, 32 fp16 (word j = values 8j..8j+7).
struct XsInt4 : Int4G {
  struct XFrag {
    uint4 v[4];
  };
  __device__ __forceinline__ static void load_x(XFrag& xf, const half* __restrict__ x, int c) {
#pragma unroll
    for (int j = 0; j < 4; ++j) xf.v[j] = t4::gemv::ldg16(x + (long long)c * kChunk + 8 * j);
  }
  template <int M, int R>
  __device__ __forceinline__ static void dot_x(const Frag (&f)[R], const XFrag (&xf)[M], float (&acc)[R][M]) {
    dot_with<M, R>(f, [&](int m, int j) { return xf[m].v[j]; }, acc);
  }
};

// Launch knobs: R rows per task, at most W warps (K slices) per CTA, MB CTAs per SM at least
// (the register cap), at most P chunks per lane.
template <int R_, int W_, int MB_, int P_>
struct XsLab {
  static constexpr int R = R_, kMaxWarps = W_, kMinBlocks = MB_, kMaxP = P_;
};
}  // namespace

namespace t4 {
namespace gemv {
// The library's kernel reloads x for every row group (from L1). Here a CTA of S
// warps cuts K into S slices of cpw chunks: lane l of warp w owns chunks
// w * cpw + l + 32 p (p < P), loads their x once into registers and keeps it
// while the CTA walks the rows, R at a time (two register stages of weight loads). Per R
// rows each warp reduces its lanes' partials (a reduce-scatter over the lanes,
// then a butterfly), and the S slice partials meet in shared memory and are
// summed in slice order. Which lane and warp computes which partial depends
// only on the shape: bit-identical for any grid.
//
// The trait (XsInt4 above) adds to the library's
//   struct XFrag { ... };                                  // x of one chunk, one row of x
//   static void load_x(XFrag&, const half* x_row, int c);
//   template <int M, int R> static void dot_x(const Frag (&f)[R], const XFrag (&xf)[M], float (&acc)[R][M]);

// The R rows of `task` (clamped to N - 1) for the P chunks this lane owns.
template <class F, int R, int P>
__device__ __forceinline__ void xs_load(typename F::Frag (&f)[P][R], const Weights& w, int task, const int (&cs)[P],
                                        const bool (&on)[P]) {
#pragma unroll
  for (int p = 0; p < P; ++p) {
    if (on[p]) {
#pragma unroll
      for (int r = 0; r < R; ++r) F::load(f[p][r], w, min(task * R + r, w.N - 1), cs[p]);
    }
  }
}

// Dot products of one task, lane and warp reductions, slice sums, store.
template <class F, int M, int R, int P, int W>
__device__ __forceinline__ void xs_finish(const typename F::Frag (&f)[P][R], const typename F::XFrag (&xf)[P][M],
                                          const bool (&on)[P], int task, float (&red)[W][R * M],
                                          const Args& a) {
  constexpr int V = R * M;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float acc[R][M];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int m = 0; m < M; ++m) acc[r][m] = 0.f;
#pragma unroll
  for (int p = 0; p < P; ++p)
    if (on[p]) F::template dot_x<M, R>(f[p], xf[p], acc);
  float v[V];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int m = 0; m < M; ++m) v[r * M + m] = acc[r][m];
  // Reduce-scatter: at lane offset 16, 8, ... a lane keeps half of its values
  // (the upper half if its offset bit is set), adding its partner's copy.
  int idx = 0;
#pragma unroll
  for (int lvl = 0; (V >> lvl) > 1; ++lvl) {
    const int off = 16 >> lvl, h = V >> (lvl + 1);
    const bool hi = lane & off;
#pragma unroll
    for (int i = 0; i < h; ++i) {
      const float send = hi ? v[i] : v[i + h], keep = hi ? v[i + h] : v[i];
      v[i] = keep + __shfl_xor_sync(0xffffffffu, send, off);
    }
    idx += hi ? h : 0;
  }
#pragma unroll
  for (int off = 32 / V / 2; off > 0; off >>= 1) v[0] += __shfl_xor_sync(0xffffffffu, v[0], off);
  if ((lane & (32 / V - 1)) == 0) red[warp][idx] = v[0];
  __syncthreads();
  if (threadIdx.x < V) {
    float s = 0.f;
    for (int k = 0; k < (int)(blockDim.x >> 5); ++k) s += red[k][threadIdx.x];  // slice order
    const int n = task * R + threadIdx.x / M, m = threadIdx.x % M;
    if (n < a.w.N && m < a.M) a.y[m * a.ldy + n] = __float2half_rn(s);
  }
}

template <class F, int M, class T, int P>
__global__ void __launch_bounds__(32 * T::kMaxWarps, T::kMinBlocks) gemv_xs_kernel(Args a, int cpw) {
  constexpr int R = T::R, V = R * M, W = T::kMaxWarps;
  static_assert((V & (V - 1)) == 0 && V <= 32, "R x M must be a power of two <= 32");
  __shared__ float red[2][W][V];  // two buffers: one barrier per task
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int c_end = min((warp + 1) * cpw, a.w.K / F::kChunk);
  int cs[P];
  bool on[P];
  typename F::XFrag xf[P][M];
#pragma unroll
  for (int p = 0; p < P; ++p) {
    cs[p] = warp * cpw + lane + 32 * p;
    on[p] = cs[p] < c_end;
#pragma unroll
    for (int m = 0; m < M; ++m)
      if (on[p]) F::load_x(xf[p][m], a.x + m * a.ldx, cs[p]);
  }
  const int n_tasks = (a.w.N + R - 1) / R;
  typename F::Frag f0[P][R], f1[P][R];
  int task = blockIdx.x;
  if (task < n_tasks) xs_load<F, R, P>(f0, a.w, task, cs, on);
  for (; task < n_tasks; task += 2 * gridDim.x) {  // uniform across the CTA
    const int t1 = task + gridDim.x;
    if (t1 < n_tasks) xs_load<F, R, P>(f1, a.w, t1, cs, on);
    xs_finish<F, M, R, P, W>(f0, xf, on, task, red[0], a);
    if (t1 >= n_tasks) break;
    if (t1 + gridDim.x < n_tasks) xs_load<F, R, P>(f0, a.w, t1 + gridDim.x, cs, on);
    xs_finish<F, M, R, P, W>(f1, xf, on, t1, red[1], a);
  }
}

template <class F, int M, class T, int P>
inline int launch_xs_p(const Args& a, int S, int cpw, int max_ctas, int sms, cudaStream_t stream) {
  const int n_tasks = (a.w.N + T::R - 1) / T::R;
  int per_sm = 1;
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, gemv_xs_kernel<F, M, T, P>, 32 * S, 0);
  if (per_sm < 1) per_sm = 1;
  int grid = n_tasks < sms * per_sm ? n_tasks : sms * per_sm;  // persistent: one resident wave
  if (max_ctas > 0 && grid > max_ctas) grid = max_ctas;
  if (grid < 1) grid = 1;
  gemv_xs_kernel<F, M, T, P><<<grid, 32 * S, 0, stream>>>(a, cpw);
  return static_cast<int>(cudaGetLastError());
}

// Launch the x-stationary kernel if it takes this shape; returns -1 if it does not.
template <class F, int M, class T>
inline int launch_xs(const Args& a, int max_ctas, int sms, cudaStream_t stream) {
  constexpr int W = T::kMaxWarps;
  const int n_chunks = a.w.K / F::kChunk;
  const int P = (n_chunks + 32 * W - 1) / (32 * W);  // fewest chunks per lane that fit W warps
  const int S = (n_chunks + 32 * P - 1) / (32 * P);  // warps: slices of at most 32 P chunks
  const int cpw = (n_chunks + S - 1) / S;            // balanced slices
  if (P == 1) return launch_xs_p<F, M, T, 1>(a, S, cpw, max_ctas, sms, stream);
  if constexpr (T::kMaxP >= 2)
    if (P == 2) return launch_xs_p<F, M, T, 2>(a, S, cpw, max_ctas, sms, stream);
  if constexpr (T::kMaxP >= 3)
    if (P == 3) return launch_xs_p<F, M, T, 3>(a, S, cpw, max_ctas, sms, stream);
  return -1;
}

}  // namespace gemv
}  // namespace t4

// variant 0: the library's row-group kernel at M = 1 (split from the shape); 1..: the
// x-stationary kernel, knobs below. Returns a cudaError_t, or -1 where the variant does not
// take the shape (K too long for its warps x chunks per lane).
T4_API int xs_lab_gemv(int v, const void* qw, const void* sc, const void* x, void* y, int N, int K,
                       cudaStream_t st) {
  using namespace t4::gemv;
  const Args a = lab::int4_args(qw, sc, x, y, N, K);
  int dev = 0, sms = 1;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  switch (v) {
    case 0: {
      const int split = choose_split((N + 1) / 2, K / 32, sms);
      return split == 1 ? launch_ms<Int4G, 1, 1>(a, 0, st) : launch_ms<Int4G, 1, 4>(a, 0, st);
    }
    case 1: return launch_xs<XsInt4, 1, XsLab<4, 16, 1, 2>>(a, 0, sms, st);
    case 2: return launch_xs<XsInt4, 1, XsLab<2, 16, 1, 2>>(a, 0, sms, st);
    case 3: return launch_xs<XsInt4, 1, XsLab<8, 16, 1, 2>>(a, 0, sms, st);
    case 4: return launch_xs<XsInt4, 1, XsLab<4, 8, 2, 3>>(a, 0, sms, st);
    case 5: return launch_xs<XsInt4, 1, XsLab<4, 8, 3, 3>>(a, 0, sms, st);
    case 6: return launch_xs<XsInt4, 1, XsLab<2, 8, 3, 3>>(a, 0, sms, st);
    case 7: return launch_xs<XsInt4, 1, XsLab<2, 16, 2, 2>>(a, 0, sms, st);
    case 8: return launch_xs<XsInt4, 1, XsLab<1, 16, 1, 2>>(a, 0, sms, st);
    case 9: return launch_xs<XsInt4, 1, XsLab<8, 8, 2, 3>>(a, 0, sms, st);
    case 10: return launch_xs<XsInt4, 1, XsLab<4, 4, 4, 3>>(a, 0, sms, st);
    default: return -2;
  }
}
