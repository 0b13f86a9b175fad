// CPU run of the GEMV-layout lab traits (q5k_trait.cuh, q3k_trait.cuh) over the
// library's host emulation of the GEMV lane walk (t4lib/ops/gguf/host_walk.cuh),
// for layout_lab.py --cpu. argv: type N K M R packed.bin x.bin y.bin.
#include "host_walk.cuh"
#include "q3k_trait.cuh"
#include "q5k_trait.cuh"

int main(int argc, char** argv) {
  using t4::gguf::host::dispatch;
  return t4::gguf::host::host_main(argc, argv, [](int t, int M, int R, const lab::Weights& w, const half* x, float* y) {
    return t == 13 ? dispatch<lab::PQ5_K>(M, R, w, x, y) : t == 11 ? dispatch<lab::PQ3_K>(M, R, w, x, y) : 4;
  });
}
