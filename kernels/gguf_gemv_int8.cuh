// GGUF GEMV-layout traits with int8 activations (DP4A); each extends its fp16 twin of
// gguf_gemv_fp16.cuh.
#pragma once
#include "gguf_gemv_fp16.cuh"

namespace t4 {
namespace gguf {
namespace gv {

// =====================================================================================
// Int8 activations (opt-in, gemv.cuh's X8: x quantized per block of 32 values, value order).
// Each trait below keeps its fp16 twin's Frag and load and swaps the dot: the quants become
// int8 words in value order (one mask or shift per 4 values; IQ4_XS: the codebook's signed
// bytes), DP4A forms exact integer sums against x's int8 per 32-value block (or 16-value
// sub-block), and only the per-block scale products are floats: y += d_x * d_w * isum in fp32.
// An offset o of the quants (Q3_K's 4, Q6_K's 32) is subtracted once per sub-block as
// o * sum(xq), the 16-value sums from one half's DP4A with 0x01010101 and the block's exact sum.
// The result is x~ @ W^T to fp32 accuracy, x~ = q * d (t4lib/ops/int8_activations.py).
// Loop order: per x block e of the chunk, the M rows of x are loaded once, then each weight
// row's 8 words are built once and meet all M: only one row's words are live at a time.

using t4::gemv::X8;
using t4::gemv::XBlock;

// sum of the 4 signed byte products of a and b, plus c
T4G_HD int dp4a(int a, int b, int c) {
#ifdef __CUDA_ARCH__
  return __dp4a(a, b, c);
#else
  for (int k = 0; k < 4; ++k)
    c += static_cast<int>(static_cast<int8_t>(a >> (8 * k))) * static_cast<int>(static_cast<int8_t>(b >> (8 * k)));
  return c;
#endif
}

// The 32 int8 activations of block b of row m (values 4i..4i+3 in word i) and the block's d and sum.
T4G_HD void x8_block(const X8& x, int m, int b, int (&q)[8], XBlock& blk) {
#ifdef __CUDA_ARCH__
  t4::gemv::x8_chunk32(x, m, b, q, blk);
#else
  std::memcpy(q, x.q + m * x.ldq + (long long)b * 32, 32);
  blk = x.s[m * x.lds + b];
#endif
}

// The M rows' x block 2c + e, and (kHalves) the exact sums of its two 16-value halves.
template <int M, bool kHalves>
struct XRows {
  int q[M][8];
  XBlock b[M];
  int half[M][kHalves ? 2 : 1];
  T4G_HD XRows(const X8& x, int c, int e) {
#pragma unroll
    for (int m = 0; m < M; ++m) {
      x8_block(x, m, 2 * c + e, q[m], b[m]);
      if constexpr (kHalves) {
        int s = 0;
#pragma unroll
        for (int i = 0; i < 4; ++i) s = dp4a(q[m][i], 0x01010101, s);
        half[m][0] = s;
        half[m][1] = b[m].sum - s;
      }
    }
  }
  // sum over words i0..i0+3 of dp4a(w[i], q[m][i])
  T4G_HD int dot4(const uint32_t (&w)[8], int m, int i0) const {
    int s = 0;
#pragma unroll
    for (int i = i0; i < i0 + 4; ++i) s = dp4a(static_cast<int>(w[i]), q[m][i], s);
    return s;
  }
  // acc + sum over the block's 16-value halves h of d_x * scale[h] * (sum(w xq) - offset * sum(xq)):
  // weights stored as u = q_w + offset, one scale per 16 values (kHalves only).
  T4G_HD float halves_dot(const uint32_t (&w)[8], int m, const float (&scale)[2], int offset, float acc) const {
#pragma unroll
    for (int h = 0; h < 2; ++h)
      acc = fmaf(b[m].d * scale[h], static_cast<float>(dot4(w, m, 4 * h) - offset * half[m][h]), acc);
    return acc;
  }
};

// ------------------------------------------------------------------ Q8_0, int8 x
// Both sides int8 already: the two 32-value blocks of the chunk are planes 2e, 2e + 1.
struct PQ8_0X8 : PQ8_0 {
  static constexpr bool kInt8X = true;
  template <int M, int R>
  T4G_HD static void dot(const Frag (&f)[R], const Weights&, int c, const X8& x, float (&acc)[R][M]) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const XRows<M, false> xr(x, c, e);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const uint4 p0 = f[r].q[2 * e], p1 = f[r].q[2 * e + 1];
        const uint32_t w[8] = {p0.x, p0.y, p0.z, p0.w, p1.x, p1.y, p1.z, p1.w};
        const float dw = h2f(e ? f[r].d >> 16 : f[r].d);
#pragma unroll
        for (int m = 0; m < M; ++m) {
          const int s = xr.dot4(w, m, 4) + xr.dot4(w, m, 0);
          acc[r][m] = fmaf(dw * xr.b[m].d, static_cast<float>(s), acc[r][m]);
        }
      }
    }
  }
};

