// GGUF weight formats: bulk dequantization and the fused dequant-GEMV.
//
// Bulk: out[b*kValues + i] = value i of block b, fp32 (bit-exact with gguf-py's
// dequantize) or fp16 (that value rounded once). One thread per 8 values.
// GEMV: y[m, n] = sum_k x[m, k] W[n, k] through kernels/gemv.cuh. Two entry
// points: t4_gguf_gemv_packed (Q8_0, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS in the
// aligned GEMV layout of t4lib/ops/gguf/packing.py, traits in
// gguf_gemv_fp16.cuh), and
// t4_gguf_gemv on W as GGUF lays it out (row n = K / kValues contiguous
// blocks) for every format: that trait decodes a 32-value chunk with the same
// per-format routine as the bulk path (byte loads), rounds to fp16 and feeds
// the template's fp16-partial / fp32-accumulate dot.
// Int8 activations (opt-in): t4_gguf_quantize_x8 then t4_gguf_gemv_packed_x8, the
// GEMV-layout formats' X8 traits (DP4A on int8 x, see gguf_gemv_int8.cuh).
// Raw block decoders (bulk and as-stored GEMV): gguf_blocks.cuh.
#include "gemv.cuh"
#include "gguf_blocks.cuh"
#include "gguf_gemv_fp16.cuh"
#include "gguf_gemv_int8.cuh"

// t4lib:hot gguf_dequant_kernel gemv_kernel quantize_x8_kernel

namespace {

using namespace t4::gguf;

constexpr int kThreads = 256;

template <class F, typename TO>
__global__ void __launch_bounds__(kThreads) gguf_dequant_kernel(const uint8_t* __restrict__ blocks,
                                                                TO* __restrict__ out, long long n_groups) {
  constexpr int kGroups = F::kValues / 8;
  const long long stride = (long long)gridDim.x * kThreads;
  for (long long gid = (long long)blockIdx.x * kThreads + threadIdx.x; gid < n_groups; gid += stride) {
    const long long blk = gid / kGroups;
    const int g = static_cast<int>(gid % kGroups);
    float v[8];
    F::dequant8(blocks + blk * F::kBytes, g, v);
    if constexpr (sizeof(TO) == 4) {
      float4* o = reinterpret_cast<float4*>(out + gid * 8);
      o[0] = make_float4(v[0], v[1], v[2], v[3]);
      o[1] = make_float4(v[4], v[5], v[6], v[7]);
    } else {
      uint4 u;
      u.x = t4::as_u32(__floats2half2_rn(v[0], v[1]));
      u.y = t4::as_u32(__floats2half2_rn(v[2], v[3]));
      u.z = t4::as_u32(__floats2half2_rn(v[4], v[5]));
      u.w = t4::as_u32(__floats2half2_rn(v[6], v[7]));
      *reinterpret_cast<uint4*>(out + gid * 8) = u;
    }
  }
}

template <class F>
int dequant(const uint8_t* blocks, void* out, long long n_blocks, int out_half, int max_blocks, cudaStream_t s) {
  const long long n_groups = n_blocks * (F::kValues / 8);
  if (n_groups <= 0) return 0;
  int grid = t4::grid_for(n_groups, kThreads);
  if (max_blocks > 0 && grid > max_blocks) grid = max_blocks;
  if (out_half) gguf_dequant_kernel<F, half><<<grid, kThreads, 0, s>>>(blocks, static_cast<half*>(out), n_groups);
  else gguf_dequant_kernel<F, float><<<grid, kThreads, 0, s>>>(blocks, static_cast<float*>(out), n_groups);
  T4_RETURN_LAUNCH_STATUS();
}

// GEMV trait for any block format: a chunk is 32 consecutive values of a row
// (one Q8_0/IQ4_NL block or one 32-value sub-block of a 256-value super-block).
// load() decodes the chunk to fp16 (the block bytes are byte-packed, so the
// reads are byte loads of the block; scales are read per chunk).
template <class F>
struct GgufTrait {
  static constexpr int kChunk = 32;
  struct Frag { half2 w[4][4]; };
  __device__ static void load(Frag& f, const t4::gemv::Weights& w, int n, int c) {
    const long long v0 = (long long)c * kChunk;
    const uint8_t* blk = w.data + (long long)n * w.row_bytes + (v0 / F::kValues) * F::kBytes;
    const int g0 = static_cast<int>(v0 % F::kValues) / 8;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      float v[8];
      F::dequant8(blk, g0 + q, v);
#pragma unroll
      for (int t = 0; t < 4; ++t) f.w[q][t] = __floats2half2_rn(v[2 * t], v[2 * t + 1]);
    }
  }
  template <int M, int R>
  __device__ static void dot(const Frag (&f)[R], const t4::gemv::Weights&, int c, const half* __restrict__ x,
                             long long ldx, float (&acc)[R][M]) {
#pragma unroll
    for (int m = 0; m < M; ++m) {
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const uint4 xv = t4::gemv::ldg16(x + m * ldx + (long long)c * kChunk + 8 * q);
#pragma unroll
        for (int r = 0; r < R; ++r) acc[r][m] = t4::gemv::dot8(f[r].w[q], xv, acc[r][m]);
      }
    }
  }
};

