// M = 1, 2 launch-tuning variants of the GGUF GEMV on W as GGUF lays it out
// (kernels/gguf.cu's GgufTrait: IQ4_NL, IQ3_S, and the others with layout="gguf"),
// for labs/gemv/gguf_raw_lab.py (not part of the library). A variant is
// the library's trait with other Tuning knobs: R rows per warp, U chunks per
// load stage, MB minimum CTAs per SM; variant 8 is the trait under the
// library's own Tuning, so a build against an earlier commit's kernels/
// (labbuild.py --before) is that commit's library.
#include "gguf.cu"
#include "lab_tuning.cuh"

namespace {
template <class F, int M>
int raw_variant_m(int v, const t4::gemv::Args& a, cudaStream_t st) {
  using t4::gemv::launch_m;
  using T = GgufTrait<F>;
  switch (v) {
    case 0: return launch_m<lab::Tuned<T, 1, 1, false, 6>, M>(a, 0, st);  // the tuning before the 4-row sweep
    case 1: return launch_m<lab::Tuned<T, 2, 1, false, 4>, M>(a, 0, st);
    case 2: return launch_m<lab::Tuned<T, 4, 1, false, 4>, M>(a, 0, st);
    case 3: return launch_m<lab::Tuned<T, 4, 1, false, 3>, M>(a, 0, st);
    case 4: return launch_m<lab::Tuned<T, 2, 2, false, 3>, M>(a, 0, st);
    case 5: return launch_m<lab::Tuned<T, 4, 1, false, 2>, M>(a, 0, st);
    case 6: return launch_m<lab::Tuned<T, 2, 1, false, 6>, M>(a, 0, st);
    case 7: return launch_m<lab::Tuned<T, 8, 1, false, 2>, M>(a, 0, st);
    case 8: return launch_m<T, M>(a, 0, st);  // the library's Tuning of the kernels/ it was built from
    default: return 1;
  }
}

template <class F>
int raw_variant(int v, int M, int N, int K, const void* w, const void* x, void* y, cudaStream_t st) {
  const t4::gemv::Args a = lab::block_args(w, (long long)(K / F::kValues) * F::kBytes, x, y, M, N, K);
  return M == 1 ? raw_variant_m<F, 1>(v, a, st) : M == 2 ? raw_variant_m<F, 2>(v, a, st) : 1;
}
}  // namespace

T4_API int lab_gguf_raw_gemv(int type, int v, int M, const void* w, const void* x, void* y, int N, int K,
                             cudaStream_t st) {
  using namespace t4::gguf;
  switch (type) {
    case Q3_K::kType: return raw_variant<Q3_K>(v, M, N, K, w, x, y, st);
    case Q4_K::kType: return raw_variant<Q4_K>(v, M, N, K, w, x, y, st);
    case Q5_K::kType: return raw_variant<Q5_K>(v, M, N, K, w, x, y, st);
    case IQ4_NL::kType: return raw_variant<IQ4_NL>(v, M, N, K, w, x, y, st);
    case IQ3_S::kType: return raw_variant<IQ3_S>(v, M, N, K, w, x, y, st);
    default: return 1;
  }
}
