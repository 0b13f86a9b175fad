// GGUF GEMV-layout traits with fp16 activations (the first of two trait headers; int8
// activations: gguf_gemv_int8.cuh). Raw block decoders: gguf_blocks.cuh.
#pragma once
#include <cstring>
#include <type_traits>
#include "common.cuh"
#include "gemv.cuh"

// =====================================================================================
// GEMV layout traits (plug into kernels/gemv.cuh). The weights are first
// permuted once into the layout of t4lib/ops/gguf/packing.py (same bytes, no
// loss): for each 64-value chunk c of row n, 16-byte planes at
// plane_i + (n * K/64 + c) * 16, so lane l of a warp (chunk c0 + l) reads
// 16 contiguous bytes of a 512-byte warp-wide run; the scale fields of each
// block sit in small arrays after the planes. Every trait issues only 16-byte
// (quant planes) and 2/4/8-byte (scale fields) loads, all naturally aligned.
//
// Arithmetic: Q8_0 turns each quant into an exact fp32 integer with one prmt
// (the byte into the mantissa of 2^23) and one subtraction; Q3_K, Q4_K, Q5_K
// and Q6_K (quants < 128) with one prmt into 0.5 + q/256 (see byte_h), the
// bits of a quant split over planes first joined with one shift and one mask
// per 4 values. Sums of x*q run per sub-block in fp32 and the sub-block scale
// (and min) is applied once: d*sc*sum(x*q) - dmin*m*sum(x). IQ4_XS looks the 4-bit codebook index up in a
// 16-byte table held in 4 registers (3 prmt per 4 values, no memory access),
// builds fp16 kv/128 exactly (magic 8 + t/128 minus 9) and takes half2 dot
// products of 8 values (as gemv.cuh's dot8), scaled by 128*d*(sc-32) in fp32.
// Functions are __host__ __device__ so a CPU test can run the traits.
#define T4G_HD __host__ __device__ __forceinline__

