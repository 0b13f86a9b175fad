// CPU run of the GEMV-layout traits of kernels/gguf_gemv_fp16.cuh and gguf_gemv_int8.cuh (they are
// __host__ __device__) over host_walk.cuh's emulation of gemv.cuh's lane walk,
// for tests/test_gguf.py. argv: type N K M R packed.bin x.bin y.bin [xs.bin]
// (y fp32 [M, N]); with xs.bin, x.bin is int8 x and the type's int8-activation
// trait runs (host_walk.cuh).
#include "host_walk.cuh"
using namespace t4::gguf::gv;
using t4::gguf::host::dispatch;

template <class F, class FX>
int pick2(bool int8, int M, int R, const Weights& w, const t4::gguf::host::Acts& a, float* y) {
  return int8 ? dispatch<FX>(M, R, w, a.x8, y) : dispatch<F>(M, R, w, a.x, y);
}

int main(int argc, char** argv) {
  return t4::gguf::host::host_main(
      argc, argv, [](int t, int M, int R, const Weights& w, const t4::gguf::host::Acts& a, float* y) {
        switch (t) {
          case 8: return pick2<PQ8_0, PQ8_0X8>(a.int8, M, R, w, a, y);
          case 11: return pick2<PQ3_K, PQ3_KX8>(a.int8, M, R, w, a, y);
          case 12: return pick2<PQ4_K, PQ4_KX8>(a.int8, M, R, w, a, y);
          case 13: return pick2<PQ5_K, PQ5_KX8>(a.int8, M, R, w, a, y);
          case 14: return pick2<PQ6_K, PQ6_KX8>(a.int8, M, R, w, a, y);
          case 23: return pick2<PIQ4_XS, PIQ4_XSX8>(a.int8, M, R, w, a, y);
          default: return 4;
        }
      });
}