// ------------------------------------------------------------------ Q4_K, Q5_K, int8 x
// Word wi of the chunk's quant bytes: low nibbles = values 4wi.. (sub-block 2p, x block 2c),
// high nibbles = values 32 + 4wi.. (sub-block 2p + 1, x block 2c + 1), both in value order.
// sum x~ * (D q - Mn) over a sub-block = d_x * (D * sum(q xq) - Mn * sum(xq)).
template <bool kFifth>
struct PK45X8 : PK45<kFifth> {
  using Base = PK45<kFifth>;
  using typename Base::Frag;
  static constexpr bool kInt8X = true;
  template <int M, int R>
  T4G_HD static void dot(const Frag (&f)[R], const Weights&, int c, const X8& x, float (&acc)[R][M]) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const XRows<M, false> xr(x, c, e);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        float D[2], Mn[2];
        Base::scales(f[r].h, c & 3, D, Mn);
        const uint32_t q[8] = {f[r].a.x, f[r].a.y, f[r].a.z, f[r].a.w, f[r].b.x, f[r].b.y, f[r].b.z, f[r].b.w};
        uint32_t w[8];
#pragma unroll
        for (int wi = 0; wi < 8; ++wi) {
          w[wi] = (q[wi] >> (4 * e)) & 0x0F0F0F0Fu;
          if constexpr (kFifth) w[wi] |= Base::fifth(wi < 4 ? f[r].u.x : f[r].u.y, 2 * (wi & 3) + e);
        }
#pragma unroll
        for (int m = 0; m < M; ++m) {
          const int s = xr.dot4(w, m, 4) + xr.dot4(w, m, 0);
          const float t = fmaf(D[e], static_cast<float>(s), -Mn[e] * static_cast<float>(xr.b[m].sum));
          acc[r][m] = fmaf(xr.b[m].d, t, acc[r][m]);
        }
      }
    }
  }
};
using PQ4_KX8 = PK45X8<false>;
using PQ5_KX8 = PK45X8<true>;

// ------------------------------------------------------------------ Q3_K, int8 x
// 16-value sub-block sb = 2e + h of the chunk (QA word sb; x block 2c + e, words 4h..4h + 3):
// PQ3_K's q3 bytes (value order, 0..7), d_x * ds * (sum(q3 xq) - 4 sum(xq)).
struct PQ3_KX8 : PQ3_K {
  static constexpr bool kInt8X = true;
  template <int M, int R>
  T4G_HD static void dot(const Frag (&f)[R], const Weights&, int c, const X8& x, float (&acc)[R][M]) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const XRows<M, true> xr(x, c, e);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const uint32_t words[4] = {f[r].q.x, f[r].q.y, f[r].q.z, f[r].q.w};
        const uint32_t u = e ? f[r].u.y : f[r].u.x;  // HB word of values 32e..32e + 31
        uint32_t w[8];
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int j = 0; j < 4; ++j)  // values 32e + 16h + 4j + k: bits 8k + 4h + j of u
            w[4 * h + j] = ((words[2 * e + h] >> (2 * j)) & 0x03030303u) | third(u, 4 * h + j);
        const float ds[2] = {dscale(f[r], 4 * (c & 3) + 2 * e), dscale(f[r], 4 * (c & 3) + 2 * e + 1)};