namespace t4 {
namespace gguf {
namespace gv {

using t4::gemv::Weights;

T4G_HD uint32_t prmt(uint32_t a, uint32_t b, uint32_t s) {
#ifdef __CUDA_ARCH__
  return __byte_perm(a, b, s);
#else
  const uint64_t pool = (static_cast<uint64_t>(b) << 32) | a;
  uint32_t r = 0;
  for (int n = 0; n < 4; ++n) r |= static_cast<uint32_t>((pool >> (8 * ((s >> (4 * n)) & 7))) & 0xFF) << (8 * n);
  return r;
#endif
}

T4G_HD uint4 ld16(const void* p) {
#ifdef __CUDA_ARCH__
  return __ldg(reinterpret_cast<const uint4*>(p));
#else
  uint4 v;
  std::memcpy(&v, p, 16);
  return v;
#endif
}
T4G_HD uint2 ld8(const void* p) {
#ifdef __CUDA_ARCH__
  return __ldg(reinterpret_cast<const uint2*>(p));
#else
  uint2 v;
  std::memcpy(&v, p, 8);
  return v;
#endif
}
T4G_HD uint32_t ld4(const void* p) {
#ifdef __CUDA_ARCH__
  return __ldg(reinterpret_cast<const unsigned int*>(p));
#else
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
#endif
}
T4G_HD uint32_t ld2(const void* p) {
#ifdef __CUDA_ARCH__
  return __ldg(reinterpret_cast<const unsigned short*>(p));
#else
  unsigned short v;
  std::memcpy(&v, p, 2);
  return v;
#endif
}

T4G_HD float u2f(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// fp16 bits (low 16 of u) -> float
T4G_HD float h2f(uint32_t u) { return __half2float(__ushort_as_half(static_cast<unsigned short>(u & 0xFFFFu))); }

// 8 fp16 activations (one uint4) -> 8 floats
T4G_HD void x8(uint4 v, float (&f)[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = h2f(w[i]);
    f[2 * i + 1] = h2f(w[i] >> 16);
  }
}

// Byte k (0..3, compile-time after unrolling) of w, an unsigned integer < 2^23,
// as an exact float minus `bias`: prmt puts it under the exponent of 2^23.
T4G_HD float byte_f(uint32_t w, int k, float bias) { return u2f(prmt(w, 0x4B000000u, 0x7540u | k)) - bias; }

// Byte k of w, an unsigned integer < 128, as the exact float 0.5 + w_k / 256
// (prmt puts it in mantissa bits 16..22 of 0.5). x * (0.5 + q/256) is exact
// in fp32 (11 x 8 significant bits), so sum(x * q) = 256 * (sum(x * q') -
// sum(x) / 2) needs no per-value subtraction; the cancellation costs about 4
// of fp32's 24 bits, far inside the fp16 output.
T4G_HD float byte_h(uint32_t w, int k) { return u2f(prmt(w, 0x3F000000u, 0x7054u | (k << 8))); }

// half2 helpers (device: the intrinsics; host: through float, for the CPU test)
T4G_HD uint32_t hsub2(uint32_t a, uint32_t b) {
#ifdef __CUDA_ARCH__
  return t4::as_u32(__hsub2(t4::as_half2(a), t4::as_half2(b)));
#else
  const float lo = h2f(a) - h2f(b), hi = h2f(a >> 16) - h2f(b >> 16);
  return static_cast<uint32_t>(__half_as_ushort(__float2half_rn(lo))) |
         (static_cast<uint32_t>(__half_as_ushort(__float2half_rn(hi))) << 16);
#endif
}
// sum of the 8 products w[i] * x[i] as gemv.cuh's dot8: fp16 products and 3
// fp16 additions per half, the two halves widened and added in fp32.
T4G_HD float dot8h(const uint32_t (&w)[4], uint4 xv) {
#ifdef __CUDA_ARCH__
  half2 p = __hmul2(t4::as_half2(w[0]), t4::as_half2(xv.x));
  p = __hfma2(t4::as_half2(w[1]), t4::as_half2(xv.y), p);
  p = __hfma2(t4::as_half2(w[2]), t4::as_half2(xv.z), p);
  p = __hfma2(t4::as_half2(w[3]), t4::as_half2(xv.w), p);
  const float2 f = __half22float2(p);
  return f.x + f.y;
#else
  const uint32_t xs[4] = {xv.x, xv.y, xv.z, xv.w};
  float lo = 0.f, hi = 0.f;
  for (int i = 0; i < 4; ++i) {
    lo = __half2float(__float2half_rn(lo + h2f(w[i]) * h2f(xs[i])));
    hi = __half2float(__float2half_rn(hi + h2f(w[i] >> 16) * h2f(xs[i] >> 16)));
  }
  return lo + hi;
#endif
}

constexpr int kChunk = 64;

// S[r][m] += sum_i xa[i] * w[r][i]: 8 activations of row m of x against the R rows' 8 weights
template <int M, int R>
T4G_HD void fma_rows(const float (&xa)[8], const float (&w)[R][8], int m, float (&S)[R][M]) {
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int i = 0; i < 8; ++i) S[r][m] += xa[i] * w[r][i];
}

// Offsets shared by the layouts: plane p (16 bytes per chunk) and the byte
// where the planes end.
T4G_HD long long chunk_off(const Weights& w, int n, int c) { return ((long long)n * (w.K / kChunk) + c) * 16; }
T4G_HD long long plane_bytes(const Weights& w) { return (long long)w.N * (w.K / kChunk) * 16; }
// super-block (256 values) index of chunk c of row n
T4G_HD long long sblock(const Weights& w, int n, int c) { return (long long)n * (w.K / 256) + (c >> 2); }

// ------------------------------------------------------------------ Q4_K, Q5_K
// Q4_K: QA, QB (the chunk's 32 quant bytes as stored: byte i = value i | value
// 32 + i << 4), HD (the block header as stored). Q5_K: the same sections from
// its own quant bytes and header, then HB [N, K/64, 8], the chunk's 64 fifth
// bits arranged so that one shift and one mask put the bits of any 4 values
// at bit 4 of their bytes: word s (0, 1) bit 8k + 2ww + e = fifth bit of value
// 32e + 16s + 4ww + k of the chunk. 5-bit quants are still < 128, so one dot
// (byte_h's 0.5 + q/256) serves both formats.
template <bool kFifth>
struct PK45 {
  static constexpr int kChunk = gv::kChunk;
  struct Bits {};                            // Q4_K: no fifth-bit plane
  struct Bits5 { uint2 u; };                 // Q5_K: the chunk's HB words
  struct Frag : std::conditional_t<kFifth, Bits5, Bits> { uint4 a, b, h; };
  T4G_HD static long long hb_off(const Weights& w, int n, int c) {
    return 2 * plane_bytes(w) + (long long)w.N * (w.K / 256) * 16 + ((long long)n * (w.K / kChunk) + c) * 8;
  }
  T4G_HD static void load(Frag& f, const Weights& w, int n, int c) {
    const long long o = chunk_off(w, n, c), pb = plane_bytes(w);
    f.a = ld16(w.data + o);
    f.b = ld16(w.data + pb + o);
    f.h = ld16(w.data + 2 * pb + sblock(w, n, c) * 16);
    if constexpr (kFifth) f.u = ld8(w.data + hb_off(w, n, c));
  }
  // scale and min of sub-blocks 2p + e (e = 0, 1) from the 16-byte header
  T4G_HD static void scales(const uint4& h, int p, float (&D)[2], float (&Mn)[2]) {
    const float d = h2f(h.x), dmin = h2f(h.x >> 16);
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int s = 16 * (p & 1) + 8 * e;  // byte (2p + e) & 3 of the scale words
      const uint32_t by = (h.y >> s) & 0xFFu, bz = (h.z >> s) & 0xFFu, bw = (h.w >> s) & 0xFFu;
      const uint32_t sc = p < 2 ? (by & 63u) : ((bw & 15u) | ((by >> 6) << 4));
      const uint32_t mn = p < 2 ? (bz & 63u) : ((bw >> 4) | ((bz >> 6) << 4));
      D[e] = d * static_cast<float>(sc);       // exact: 11 x 6 bits
      Mn[e] = dmin * static_cast<float>(mn);
    }
  }
  // bits 8k + b of u moved to bit 8k + 4 (the fifth bit of byte k's quant); b compile-time
  T4G_HD static uint32_t fifth(uint32_t u, int b) { return (b <= 4 ? u << (4 - b) : u >> (b - 4)) & 0x10101010u; }
  template <int M, int R>
  T4G_HD static void dot(const Frag (&f)[R], const Weights&, int c, const half* __restrict__ x, long long ldx,
                         float (&acc)[R][M]) {
    float D[R][2], Mn[R][2];
#pragma unroll
    for (int r = 0; r < R; ++r) scales(f[r].h, c & 3, D[r], Mn[r]);
    // sub-block sums: S0 over the low nibbles (values 0..31), S1 the high (32..63)
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
          const int wi = 2 * g + hf;  // word wi: values 4wi..4wi+3 (low nibbles) and 32+4wi.. (high)
          uint32_t lo = q[wi] & 0x0F0F0F0Fu, hi = (q[wi] >> 4) & 0x0F0F0F0Fu;
          if constexpr (kFifth) {  // value 4wi + k: word wi >> 2, bit 8k + 2(wi & 3) (+1 for 32 + 4wi + k)
            const uint32_t u = wi < 4 ? f[r].u.x : f[r].u.y;
            lo |= fifth(u, 2 * (wi & 3));
            hi |= fifth(u, 2 * (wi & 3) + 1);
          }
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            wl[r][4 * hf + k] = byte_h(lo, k);  // 0.5 + q/256
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
        // sum x*(d*sc*q - dmin*m) = 256*d*sc * (sum x*q' - sum x / 2) - dmin*m * sum x
        float a = acc[r][m];
        a += (256.f * D[r][0]) * (S0[r][m] - 0.5f * X0[m]);
        a -= Mn[r][0] * X0[m];
        a += (256.f * D[r][1]) * (S1[r][m] - 0.5f * X1[m]);
        a -= Mn[r][1] * X1[m];
        acc[r][m] = a;
      }
  }
};
using PQ4_K = PK45<false>;
using PQ5_K = PK45<true>;

// ------------------------------------------------------------------ Q3_K
// Sections, chunk c of row n (64 values; chunk p = c & 3 of its 256-value
// block, value v of the chunk = value 64p + v of the block):
//   QA [N, K/64, 16]: the 2-bit quants; word w bits 8k + 2j, 8k + 2j + 1 =
//      value 16w + 4j + k, so one shift and one mask give 4 values' bytes;
//   HB [N, K/64, 8]: the third bits (hmask); word s bit 8k + jj = value 32s + 4jj + k;
//   SC [N, K/256, 12]: the block's 6-bit scales as stored; D [N, K/256] fp16.
// Value = d * (scale_s - 32) * (q3 - 4), q3 = q2 | hbit << 2, s the 16-value
// sub-block: the dot sums x * (0.5 + q3/256) exactly in fp32 (byte_h) and the
// x sums, and applies each sub-block's scale once.
struct PQ3_K {
  static constexpr int kChunk = gv::kChunk;
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
  // d * (scale - 32) of sub-block s (0..15) of the block, as Q3_K::dequant8:
  // low 4 bits = nibble s >> 3 of scale byte s & 7, high 2 bits = pair s >> 2 of byte 8 + (s & 3)
  T4G_HD static float dscale(const Frag& f, int s) {
    const uint32_t lo_w = (s & 7) < 4 ? f.s0 : f.s1;
    const uint32_t lo = ((lo_w >> (8 * (s & 3))) >> (4 * (s >> 3))) & 0xFu;
    const uint32_t hi = ((f.s2 >> (8 * (s & 3))) >> (2 * (s >> 2))) & 0x3u;
    return h2f(f.d) * static_cast<float>(static_cast<int>(lo | (hi << 4)) - 32);
  }
  // bits 8k + jj of u moved to bit 8k + 2 (the third bit of byte k's quant); jj compile-time
  T4G_HD static uint32_t third(uint32_t u, int jj) { return (jj <= 2 ? u << (2 - jj) : u >> (jj - 2)) & 0x04040404u; }
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
            const int j = 2 * h8 + h;        // values 16sb + 4j + k
            const int v0 = 16 * sb + 4 * j;  // = 32s + 4jj: HB word s, bit 8k + jj
            const uint32_t u = v0 < 32 ? f[r].u.x : f[r].u.y;
            // the 2-bit quants of values v0..v0+3 in bits 0-1 of bytes 0..3, the third bit in bit 2
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
          fma_rows<M, R>(xa, wq, m, S);
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

// ------------------------------------------------------------------ Q6_K
struct PQ6_K {
  static constexpr int kChunk = gv::kChunk;
  struct Frag { uint4 a, b, h; uint32_t sc, d; };
  T4G_HD static void load(Frag& f, const Weights& w, int n, int c) {
    const long long o = chunk_off(w, n, c), pb = plane_bytes(w), sb = sblock(w, n, c);
    f.a = ld16(w.data + o);
    f.b = ld16(w.data + pb + o);
    f.h = ld16(w.data + 2 * pb + o);
    f.sc = ld4(w.data + 3 * pb + sb * 16 + 4 * (c & 3));
    f.d = ld2(w.data + 3 * pb + (long long)w.N * (w.K / 256) * 16 + sb * 2);
  }
  template <int M, int R>
  T4G_HD static void dot(const Frag (&f)[R], const Weights&, int c, const half* __restrict__ x, long long ldx,
                         float (&acc)[R][M]) {
    float D[R][4];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const float d = h2f(f[r].d);
#pragma unroll
      for (int s = 0; s < 4; ++s) D[r][s] = d * static_cast<float>(static_cast<int8_t>((f[r].sc >> (8 * s)) & 0xFFu));
    }
#pragma unroll
    for (int sp = 0; sp < 2; ++sp) {  // 16-value sub-blocks sp (values 16sp..) and 2+sp (32+16sp..)
      float Sl[R][M], Sh[R][M], Xl[M], Xh[M];
#pragma unroll
      for (int m = 0; m < M; ++m) {
        Xl[m] = Xh[m] = 0.f;
#pragma unroll
        for (int r = 0; r < R; ++r) Sl[r][m] = Sh[r][m] = 0.f;
      }
#pragma unroll
      for (int gg = 0; gg < 2; ++gg) {
        const int g = 2 * sp + gg;  // values 8g..8g+7 and 32+8g..32+8g+7
        float wl[R][8], wh[R][8];   // q as exact floats 0.5 + q/256
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const uint32_t q[8] = {f[r].a.x, f[r].a.y, f[r].a.z, f[r].a.w, f[r].b.x, f[r].b.y, f[r].b.z, f[r].b.w};
          const uint32_t hq[4] = {f[r].h.x, f[r].h.y, f[r].h.z, f[r].h.w};
          const uint32_t hw = hq[g], wa = q[2 * g], wb = q[2 * g + 1];
          const uint32_t v0 = (wa & 0x0F0F0F0Fu) | ((hw << 4) & 0x30303030u);         // values 8g..8g+3
          const uint32_t v1 = (wb & 0x0F0F0F0Fu) | (hw & 0x30303030u);                // values 8g+4..8g+7
          const uint32_t v2 = ((wa >> 4) & 0x0F0F0F0Fu) | ((hw << 2) & 0x30303030u);  // values 32+8g..
          const uint32_t v3 = ((wb >> 4) & 0x0F0F0F0Fu) | ((hw >> 2) & 0x30303030u);  // values 32+8g+4..
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            wl[r][k] = byte_h(v0, k);  // 0.5 + q/256, q in 0..63
            wl[r][4 + k] = byte_h(v1, k);
            wh[r][k] = byte_h(v2, k);
            wh[r][4 + k] = byte_h(v3, k);
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
            Xl[m] += xa[i];
            Xh[m] += xb[i];
          }
#pragma unroll
          for (int r = 0; r < R; ++r)
#pragma unroll
            for (int i = 0; i < 8; ++i) {
              Sl[r][m] += xa[i] * wl[r][i];
              Sh[r][m] += xb[i] * wh[r][i];
            }
        }
      }
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int m = 0; m < M; ++m)  // sum x*(q-32) = 256 * (sum x*q' - 0.625 * sum x)
          acc[r][m] += (256.f * D[r][sp]) * (Sl[r][m] - 0.625f * Xl[m]) +
                       (256.f * D[r][2 + sp]) * (Sh[r][m] - 0.625f * Xh[m]);
    }
  }
};