template <class F>
int gemv(const uint8_t* w, const half* x, half* y, int M, int N, int K, int max_ctas, cudaStream_t s) {
  if (K % F::kValues) return static_cast<int>(cudaErrorInvalidValue);
  const t4::gemv::Weights wt{w, nullptr, nullptr, (long long)(K / F::kValues) * F::kBytes, N, K, 0};
  return t4::gemv::launch<GgufTrait<F>>(t4::gemv::contiguous_args(wt, x, y, M), max_ctas, s);
}

// The GEMV layout (t4lib/ops/gguf/packing.py) addresses its planes from N and K: no row stride.
t4::gemv::Weights packed_weights(const uint8_t* w, int N, int K) { return {w, nullptr, nullptr, 0, N, K, 0}; }

}  // namespace

namespace t4 {
namespace gemv {
// Decoded fp16 chunks are 16 registers each. M = 1, 2: 4 rows per warp share
// each activation load, at <= 168 (M = 1) and <= 255 (M = 2) registers, the
// most rows that spill in no format. Measured on an H200 at the 27B FFN shapes
// (tools/gemv_lab/gguf_raw_lab.py, results/nvidia-h200/gguf_raw_lab.json)
// against 1 row x 1 chunk at 80 registers: Q3_K, Q5_K and Q4_K 1.00-1.33x
// faster at M = 1 and 1.13-1.34x at M = 2. M >= 3: 1 row, as before.
// IQ4_XS (read this way only with layout="gguf") spills at M = 1 under 168.
template <class F, int M>
struct Tuning<GgufTrait<F>, M> {
  static constexpr int R = M <= 2 ? 4 : 1;
  static constexpr int U = 1;
  static constexpr int kMinBlocks =
      M == 1 ? (F::kType == t4::gguf::IQ4_XS::kType ? 2 : 3) : (M == 2 ? 2 : (M <= 4 ? 5 : 4));
};
// IQ4_NL and IQ3_S (lookups in registers / through L1) take fewer rows. Same
// sweep, second round, us at 17408x5120 / 5120x17408 against the 4-row tuning
// above ('lib' there):
//   IQ3_S, 2 rows at <= 80 registers (6 CTAs per SM): M = 1 51.0 / 49.3
//   against 51.3 / 53.5; M = 2 57.0 / 55.0 against 97.7 / 65.3.
//   IQ4_NL spills at 2 rows under 80 registers; without spills: M = 1, 1 row
//   at <= 80: 57.2 / 57.2 against 60.2 / 61.4; M = 2, 2 rows at <= 128 (4 CTAs
//   per SM): 58.2 / 62.3 against 108.3 / 69.2 (1 row: 70.8 / 74.8).
template <int M, int R1, int MB1, int R2, int MB2>
struct RawLookupTuning {
  static constexpr int R = M == 1 ? R1 : (M == 2 ? R2 : 1);
  static constexpr int U = 1;
  static constexpr int kMinBlocks = M == 1 ? MB1 : (M == 2 ? MB2 : (M <= 4 ? 5 : 4));
};
template <int M>
struct Tuning<GgufTrait<t4::gguf::IQ4_NL>, M> : RawLookupTuning<M, 1, 6, 2, 4> {};
template <int M>
struct Tuning<GgufTrait<t4::gguf::IQ3_S>, M> : RawLookupTuning<M, 2, 6, 2, 6> {};
}  // namespace gemv
}  // namespace t4

