// M = 1, 2 and M = 3, 4 (the rows of a qwen35 MTP verify) launch-tuning variants of the
// GEMV-layout GGUF traits for labs/gemv/gguf_lab.py (not part of the library). A variant
// is the library's trait with other Tuning knobs: R rows per warp, U chunks per load stage,
// PIPE (two register stages), MB (minimum CTAs per SM). R can change the K split (through the
// number of row groups), and with it the order of the fp32 sums.
#include "gguf_blocks.cuh"
#include "gguf_gemv_fp16.cuh"
#include "gguf_gemv_int8.cuh"
#include "lab_tuning.cuh"

namespace {
using namespace t4::gguf;

template <class F, int M>
int variant_m(int v, const t4::gemv::Args& a, cudaStream_t st) {
  using t4::gemv::launch_m;
  switch (v) {
    case 0: return launch_m<lab::Tuned<F, 2, 2, false, 4>, M>(a, 0, st);  // the library's M = 1 tuning before R = 4
    case 1: return launch_m<lab::Tuned<F, 2, 1, true, 4>, M>(a, 0, st);
    case 2: return launch_m<lab::Tuned<F, 1, 2, true, 4>, M>(a, 0, st);
    case 3: return launch_m<lab::Tuned<F, 1, 4, false, 4>, M>(a, 0, st);
    case 4: return launch_m<lab::Tuned<F, 4, 1, false, 4>, M>(a, 0, st);
    case 5: return launch_m<lab::Tuned<F, 2, 1, false, 8>, M>(a, 0, st);
    case 6: return launch_m<lab::Tuned<F, 1, 2, false, 6>, M>(a, 0, st);
    case 7: return launch_m<lab::Tuned<F, 1, 1, true, 6>, M>(a, 0, st);
    case 8: return launch_m<lab::Tuned<F, 2, 2, false, 3>, M>(a, 0, st);
    case 9: return launch_m<lab::Tuned<F, 1, 1, false, 8>, M>(a, 0, st);
    case 10: return launch_m<lab::Tuned<F, 4, 1, false, 3>, M>(a, 0, st);
    case 11: return launch_m<lab::Tuned<F, 4, 1, false, 2>, M>(a, 0, st);
    case 12: return launch_m<lab::Tuned<F, 8, 1, false, 2>, M>(a, 0, st);
    case 13: return launch_m<lab::Tuned<F, 8, 1, false, 3>, M>(a, 0, st);
    case 14: return launch_m<lab::Tuned<F, 4, 2, false, 2>, M>(a, 0, st);
    case 15: return launch_m<lab::Tuned<F, 4, 1, true, 2>, M>(a, 0, st);
    case 16: return launch_m<lab::Tuned<F, 8, 1, false, 4>, M>(a, 0, st);
    case 17: return launch_m<lab::Tuned<F, 2, 1, false, 4>, M>(a, 0, st);  // the library's M = 2 tuning before
    default: return 1;
  }
}

// M = 3, 4: variant 0 is the library's tuning (2 rows per warp, 4 CTAs per SM)
template <class F, int M>
int rows_variant_m(int v, const t4::gemv::Args& a, cudaStream_t st) {
  using t4::gemv::launch_m;
  switch (v) {
    case 0: return launch_m<lab::Tuned<F, 2, 1, false, 4>, M>(a, 0, st);
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
  switch (M) {
    case 1: return variant_m<F, 1>(v, a, st);
    case 2: return variant_m<F, 2>(v, a, st);
    case 3: return rows_variant_m<F, 3>(v, a, st);
    case 4: return rows_variant_m<F, 4>(v, a, st);
    default: return 1;
  }
}
}  // namespace

T4_API int lab_gguf_gemv(int type, int v, int M, const void* w, const void* x, void* y, int N, int K,
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