// ------------------------------------------------------------------ IQ4_XS
// 8 indices (nibbles of q, value order) -> bytes kv + 128: t0 values 0..3, t1
// values 4..7. The table lives in 4 registers (immediates); prmt reads only
// the low 16 bits (4 nibbles) of its selector. Per 4 values: two table prmts
// on the low 3 index bits, one prmt choosing per byte by index bit 3.
T4G_HD void iq4_lookup8(uint32_t q, uint32_t& t0, uint32_t& t1) {
  const uint32_t s = q & 0x77777777u;
  const uint32_t m = ((q >> 1) & 0x44444444u) | 0x32103210u;  // bit 3 of an index picks hi
  t0 = prmt(prmt(iq4_word(0), iq4_word(1), s), prmt(iq4_word(2), iq4_word(3), s), m);
  t1 = prmt(prmt(iq4_word(0), iq4_word(1), s >> 16), prmt(iq4_word(2), iq4_word(3), s >> 16), m >> 16);
}

struct PIQ4_XS {
  static constexpr int kChunk = gv::kChunk;
  struct Frag { uint4 a, b; uint2 h; };
  T4G_HD static void load(Frag& f, const Weights& w, int n, int c) {
    const long long o = chunk_off(w, n, c), pb = plane_bytes(w);
    f.a = ld16(w.data + o);
    f.b = ld16(w.data + pb + o);
    f.h = ld8(w.data + 2 * pb + sblock(w, n, c) * 8);
  }
  template <int M, int R>
  T4G_HD static void dot(const Frag (&f)[R], const Weights&, int c, const half* __restrict__ x, long long ldx,
                         float (&acc)[R][M]) {
    float D[R][2];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const float d = h2f(f[r].h.x);
      const uint32_t sh = f[r].h.x >> 16, sl = f[r].h.y;
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int j = 2 * (c & 3) + e;
        const int sc = static_cast<int>(((sl >> (4 * j)) & 15u) | (((sh >> (2 * j)) & 3u) << 4));
        D[r][e] = d * static_cast<float>(sc - 32) * 128.f;  // exact
      }
    }