namespace t4 {
namespace gemv {
// GEMV-layout traits: R rows per warp share each activation load and its
// conversion to fp32 (the X sums included), which a chunk of one row would
// otherwise pay alone: per-row work is the quants, per-group work the
// activations. U chunks in flight per lane. Measured on an H200 at the 27B
// shapes (tools/gemv_lab/gguf_lab.py, results/nvidia-h200/gguf_lab_m*.json):
// M = 1, 4 rows x 1 chunk at <= 128 registers took Q4_K 17408x5120 from 33.8
// to 26.8 us, Q6_K 36.1 -> 29.3, IQ4_XS 35.3 -> 29.9, Q8_0 37.0 -> 32.4 (2 rows
// x 2 chunks before; 1 row: 53-55 us; 8 rows: no better). M = 2: 4 rows at
// <= 168 registers (at 128 Q4_K and Q6_K spill; Q6_K needs 255 to spill
// nothing), 26-34% less time than 2 rows.
// M = 3..8 are not tuned: fewer rows keep their fp32 accumulators in registers.
template <int M, int kMinBlocksM2 = 3>
struct PackedTuning {
  static constexpr int R = M <= 2 ? 4 : (M <= 4 ? 2 : 1);
  static constexpr int U = 1;
  static constexpr int kMinBlocks = M == 1 ? 4 : (M == 2 ? kMinBlocksM2 : (M <= 4 ? 4 : 3));
};
template <int M>
struct Tuning<t4::gguf::gv::PQ4_K, M> : PackedTuning<M> {};
// Q5_K and Q3_K: Q4_K's tuning (Q3_K, like Q6_K, spills at M = 2 under 168
// registers), as their layouts were timed in tools/gemv_lab (Q5_K at
// 17408x5120, M = 1: 29.2 us, results/nvidia-h200/q5k_lab.json).
template <int M>
struct Tuning<t4::gguf::gv::PQ5_K, M> : PackedTuning<M> {};
template <int M>
struct Tuning<t4::gguf::gv::PQ3_K, M> : PackedTuning<M, 2> {};
template <int M>
struct Tuning<t4::gguf::gv::PQ6_K, M> : PackedTuning<M, 2> {};
template <int M>
struct Tuning<t4::gguf::gv::PIQ4_XS, M> : PackedTuning<M> {};
template <int M>
struct Tuning<t4::gguf::gv::PQ8_0, M> : PackedTuning<M> {};
// Int8 activations: each format starts from its fp16 twin's tuning (not swept per format);
// Q5_K takes 255 registers at M = 2 (at 168 its 4 rows spill).
// Q8_0 at M = 1: 4 rows x 1 chunk at 3 CTAs per SM, the best of 6 launch shapes on an H200 at
// 17408x5120 (tools/gemv_lab/dp4a_lab.cu, results/nvidia-h200/dp4a_q8_0_lab.json: 26.3 us, 0.87 of
// copy bandwidth, against 33.0 us for fp16 x; 2 rows at 6 CTAs per SM 27.1 us).
template <int M>
struct Tuning<t4::gguf::gv::PQ8_0X8, M> : PackedTuning<M> {
  static constexpr int kMinBlocks = M == 1 ? 3 : PackedTuning<M>::kMinBlocks;
};
template <int M>
struct Tuning<t4::gguf::gv::PQ4_KX8, M> : PackedTuning<M> {};
template <int M>
struct Tuning<t4::gguf::gv::PQ5_KX8, M> : PackedTuning<M, 2> {};
template <int M>
struct Tuning<t4::gguf::gv::PQ3_KX8, M> : PackedTuning<M, 2> {};
template <int M>
struct Tuning<t4::gguf::gv::PQ6_KX8, M> : PackedTuning<M, 2> {};
template <int M>
struct Tuning<t4::gguf::gv::PIQ4_XSX8, M> : PackedTuning<M> {};
}  // namespace gemv
}  // namespace t4

#define T4_GGUF_SWITCH(type, CALL)            \
  switch (type) {                             \
    case Q8_0::kType: return CALL(Q8_0);      \
    case Q3_K::kType: return CALL(Q3_K);      \
    case Q4_K::kType: return CALL(Q4_K);      \
    case Q5_K::kType: return CALL(Q5_K);      \
    case Q6_K::kType: return CALL(Q6_K);      \
    case IQ4_NL::kType: return CALL(IQ4_NL);  \
    case IQ4_XS::kType: return CALL(IQ4_XS);  \
    case IQ3_S::kType: return CALL(IQ3_S);    \
    default: return static_cast<int>(cudaErrorInvalidValue); \
  }

// ggml_type: the GGML type id (8 Q8_0, 11 Q3_K, 12 Q4_K, 13 Q5_K, 14 Q6_K,
// 20 IQ4_NL, 21 IQ3_S, 23 IQ4_XS). out: n_blocks * values-per-block values,
// fp16 when out_half else fp32, 16-byte aligned.
T4_API int t4_gguf_dequant(int ggml_type, const uint8_t* blocks, void* out, long long n_blocks, int out_half,
                           int max_blocks, cudaStream_t stream) {
  using namespace t4::gguf;
#define T4_DQ(F) dequant<F>(blocks, out, n_blocks, out_half, max_blocks, stream)
  T4_GGUF_SWITCH(ggml_type, T4_DQ)
#undef T4_DQ
}

