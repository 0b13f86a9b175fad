// CPU run of lab::PQ5_K (q5k_trait.cuh) over the library's host emulation of
// the GEMV lane walk (t4lib/ops/gguf/host_walk.cuh), for q5k_lab.py --cpu.
// argv: type N K M R packed.bin x.bin y.bin (type 13).
#include "host_walk.cuh"
#include "q5k_trait.cuh"

int main(int argc, char** argv) {
  return t4::gguf::host::host_main(argc, argv, [](int t, int M, int R, const lab::Weights& w, const half* x, float* y) {
    return t == 13 ? t4::gguf::host::dispatch<lab::PQ5_K>(M, R, w, x, y) : 4;
  });
}
