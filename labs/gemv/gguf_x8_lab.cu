// The library's int8-activation GGUF traits (kernels/gguf_gemv_int8.cuh, GEMV layout) under other launch knobs at
// M = 1, for labs/gemv/gguf_x8_lab.py (not part of the library). Which lane sums which chunk does not
// depend on U, the register stages or the CTAs per SM; R can change the K split (through the number of
// row groups), and with it the order of the fp32 sums.
#include "gguf.cu"
#include "lab_tuning.cuh"

namespace {
using namespace t4::gguf;

template <class F>
int run_variant(int v, const t4::gemv::Args& a, cudaStream_t st) {
  switch (v) {
    case 0: return t4::gemv::launch_m<lab::Tuned<F, 4, 1, false, 4>, 1>(a, 0, st);  // the fp16 twins' M = 1 knobs
    case 1: return t4::gemv::launch_m<lab::Tuned<F, 2, 1, false, 8>, 1>(a, 0, st);
    case 2: return t4::gemv::launch_m<lab::Tuned<F, 2, 2, false, 6>, 1>(a, 0, st);
    case 3: return t4::gemv::launch_m<lab::Tuned<F, 4, 1, true, 3>, 1>(a, 0, st);
    case 4: return t4::gemv::launch_m<lab::Tuned<F, 2, 1, true, 6>, 1>(a, 0, st);
    case 5: return t4::gemv::launch_m<lab::Tuned<F, 4, 2, false, 3>, 1>(a, 0, st);
    case 6: return t4::gemv::launch_m<lab::Tuned<F, 1, 2, false, 8>, 1>(a, 0, st);
    case 7: return t4::gemv::launch_m<lab::Tuned<F, 2, 2, false, 8>, 1>(a, 0, st);
    case 8: return t4::gemv::launch_m<lab::Tuned<F, 4, 1, false, 3>, 1>(a, 0, st);
    default: return -2;
  }
}
}  // namespace

// y[1, N] = x~ @ W^T, W in the GEMV layout (pack_for_gemv), x~ from t4_gguf_quantize_x8. -2: unknown variant
// or type.
T4_API int gx8_lab_gemv(int ggml_type, int v, const void* packed, const void* xq, const void* xs, void* y, int N,
                        int K, cudaStream_t st) {
  t4::gemv::Args a = lab::block_args(packed, 0, nullptr, y, 1, N, K);
  a.x8 = t4::gemv::X8{static_cast<const int8_t*>(xq), static_cast<const t4::gemv::XBlock*>(xs), K, K / 32};
  switch (ggml_type) {
    case Q8_0::kType: return run_variant<gv::PQ8_0X8>(v, a, st);
    case Q3_K::kType: return run_variant<gv::PQ3_KX8>(v, a, st);
    case Q4_K::kType: return run_variant<gv::PQ4_KX8>(v, a, st);
    case Q5_K::kType: return run_variant<gv::PQ5_KX8>(v, a, st);
    case Q6_K::kType: return run_variant<gv::PQ6_KX8>(v, a, st);
    case IQ4_XS::kType: return run_variant<gv::PIQ4_XSX8>(v, a, st);
    default: return -2;
  }
}
