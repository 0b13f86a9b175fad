// M = 3, 4 launch-tuning variants of the GEMV-layout GGUF traits (fp16 activations) for
// tools/gemv_lab/gguf_rows_lab.py (not part of the library): the rows of a qwen35 MTP verify forward
// (gamma + 1 rows). A variant is the library's trait with other Tuning knobs: R rows per warp and MB
// minimum CTAs per SM (register cap 65536 / 128 / MB), one chunk per load stage. R can change the K
// split (through the number of row groups), and with it the order of the fp32 sums.
#include "gguf_blocks.cuh"
#include "gguf_gemv_fp16.cuh"
#include "lab_tuning.cuh"

namespace {
using namespace t4::gguf;

template <class F, int M>
int variant_m(int v, const t4::gemv::Args& a, cudaStream_t st) {
  using t4::gemv::launch_m;
  switch (v) {
    case 0: return launch_m<lab::Tuned<F, 2, 1, false, 4>, M>(a, 0, st);  // the library's M = 3, 4 tuning
    case 1: return launch_m<lab::Tuned<F, 4, 1, false, 2>, M>(a, 0, st);
    case 2: return launch_m<lab::Tuned<F, 4, 1, false, 3>, M>(a, 0, st);
    case 3: return launch_m<lab::Tuned<F, 4, 1, false, 4>, M>(a, 0, st);
    case 4: return launch_m<lab::Tuned<F, 8, 1, false, 2>, M>(a, 0, st);
    case 5: return launch_m<lab::Tuned<F, 1, 1, false, 4>, M>(a, 0, st);
    case 6: return launch_m<lab::Tuned<F, 2, 1, false, 3>, M>(a, 0, st);
    case 7: return launch_m<lab::Tuned<F, 2, 1, false, 2>, M>(a, 0, st);
    default: return 1;
  }
}

template <class F>
int variant(int v, int M, const t4::gemv::Args& a, cudaStream_t st) {
  return M == 3 ? variant_m<F, 3>(v, a, st) : M == 4 ? variant_m<F, 4>(v, a, st) : 1;
}
}  // namespace

// y [M, N] = x [M, K] @ W^T, W in the GEMV layout (pack_for_gemv), M = 3 or 4; 1: unknown variant, type or M.
T4_API int lab_gguf_rows_gemv(int type, int v, int M, const void* w, const void* x, void* y, int N, int K,
                              cudaStream_t st) {
  const t4::gemv::Args a = lab::block_args(w, 0, x, y, M, N, K);
  switch (type) {
    case Q8_0::kType: return variant<gv::PQ8_0>(v, M, a, st);
    case Q3_K::kType: return variant<gv::PQ3_K>(v, M, a, st);
    case Q4_K::kType: return variant<gv::PQ4_K>(v, M, a, st);
    case Q5_K::kType: return variant<gv::PQ5_K>(v, M, a, st);
    case Q6_K::kType: return variant<gv::PQ6_K>(v, M, a, st);
    case IQ4_XS::kType: return variant<gv::PIQ4_XS>(v, M, a, st);
    default: return 1;
  }
}
