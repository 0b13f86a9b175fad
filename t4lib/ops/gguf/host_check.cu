// CPU run of the GEMV-layout traits of kernels/gguf_formats.cuh (they are
// __host__ __device__) over host_walk.cuh's emulation of gemv.cuh's lane walk,
// for tests/test_gguf.py. argv: type N K M R packed.bin x.bin y.bin (y fp32 [M, N]).
#include "host_walk.cuh"
using namespace t4::gguf::gv;
using t4::gguf::host::dispatch;

int main(int argc, char** argv) {
  return t4::gguf::host::host_main(argc, argv, [](int t, int M, int R, const Weights& w, const half* x, float* y) {
    switch (t) {
      case 8: return dispatch<PQ8_0>(M, R, w, x, y);
      case 11: return dispatch<PQ3_K>(M, R, w, x, y);
      case 12: return dispatch<PQ4_K>(M, R, w, x, y);
      case 13: return dispatch<PQ5_K>(M, R, w, x, y);
      case 14: return dispatch<PQ6_K>(M, R, w, x, y);
      case 23: return dispatch<PIQ4_XS>(M, R, w, x, y);
      default: return 4;
    }
  });
}
