// CPU emulation of gemv.cuh's lane/chunk walk of one warp over a
// __host__ __device__ GEMV trait, and the file I/O of a host check: shared by
// host_check.cu (the GEMV-layout traits of kernels/gguf_gemv_fp16.cuh and gguf_gemv_int8.cuh) and the
// GEMV labs (tools/gemv_lab) that check a new trait on the CPU.
// host_main<Pick>(argc, argv): argv = type N K M R packed.bin x.bin y.bin [xs.bin]
// (y fp32 [M, N]); Pick(type, M, R, w, acts, y) runs dispatch<Trait> for the type
// on acts.x (x.bin: fp16 [M, K]) or, when xs.bin is given, on acts.x8 for an
// int8-activation trait (x.bin: int8 [M, K] value order, xs.bin: [M, K / 32] of
// fp32 d and int32 sum, as gemv.cuh's XBlock).
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include "gguf_blocks.cuh"
#include "gguf_gemv_fp16.cuh"
#include "gguf_gemv_int8.cuh"

namespace t4 {
namespace gguf {
namespace host {

using gv::Weights;

inline std::vector<uint8_t> slurp(const char* p) {
  FILE* f = std::fopen(p, "rb");
  std::fseek(f, 0, SEEK_END);
  long n = std::ftell(f);
  std::fseek(f, 0, SEEK_SET);
  std::vector<uint8_t> v(n + 16);
  if (std::fread(v.data(), 1, n, f) != (size_t)n) std::exit(3);
  std::fclose(f);
  return v;
}

// The activations of a run: fp16 x, or (int8) gemv.cuh's X8.
struct Acts {
  const half* x;
  t4::gemv::X8 x8;
  bool int8;
};

template <class F, int M, int R, class X>
void run(const Weights& w, const X& x, float* y) {
  const int nc = w.K / F::kChunk;
  for (int row0 = 0; row0 < w.N; row0 += R) {
    int rows[R];
    for (int r = 0; r < R; ++r) rows[r] = row0 + r < w.N ? row0 + r : w.N - 1;
    float tot[R][M] = {};
    for (int lane = 0; lane < 32; ++lane) {  // lane l takes chunks l, l + 32, ...
      float acc[R][M] = {};
      for (int c = lane; c < nc; c += 32) {
        typename F::Frag f[R];
        for (int r = 0; r < R; ++r) F::load(f[r], w, rows[r], c);
        if constexpr (t4::gemv::TakesX8<F>::value) F::template dot<M, R>(f, w, c, x, acc);
        else F::template dot<M, R>(f, w, c, x, w.K, acc);
      }
      for (int r = 0; r < R; ++r)
        for (int m = 0; m < M; ++m) tot[r][m] += acc[r][m];
    }
    for (int r = 0; r < R; ++r)
      if (row0 + r < w.N)
        for (int m = 0; m < M; ++m) y[m * w.N + row0 + r] = tot[r][m];
  }
}

// x: const half* (fp16 traits) or X8 (int8-activation traits)
template <class F, class X>
int dispatch(int M, int R, const Weights& w, const X& x, float* y) {
  if (M == 1 && R == 4) run<F, 1, 4>(w, x, y);
  else if (M == 1 && R == 2) run<F, 1, 2>(w, x, y);
  else if (M == 1 && R == 1) run<F, 1, 1>(w, x, y);
  else if (M == 2 && R == 4) run<F, 2, 4>(w, x, y);
  else if (M == 3 && R == 2) run<F, 3, 2>(w, x, y);
  else if (M == 8 && R == 1) run<F, 8, 1>(w, x, y);
  else return 2;
  return 0;
}

template <class Pick>
int host_main(int argc, char** argv, Pick pick) {
  if (argc != 9 && argc != 10) return 1;
  const int t = std::atoi(argv[1]), N = std::atoi(argv[2]), K = std::atoi(argv[3]), M = std::atoi(argv[4]),
            R = std::atoi(argv[5]);
  std::vector<uint8_t> wb = slurp(argv[6]), xb = slurp(argv[7]);
  // 16-byte aligned copies
  uint4* wa = new uint4[wb.size() / 16 + 2];
  std::memcpy(wa, wb.data(), wb.size());
  uint4* xa = new uint4[xb.size() / 16 + 2];
  std::memcpy(xa, xb.data(), xb.size());
  Weights w{reinterpret_cast<const uint8_t*>(wa), nullptr, nullptr, 0, N, K, 0};
  std::vector<uint8_t> sb = argc == 10 ? slurp(argv[9]) : std::vector<uint8_t>(16);
  std::vector<t4::gemv::XBlock> s(sb.size() / sizeof(t4::gemv::XBlock) + 1);
  std::memcpy(s.data(), sb.data(), sb.size());
  const Acts acts{reinterpret_cast<const half*>(xa),
                  t4::gemv::X8{reinterpret_cast<const int8_t*>(xa), s.data(), K, K / 32}, argc == 10};
  std::vector<float> y((size_t)M * N, 0.f);
  const int rc = pick(t, M, R, w, acts, y.data());
  if (rc) return rc;
  FILE* f = std::fopen(argv[8], "wb");
  std::fwrite(y.data(), 4, y.size(), f);
  std::fclose(f);
  return 0;
}

}  // namespace host
}  // namespace gguf
}  // namespace t4