#pragma unroll
    for (int e = 0; e < 2; ++e) {  // 32-value sub-block e: words 4e..4e+3
      float S[R][M];
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int m = 0; m < M; ++m) S[r][m] = 0.f;
#pragma unroll
      for (int aa = 0; aa < 4; ++aa) {
        const int a = 4 * e + aa;  // values 8a..8a+7
        uint32_t wv[R][4];         // fp16 kv/128 as half2 pairs
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const uint32_t q[8] = {f[r].a.x, f[r].a.y, f[r].a.z, f[r].a.w, f[r].b.x, f[r].b.y, f[r].b.z, f[r].b.w};
          uint32_t t0, t1;
          iq4_lookup8(q[a], t0, t1);
          // fp16 0x48tt = 8 + t/128; minus 9 (0x4880) = (t - 128)/128 = kv/128, exact
          wv[r][0] = hsub2(prmt(t0, 0x48484848u, 0x4140u), 0x48804880u);
          wv[r][1] = hsub2(prmt(t0, 0x48484848u, 0x4342u), 0x48804880u);
          wv[r][2] = hsub2(prmt(t1, 0x48484848u, 0x4140u), 0x48804880u);
          wv[r][3] = hsub2(prmt(t1, 0x48484848u, 0x4342u), 0x48804880u);
        }
