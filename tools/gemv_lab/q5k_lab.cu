// GPU side of the Q5_K GEMV-layout lab (q5k_trait.cuh; not part of the
// library): lab::PQ5_K through the library's GEMV template, with the Q4_K
// packed tuning (4 rows per warp at M <= 2).
#include "lab_tuning.cuh"
#include "q5k_trait.cuh"

namespace t4 {
namespace gemv {
template <int M>
struct Tuning<lab::PQ5_K, M> {
  static constexpr int R = M <= 2 ? 4 : (M <= 4 ? 2 : 1);
  static constexpr int U = 1;
  static constexpr int kMinBlocks = M == 1 ? 4 : (M == 2 ? 3 : (M <= 4 ? 4 : 3));
};
}  // namespace gemv
}  // namespace t4

T4_API int lab_q5k_gemv(int M, const void* w, const void* x, void* y, int N, int K, cudaStream_t st) {
  if (K % 256) return static_cast<int>(cudaErrorInvalidValue);
  const t4::gemv::Args a = lab::block_args(w, 0, x, y, M, N, K);
  return t4::gemv::launch<lab::PQ5_K>(a, 0, st);
}
