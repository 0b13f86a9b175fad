// Q5_K in a GEMV layout (a lab, not part of the library): the trait a future
// t4lib/ops/gguf/packing.py section would feed, checked on the CPU by
// layout_host.cu and timed against the library's GEMV on GGUF-stored Q5_K by
// layout_lab.py. Q5_K is Q4_K plus a fifth bit per value, so the layout is Q4_K's
// (QA, QB: the chunk's 32 quant bytes; HD: d, dmin and the 6-bit scales/mins)
// plus HB [N, K/64, 8]: the chunk's 64 fifth bits, arranged so that one shift
// and one mask put the bits of any 4 values at bit 4 of their bytes:
// word s (0, 1), bit 8k + 2ww + e = fifth bit of value 32e + 16s + 4ww + k of
// the chunk (Q5_K's qh: bit 2p + e of byte 16s + 4ww + k, chunk p of the block).
// Same 176 bytes per 256 values as GGUF. The dot is PQ4_K::dot with the fifth
// bit OR-ed into each quant byte (5-bit quants are still < 128, so byte_h's
// 0.5 + q/256 holds); adopting it in the library means one dot for both
// formats with a hook for the high bits, not this copy.
#pragma once
#include "gguf_formats.cuh"

namespace lab {

using t4::gemv::Weights;
using namespace t4::gguf::gv;

struct PQ5_K {
  static constexpr int kChunk = t4::gguf::gv::kChunk;
  struct Frag { uint4 a, b, h; uint2 u; };
  T4G_HD static long long hb_off(const Weights& w, int n, int c) {
    return 2 * plane_bytes(w) + (long long)w.N * (w.K / 256) * 16 + ((long long)n * (w.K / kChunk) + c) * 8;
  }
  T4G_HD static void load(Frag& f, const Weights& w, int n, int c) {
    const long long o = chunk_off(w, n, c), pb = plane_bytes(w);
    f.a = ld16(w.data + o);
    f.b = ld16(w.data + pb + o);
    f.h = ld16(w.data + 2 * pb + sblock(w, n, c) * 16);
    f.u = ld8(w.data + hb_off(w, n, c));
  }
  // bit 4 of byte k = bit 8k + c of u (c compile-time after unrolling)
  T4G_HD static uint32_t fifth(uint32_t u, int c) { return (c <= 4 ? u << (4 - c) : u >> (c - 4)) & 0x10101010u; }
  template <int M, int R>
  T4G_HD static void dot(const Frag (&f)[R], const Weights&, int c, const half* __restrict__ x, long long ldx,
                         float (&acc)[R][M]) {
    float D[R][2], Mn[R][2];
#pragma unroll
    for (int r = 0; r < R; ++r) PQ4_K::scales(f[r].h, c & 3, D[r], Mn[r]);
    float S0[R][M], S1[R][M], X0[M], X1[M];
#pragma unroll
    for (int m = 0; m < M; ++m) {
      X0[m] = X1[m] = 0.f;
#pragma unroll
      for (int r = 0; r < R; ++r) S0[r][m] = S1[r][m] = 0.f;
    }
#pragma unroll
    for (int g = 0; g < 4; ++g) {  // values 8g..8g+7 (low nibbles) and 32+8g.. (high nibbles)
      float wl[R][8], wh[R][8];    // the quants as exact floats 0.5 + q/256
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const uint32_t q[8] = {f[r].a.x, f[r].a.y, f[r].a.z, f[r].a.w, f[r].b.x, f[r].b.y, f[r].b.z, f[r].b.w};
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          const int wi = 2 * g + hf;  // values 4wi..4wi+3 and 32+4wi..
          const uint32_t u = wi < 4 ? f[r].u.x : f[r].u.y, wd = q[wi];
          const uint32_t lo = (wd & 0x0F0F0F0Fu) | fifth(u, 2 * (wi & 3));
          const uint32_t hi = ((wd >> 4) & 0x0F0F0F0Fu) | fifth(u, 2 * (wi & 3) + 1);
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            wl[r][4 * hf + k] = byte_h(lo, k);
            wh[r][4 * hf + k] = byte_h(hi, k);
          }
        }
      }
#pragma unroll
      for (int m = 0; m < M; ++m) {
        const half* xm = x + m * ldx + (long long)c * kChunk;
        float xa[8], xb[8];
        x8(ld16(xm + 8 * g), xa);
        x8(ld16(xm + 32 + 8 * g), xb);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          X0[m] += xa[i];
          X1[m] += xb[i];
        }
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
          for (int i = 0; i < 8; ++i) {
            S0[r][m] += xa[i] * wl[r][i];
            S1[r][m] += xb[i] * wh[r][i];
          }
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int m = 0; m < M; ++m) {
        float a = acc[r][m];
        a += (256.f * D[r][0]) * (S0[r][m] - 0.5f * X0[m]);
        a -= Mn[r][0] * X0[m];
        a += (256.f * D[r][1]) * (S1[r][m] - 0.5f * X1[m]);
        a -= Mn[r][1] * X1[m];
        acc[r][m] = a;
      }
  }
};

}  // namespace lab