#pragma unroll
        for (int m = 0; m < M; ++m) {
          const uint4 xv = ld16(x + m * ldx + (long long)c * kChunk + 8 * a);
#pragma unroll
          for (int r = 0; r < R; ++r) S[r][m] += dot8h(wv[r], xv);
        }
      }
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int m = 0; m < M; ++m) acc[r][m] += D[r][e] * S[r][m];
    }
  }
};

// ------------------------------------------------------------------ Q8_0
struct PQ8_0 {
  static constexpr int kChunk = gv::kChunk;
  struct Frag { uint4 q[4]; uint32_t d; };
  T4G_HD static void load(Frag& f, const Weights& w, int n, int c) {
    const long long o = chunk_off(w, n, c), pb = plane_bytes(w);
#pragma unroll
    for (int i = 0; i < 4; ++i) f.q[i] = ld16(w.data + i * pb + o);
    f.d = ld4(w.data + 4 * pb + ((long long)n * (w.K / 32) + 2 * c) * 2);
  }
  template <int M, int R>
  T4G_HD static void dot(const Frag (&f)[R], const Weights&, int c, const half* __restrict__ x, long long ldx,
                         float (&acc)[R][M]) {
#pragma unroll
    for (int blk = 0; blk < 2; ++blk) {  // 32-value block blk: values 32blk.., planes 2blk, 2blk+1
      float S[R][M];
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int m = 0; m < M; ++m) S[r][m] = 0.f;
#pragma unroll
      for (int gg = 0; gg < 4; ++gg) {
        const int g = 4 * blk + gg;  // values 8g..8g+7
        float wf[R][8];              // q as exact floats
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const uint4 pl = f[r].q[g >> 1];
          const uint32_t w0 = (g & 1) ? pl.z : pl.x, w1 = (g & 1) ? pl.w : pl.y;
          const uint32_t u0 = w0 ^ 0x80808080u, u1 = w1 ^ 0x80808080u;  // int8 q -> q + 128
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            wf[r][k] = byte_f(u0, k, 8388736.f);  // 2^23 + q + 128 - (2^23 + 128): q, exact
            wf[r][4 + k] = byte_f(u1, k, 8388736.f);
          }
        }
#pragma unroll
        for (int m = 0; m < M; ++m) {
          float xa[8];
          x8(ld16(x + m * ldx + (long long)c * kChunk + 8 * g), xa);
          fma_rows<M, R>(xa, wf, m, S);
        }
      }
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const float d = h2f(blk ? (f[r].d >> 16) : f[r].d);
#pragma unroll
        for (int m = 0; m < M; ++m) acc[r][m] += d * S[r][m];
      }
    }
  }
};

}  // namespace gv
}  // namespace gguf
}  // namespace t4
