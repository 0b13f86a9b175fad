// Q3_K in a GEMV layout (a lab, not part of the library; see q5k_trait.cuh for
// the idea). Sections, chunk c of row n (64 values, chunk p = c & 3 of its
// 256-value block; value v of the chunk is value 64p + v of the block):
//   QA [N, K/64, 16]: the chunk's 2-bit quants; word w bit 8k + 2j (2 bits) =
//      value 16w + 4j + k, so one shift and one mask give 4 values' bytes;
//   HB [N, K/64, 8]: the chunk's third bits; word s bit 8k + jj = value
//      32s + 4jj + k;
//   SC [N, K/256, 12]: the block's 6-bit scales as stored; D [N, K/256] fp16.
// 110 bytes per 256 values, as GGUF. Value = d * (scale_s - 32) * (q3 - 4) with
// s the 16-value sub-block; the dot sums x * (0.5 + q3/256) exactly in fp32
// (byte_h) and the x sums, and applies each sub-block's scale once.
#pragma once
#include "gguf_formats.cuh"

namespace lab {

using t4::gemv::Weights;
using namespace t4::gguf::gv;

struct PQ3_K {
  static constexpr int kChunk = t4::gguf::gv::kChunk;
  struct Frag { uint4 q; uint2 u; uint32_t s0, s1, s2, d; };
  T4G_HD static void load(Frag& f, const Weights& w, int n, int c) {
    const long long nc = (long long)w.N * (w.K / kChunk), nb = (long long)w.N * (w.K / 256);
    const long long chunk = (long long)n * (w.K / kChunk) + c, blk = sblock(w, n, c);
    f.q = ld16(w.data + chunk * 16);
    f.u = ld8(w.data + nc * 16 + chunk * 8);
    const uint8_t* sc = w.data + nc * 24 + blk * 12;
    f.s0 = ld4(sc);
    f.s1 = ld4(sc + 4);
    f.s2 = ld4(sc + 8);
    f.d = ld2(w.data + nc * 24 + nb * 12 + blk * 2);
  }
  // d * (scale - 32) of sub-block s (0..15) of the block, as kernels/gguf_formats.cuh's Q3_K
  T4G_HD static float dscale(const Frag& f, int s) {
    const uint32_t lo_w = (s & 7) < 4 ? f.s0 : f.s1, hi_w = f.s2;
    const uint32_t lo = ((lo_w >> (8 * (s & 3))) >> (4 * (s >> 3))) & 0xFu;
    const uint32_t hi = ((hi_w >> (8 * (s & 3))) >> (2 * (s >> 2))) & 0x3u;
    return h2f(f.d) * static_cast<float>(static_cast<int>(lo | (hi << 4)) - 32);
  }
  // bit 2 of byte k = bit 8k + jj of u
  T4G_HD static uint32_t third(uint32_t u, int jj) {
    return (jj <= 2 ? u << (2 - jj) : u >> (jj - 2)) & 0x04040404u;
  }
  template <int M, int R>
  T4G_HD static void dot(const Frag (&f)[R], const Weights&, int c, const half* __restrict__ x, long long ldx,
                         float (&acc)[R][M]) {
#pragma unroll
    for (int sb = 0; sb < 4; ++sb) {  // 16-value sub-block 4p + sb: values 16sb.. of the chunk (QA word sb)
      float S[R][M], X[M];
#pragma unroll
      for (int m = 0; m < M; ++m) {
        X[m] = 0.f;
#pragma unroll
        for (int r = 0; r < R; ++r) S[r][m] = 0.f;
      }
#pragma unroll
      for (int h8 = 0; h8 < 2; ++h8) {  // values 16sb + 8h8 .. +7
        float wq[R][8];                  // exact floats 0.5 + q3/256
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const uint32_t words[4] = {f[r].q.x, f[r].q.y, f[r].q.z, f[r].q.w};
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int j = 2 * h8 + h;                 // values 16sb + 4j + k
            const int v0 = 16 * sb + 4 * j;           // = 32s + 4jj
            const uint32_t u = v0 < 32 ? f[r].u.x : f[r].u.y;
            const uint32_t q3 = ((words[sb] >> (2 * j)) & 0x03030303u) | third(u, (v0 & 31) >> 2);
#pragma unroll
            for (int k = 0; k < 4; ++k) wq[r][4 * h + k] = byte_h(q3, k);
          }
        }
#pragma unroll
        for (int m = 0; m < M; ++m) {
          float xa[8];
          x8(ld16(x + m * ldx + (long long)c * kChunk + 16 * sb + 8 * h8), xa);
#pragma unroll
          for (int i = 0; i < 8; ++i) X[m] += xa[i];
#pragma unroll
          for (int r = 0; r < R; ++r)
#pragma unroll
            for (int i = 0; i < 8; ++i) S[r][m] += xa[i] * wq[r][i];
        }
      }
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const float ds = dscale(f[r], 4 * (c & 3) + sb);
#pragma unroll
        for (int m = 0; m < M; ++m)  // sum x*(q3 - 4) = 256 * (sum x*q3' - sum x / 2) - 4 sum x
          acc[r][m] += ds * (256.f * (S[r][m] - 0.5f * X[m]) - 4.f * X[m]);
      }
    }
  }
};

}  // namespace lab
