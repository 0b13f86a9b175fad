// GPU side of the GEMV-layout lab (q5k_trait.cuh, q3k_trait.cuh; not part of
// the library): the lab traits through the library's GEMV template, with the
// Q4_K packed tuning (4 rows per warp at M <= 2; no spills at any M).
#include "lab_tuning.cuh"
#include "q3k_trait.cuh"
#include "q5k_trait.cuh"

namespace lab {
template <int M, int kMinBlocksM2 = 3>
struct PackedLike {
  static constexpr int R = M <= 2 ? 4 : (M <= 4 ? 2 : 1);
  static constexpr int U = 1;
  static constexpr int kMinBlocks = M == 1 ? 4 : (M == 2 ? kMinBlocksM2 : (M <= 4 ? 4 : 3));
};
}  // namespace lab

namespace t4 {
namespace gemv {
template <int M>
struct Tuning<lab::PQ5_K, M> : lab::PackedLike<M> {};
template <int M>
struct Tuning<lab::PQ3_K, M> : lab::PackedLike<M, 2> {};  // 168 registers spill at M = 2
}  // namespace gemv
}  // namespace t4

// type: 13 (Q5_K) or 11 (Q3_K), W in the lab's GEMV layout; K a multiple of 256.
T4_API int lab_layout_gemv(int type, int M, const void* w, const void* x, void* y, int N, int K, cudaStream_t st) {
  if (K % 256) return static_cast<int>(cudaErrorInvalidValue);
  const t4::gemv::Args a = lab::block_args(w, 0, x, y, M, N, K);
  switch (type) {
    case 13: return t4::gemv::launch<lab::PQ5_K>(a, 0, st);
    case 11: return t4::gemv::launch<lab::PQ3_K>(a, 0, st);
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
}
