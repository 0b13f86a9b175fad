// A GEMV trait under other launch knobs, and the GEMV arguments, for the labs of
// this folder (not part of the library): lab::Tuned<F, R, U, PIPE, MB> is trait F
// with R rows per warp, U chunks per load stage, PIPE two register stages, MB
// minimum CTAs per SM.
#pragma once
#include "gemv.cuh"

namespace lab {
template <class F, int R_, int U_, bool P_, int MB_>
struct Tuned : F {};

// INT4-g128 weights (qweight [N, K/8] int32, scales [N, K/128] fp16), M = 1.
inline t4::gemv::Args int4_args(const void* qw, const void* sc, const void* x, void* y, int N, int K) {
  const t4::gemv::Weights w{static_cast<const uint8_t*>(qw), static_cast<const half*>(sc), nullptr, (long long)K / 2,
                            N, K, 128};
  return t4::gemv::contiguous_args(w, static_cast<const half*>(x), static_cast<half*>(y), 1);
}

inline t4::gemv::Args block_args(const void* w, long long row_bytes, const void* x, void* y, int M, int N, int K) {
  const t4::gemv::Weights wt{static_cast<const uint8_t*>(w), nullptr, nullptr, row_bytes, N, K, 0};
  return t4::gemv::contiguous_args(wt, static_cast<const half*>(x), static_cast<half*>(y), M);
}
}  // namespace lab

namespace t4 {
namespace gemv {
template <class F, int R_, int U_, bool P_, int MB_, int M>
struct Tuning<lab::Tuned<F, R_, U_, P_, MB_>, M> {
  static constexpr int R = R_;
  static constexpr int U = U_;
  static constexpr bool kPipe = P_;
  static constexpr int kMinBlocks = MB_;
};
}  // namespace gemv
}  // namespace t4
