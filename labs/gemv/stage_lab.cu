// The library's M = 1 INT4 GEMV (gemv.cuh row-group kernel, trait Int4G) under other register-stage
// counts and launch knobs, for labs/gemv/m1_lab.py stages (not part of the library). It compiles
// the library's w4a16 family itself.
#include "w4a16.cu"
#include "lab_tuning.cuh"

namespace lab {
// Int4G with R rows per warp, U chunks per stage, ST register stages, MB minimum CTAs per SM.
template <int R_, int U_, int ST_, int MB_>
struct Staged : Int4G {};
}  // namespace lab

namespace t4 {
namespace gemv {
template <int R_, int U_, int ST_, int MB_, int M>
struct Tuning<lab::Staged<R_, U_, ST_, MB_>, M> {
  static constexpr int R = R_, U = U_, kStages = ST_, kMinBlocks = MB_;
};
}  // namespace gemv
}  // namespace t4

// Returns a cudaError_t (-2 for an unknown variant).
T4_API int stage_lab_gemv(int v, const void* qw, const void* sc, const void* x, void* y, int N, int K,
                          cudaStream_t st) {
  using lab::Staged;
  const t4::gemv::Args a = lab::int4_args(qw, sc, x, y, N, K);
  switch (v) {
    case 0: return t4::gemv::launch_m<Staged<2, 2, 2, 4>, 1>(a, 0, st);  // the library's tuning
    case 1: return t4::gemv::launch_m<Staged<2, 1, 4, 4>, 1>(a, 0, st);
    case 2: return t4::gemv::launch_m<Staged<2, 1, 3, 4>, 1>(a, 0, st);
    case 3: return t4::gemv::launch_m<Staged<2, 2, 3, 4>, 1>(a, 0, st);
    case 4: return t4::gemv::launch_m<Staged<4, 1, 3, 4>, 1>(a, 0, st);
    case 5: return t4::gemv::launch_m<Staged<4, 1, 4, 4>, 1>(a, 0, st);
    case 6: return t4::gemv::launch_m<Staged<2, 1, 6, 4>, 1>(a, 0, st);
    case 7: return t4::gemv::launch_m<Staged<1, 2, 4, 4>, 1>(a, 0, st);
    case 8: return t4::gemv::launch_m<Staged<2, 1, 4, 5>, 1>(a, 0, st);
    case 9: return t4::gemv::launch_m<Staged<2, 1, 3, 5>, 1>(a, 0, st);
    case 10: return t4::gemv::launch_m<Staged<1, 1, 8, 4>, 1>(a, 0, st);
    case 11: return t4::gemv::launch_m<Staged<2, 1, 5, 4>, 1>(a, 0, st);
    case 12: return t4::gemv::launch_m<Staged<1, 2, 3, 5>, 1>(a, 0, st);
    case 13: return t4::gemv::launch_m<Staged<4, 1, 2, 4>, 1>(a, 0, st);
    case 14: return t4::gemv::launch_m<Staged<1, 1, 6, 6>, 1>(a, 0, st);
    case 15: return t4::gemv::launch_m<Staged<2, 1, 4, 6>, 1>(a, 0, st);
    // The K split S forced instead of chosen from the shape. S = 2 is left out: the kernel's
    // shared-memory partials have no index for the two row groups of a CTA at S = 2 (the library
    // launches only S = 1 and 4), and its first run here gave wrong outputs.
    case 16: return t4::gemv::launch_ms<Staged<2, 2, 2, 4>, 1, 1>(a, 0, st);
    case 18: return t4::gemv::launch_ms<Staged<2, 2, 2, 4>, 1, 4>(a, 0, st);
    case 20: return t4::gemv::launch_ms<Staged<4, 1, 3, 4>, 1, 4>(a, 0, st);
    case 22: return t4::gemv::launch_ms<Staged<2, 1, 3, 4>, 1, 4>(a, 0, st);
    default: return -2;
  }
}