// y [M, N] fp16 = x [M, K] fp16 @ W^T, W [N, K] in GGUF blocks (row n at
// w + n * K / values-per-block * bytes-per-block). M in 1..8, K a multiple of
// the block's value count; x 16-byte aligned.
T4_API int t4_gguf_gemv(int ggml_type, const uint8_t* w, const half* x, half* y, int M, int N, int K, int max_ctas,
                        cudaStream_t stream) {
  using namespace t4::gguf;
#define T4_GV(F) gemv<F>(w, x, y, M, N, K, max_ctas, stream)
  T4_GGUF_SWITCH(ggml_type, T4_GV)
#undef T4_GV
}

// y [M, N] fp16 = x [M, K] fp16 @ W^T with W in the GEMV layout of
// t4lib/ops/gguf/packing.py (Q8_0, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS; K a multiple of 64;
// w 16-byte aligned; x 16-byte aligned).
T4_API int t4_gguf_gemv_packed(int ggml_type, const uint8_t* w, const half* x, half* y, int M, int N, int K,
                               int max_ctas, cudaStream_t stream) {
  using namespace t4::gguf;
  if (K % 64 || (ggml_type != Q8_0::kType && K % 256)) return static_cast<int>(cudaErrorInvalidValue);
  const auto a = t4::gemv::contiguous_args(packed_weights(w, N, K), x, y, M);
  switch (ggml_type) {
    case Q8_0::kType: return t4::gemv::launch<gv::PQ8_0>(a, max_ctas, stream);
    case Q3_K::kType: return t4::gemv::launch<gv::PQ3_K>(a, max_ctas, stream);
    case Q4_K::kType: return t4::gemv::launch<gv::PQ4_K>(a, max_ctas, stream);
    case Q5_K::kType: return t4::gemv::launch<gv::PQ5_K>(a, max_ctas, stream);
    case Q6_K::kType: return t4::gemv::launch<gv::PQ6_K>(a, max_ctas, stream);
    case IQ4_XS::kType: return t4::gemv::launch<gv::PIQ4_XS>(a, max_ctas, stream);
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
}

// x [M, K] fp16 -> int8 blocks for t4_gguf_gemv_packed_x8: q [M, K] int8 in value order, s [M, K / 32]
// of (float d, int sum) (t4lib/ops/int8_activations.py). K % 32 == 0; q 16-byte aligned, s 8-byte aligned.
T4_API int t4_gguf_quantize_x8(const half* x, int8_t* q, void* s, int M, int K, int max_ctas, cudaStream_t stream) {
  return t4::gemv::quantize_x8(x, K, q, static_cast<t4::gemv::XBlock*>(s), M, K, /*nibble_order=*/false, max_ctas,
                               stream);
}

// y [M, N] fp16 = x~ [M, K] @ W^T with x~ the int8 activations of t4_gguf_quantize_x8 and W in the GEMV
// layout (as t4_gguf_gemv_packed; Q8_0, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS). xq 16-byte aligned, xs 8-byte aligned.
T4_API int t4_gguf_gemv_packed_x8(int ggml_type, const uint8_t* w, const int8_t* xq, const void* xs, half* y, int M,
                                  int N, int K, int max_ctas, cudaStream_t stream) {
  using namespace t4::gguf;
  if (K % 64 || (ggml_type != Q8_0::kType && K % 256)) return static_cast<int>(cudaErrorInvalidValue);
  const auto a = t4::gemv::contiguous_args_x8(packed_weights(w, N, K), xq, static_cast<const t4::gemv::XBlock*>(xs),
                                              y, M);
  switch (ggml_type) {
    case Q8_0::kType: return t4::gemv::launch<gv::PQ8_0X8>(a, max_ctas, stream);
    case Q3_K::kType: return t4::gemv::launch<gv::PQ3_KX8>(a, max_ctas, stream);
    case Q4_K::kType: return t4::gemv::launch<gv::PQ4_KX8>(a, max_ctas, stream);
    case Q5_K::kType: return t4::gemv::launch<gv::PQ5_KX8>(a, max_ctas, stream);
    case Q6_K::kType: return t4::gemv::launch<gv::PQ6_KX8>(a, max_ctas, stream);
    case IQ4_XS::kType: return t4::gemv::launch<gv::PIQ4_XSX8>(a, max_ctas, stream);
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
}