#pragma unroll
        for (int m = 0; m < M; ++m) acc[r][m] = xr.halves_dot(w, m, ds, 4, acc[r][m]);
      }
    }
  }
};

// ------------------------------------------------------------------ Q6_K, int8 x
// Word i of x block 2c + e (values 32e + 4i..) meets QA/QB word i's nibbles e (low or high) and
// QC word i / 2's 2-bit pairs at bit offset 2e + 4 (i & 1), joined into q bytes 0..63; 16-value
// sub-block 2e + i / 4: d_x * D * (sum(q xq) - 32 sum(xq)).
struct PQ6_KX8 : PQ6_K {
  static constexpr bool kInt8X = true;
  // bits 8k + b, 8k + b + 1 of u moved to bits 8k + 4, 8k + 5; b compile-time
  T4G_HD static uint32_t hi2(uint32_t u, int b) { return (b <= 4 ? u << (4 - b) : u >> (b - 4)) & 0x30303030u; }
  template <int M, int R>
  T4G_HD static void dot(const Frag (&f)[R], const Weights&, int c, const X8& x, float (&acc)[R][M]) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const XRows<M, true> xr(x, c, e);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const uint32_t q[8] = {f[r].a.x, f[r].a.y, f[r].a.z, f[r].a.w, f[r].b.x, f[r].b.y, f[r].b.z, f[r].b.w};
        const uint32_t hq[4] = {f[r].h.x, f[r].h.y, f[r].h.z, f[r].h.w};
        uint32_t w[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) w[i] = ((q[i] >> (4 * e)) & 0x0F0F0F0Fu) | hi2(hq[i >> 1], 2 * e + 4 * (i & 1));
        const float d = h2f(f[r].d);
        float D[2];
#pragma unroll
        for (int h = 0; h < 2; ++h)  // exact: 11 x 8 bits
          D[h] = d * static_cast<float>(static_cast<int8_t>((f[r].sc >> (8 * (2 * e + h))) & 0xFFu));
#pragma unroll
        for (int m = 0; m < M; ++m) acc[r][m] = xr.halves_dot(w, m, D, 32, acc[r][m]);
      }
    }
  }
};

// ------------------------------------------------------------------ IQ4_XS, int8 x
// iq4_lookup8's bytes kv + 128, xor 0x80 per byte: the signed codebook values, in value order.
struct PIQ4_XSX8 : PIQ4_XS {
  static constexpr bool kInt8X = true;
  template <int M, int R>
  T4G_HD static void dot(const Frag (&f)[R], const Weights&, int c, const X8& x, float (&acc)[R][M]) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {  // 32-value sub-block e: index words 4e..4e+3
      const XRows<M, false> xr(x, c, e);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const uint32_t sh = f[r].h.x >> 16, sl = f[r].h.y;
        const int j = 2 * (c & 3) + e;
        const int sc = static_cast<int>(((sl >> (4 * j)) & 15u) | (((sh >> (2 * j)) & 3u) << 4));
        const float D = h2f(f[r].h.x) * static_cast<float>(sc - 32);  // exact
        const uint32_t q[8] = {f[r].a.x, f[r].a.y, f[r].a.z, f[r].a.w, f[r].b.x, f[r].b.y, f[r].b.z, f[r].b.w};
        uint32_t w[8];
#pragma unroll
        for (int aa = 0; aa < 4; ++aa) {
          iq4_lookup8(q[4 * e + aa], w[2 * aa], w[2 * aa + 1]);
          w[2 * aa] ^= 0x80808080u;
          w[2 * aa + 1] ^= 0x80808080u;
        }
#pragma unroll
        for (int m = 0; m < M; ++m) {
          const int s = xr.dot4(w, m, 4) + xr.dot4(w, m, 0);
          acc[r][m] = fmaf(D * xr.b[m].d, static_cast<float>(s), acc[r][m]);
        }
      }
    }
  }
};

}  // namespace gv
}  // namespace gguf
}  // namespace t4
