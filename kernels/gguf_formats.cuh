// GGUF block formats: per-format traits that dequantize 8 consecutive values of
// one block in fp32, bit-exact with gguf-py's `gguf.quants.dequantize` (the
// same products in the same order; __fmul_rn/__fsub_rn keep nvcc from fusing
// them into an FMA, which would round differently).
//
// A trait:  kValues (values per block), kBytes (bytes per block),
//           dequant8(blk, g, v): v[0..7] = values 8g .. 8g+7 of the block at `blk`.
// Blocks are byte-packed and most sizes are not multiples of 4, so block reads
// are byte or 16-bit loads (fp16 scales sit at even offsets).
#pragma once
#include <cstring>
#include <type_traits>
#include "common.cuh"
#include "gemv.cuh"

namespace t4 {
namespace gguf {

__device__ __forceinline__ float f16(const uint8_t* p) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(p[0] | (p[1] << 8))));
}
__device__ __forceinline__ float mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float sub(float a, float b) { return __fsub_rn(a, b); }

// The IQ4_NL / IQ4_XS nonlinear codebook (16 signed levels) plus 128, as bytes:
// entries 4i..4i+3 in word i. A lookup is two byte permutes of these
// immediates (iq4_value below): a __constant__ table would serialize a warp's
// 32 different indices.
__host__ __device__ constexpr uint32_t iq4_word(int i) {
  constexpr int kv[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
  return static_cast<uint32_t>(kv[4 * i] + 128) | (static_cast<uint32_t>(kv[4 * i + 1] + 128) << 8) |
         (static_cast<uint32_t>(kv[4 * i + 2] + 128) << 16) | (static_cast<uint32_t>(kv[4 * i + 3] + 128) << 24);
}

// codebook[idx] for idx in 0..15 (prmt selector bit 3 is a sign mode, so the
// low 3 bits pick the byte and bit 3 the word pair)
__device__ __forceinline__ int iq4_value(uint32_t idx) {
  const uint32_t s = idx & 7u;
  const uint32_t b = (idx & 8u) ? __byte_perm(iq4_word(2), iq4_word(3), s) : __byte_perm(iq4_word(0), iq4_word(1), s);
  return static_cast<int>(b & 0xFFu) - 128;
}

// IQ3_S grid: 512 entries of 4 magnitudes (one byte each, low byte first), as
// in ggml's iq3s_grid; generated from gguf-py's table. In global memory, read
// through the L1 (__ldg): a warp's gather of different entries then costs one
// pass per cache line touched, where the constant cache serializes per address.
__device__ const uint32_t kIQ3SGrid[512] = {
    0x01010101, 0x01010103, 0x01010105, 0x0101010b, 0x0101010f, 0x01010301, 0x01010303, 0x01010305,
    0x01010309, 0x0101030d, 0x01010501, 0x01010503, 0x0101050b, 0x01010707, 0x01010901, 0x01010905,
    0x0101090b, 0x0101090f, 0x01010b03, 0x01010b07, 0x01010d01, 0x01010d05, 0x01010f03, 0x01010f09,
    0x01010f0f, 0x01030101, 0x01030103, 0x01030105, 0x01030109, 0x01030301, 0x01030303, 0x0103030b,
    0x01030501, 0x01030507, 0x0103050f, 0x01030703, 0x0103070b, 0x01030909, 0x01030d03, 0x01030d0b,
    0x01030f05, 0x01050101, 0x01050103, 0x0105010b, 0x0105010f, 0x01050301, 0x01050307, 0x0105030d,
    0x01050503, 0x0105050b, 0x01050701, 0x01050709, 0x01050905, 0x0105090b, 0x0105090f, 0x01050b03,
    0x01050b07, 0x01050f01, 0x01050f07, 0x01070107, 0x01070303, 0x0107030b, 0x01070501, 0x01070505,
    0x01070703, 0x01070707, 0x0107070d, 0x01070909, 0x01070b01, 0x01070b05, 0x01070d0f, 0x01070f03,
    0x01070f0b, 0x01090101, 0x01090307, 0x0109030f, 0x01090503, 0x01090509, 0x01090705, 0x01090901,
    0x01090907, 0x01090b03, 0x01090f01, 0x010b0105, 0x010b0109, 0x010b0501, 0x010b0505, 0x010b050d,
    0x010b0707, 0x010b0903, 0x010b090b, 0x010b090f, 0x010b0d0d, 0x010b0f07, 0x010d010d, 0x010d0303,
    0x010d0307, 0x010d0703, 0x010d0b05, 0x010d0f03, 0x010f0101, 0x010f0105, 0x010f0109, 0x010f0501,
    0x010f0505, 0x010f050d, 0x010f0707, 0x010f0b01, 0x010f0b09, 0x03010101, 0x03010103, 0x03010105,
    0x03010109, 0x03010301, 0x03010303, 0x03010307, 0x0301030b, 0x0301030f, 0x03010501, 0x03010505,
    0x03010703, 0x03010709, 0x0301070d, 0x03010b09, 0x03010b0d, 0x03010d03, 0x03010f05, 0x03030101,
    0x03030103, 0x03030107, 0x0303010d, 0x03030301, 0x03030309, 0x03030503, 0x03030701, 0x03030707,
    0x03030903, 0x03030b01, 0x03030b05, 0x03030f01, 0x03030f0d, 0x03050101, 0x03050305, 0x0305030b,
    0x0305030f, 0x03050501, 0x03050509, 0x03050705, 0x03050901, 0x03050907, 0x03050b0b, 0x03050d01,
    0x03050f05, 0x03070103, 0x03070109, 0x0307010f, 0x03070301, 0x03070307, 0x03070503, 0x0307050f,
    0x03070701, 0x03070709, 0x03070903, 0x03070d05, 0x03070f01, 0x03090107, 0x0309010b, 0x03090305,
    0x03090309, 0x03090703, 0x03090707, 0x03090905, 0x0309090d, 0x03090b01, 0x03090b09, 0x030b0103,
    0x030b0301, 0x030b0307, 0x030b0503, 0x030b0701, 0x030b0705, 0x030b0b03, 0x030d0501, 0x030d0509,
    0x030d050f, 0x030d0909, 0x030d090d, 0x030f0103, 0x030f0107, 0x030f0301, 0x030f0305, 0x030f0503,
    0x030f070b, 0x030f0903, 0x030f0d05, 0x030f0f01, 0x05010101, 0x05010103, 0x05010107, 0x0501010b,
    0x0501010f, 0x05010301, 0x05010305, 0x05010309, 0x0501030d, 0x05010503, 0x05010507, 0x0501050f,
    0x05010701, 0x05010705, 0x05010903, 0x05010907, 0x0501090b, 0x05010b01, 0x05010b05, 0x05010d0f,
    0x05010f01, 0x05010f07, 0x05010f0b, 0x05030101, 0x05030105, 0x05030301, 0x05030307, 0x0503030f,
    0x05030505, 0x0503050b, 0x05030703, 0x05030709, 0x05030905, 0x05030b03, 0x05050103, 0x05050109,
    0x0505010f, 0x05050503, 0x05050507, 0x05050701, 0x0505070f, 0x05050903, 0x05050b07, 0x05050b0f,
    0x05050f03, 0x05050f09, 0x05070101, 0x05070105, 0x0507010b, 0x05070303, 0x05070505, 0x05070509,
    0x05070703, 0x05070707, 0x05070905, 0x05070b01, 0x05070d0d, 0x05090103, 0x0509010f, 0x05090501,
    0x05090507, 0x05090705, 0x0509070b, 0x05090903, 0x05090f05, 0x05090f0b, 0x050b0109, 0x050b0303,
    0x050b0505, 0x050b070f, 0x050b0901, 0x050b0b07, 0x050b0f01, 0x050d0101, 0x050d0105, 0x050d010f,
    0x050d0503, 0x050d0b0b, 0x050d0d03, 0x050f010b, 0x050f0303, 0x050f050d, 0x050f0701, 0x050f0907,
    0x050f0b01, 0x07010105, 0x07010303, 0x07010307, 0x0701030b, 0x0701030f, 0x07010505, 0x07010703,
    0x07010707, 0x0701070b, 0x07010905, 0x07010909, 0x0701090f, 0x07010b03, 0x07010d07, 0x07010f03,
    0x07030103, 0x07030107, 0x0703010b, 0x07030309, 0x07030503, 0x07030507, 0x07030901, 0x07030d01,
    0x07030f05, 0x07030f0d, 0x07050101, 0x07050305, 0x07050501, 0x07050705, 0x07050709, 0x07050b01,
    0x07070103, 0x07070301, 0x07070309, 0x07070503, 0x07070507, 0x0707050f, 0x07070701, 0x07070903,
    0x07070907, 0x0707090f, 0x07070b0b, 0x07070f07, 0x07090107, 0x07090303, 0x0709030d, 0x07090505,
    0x07090703, 0x07090b05, 0x07090d01, 0x07090d09, 0x070b0103, 0x070b0301, 0x070b0305, 0x070b050b,
    0x070b0705, 0x070b0909, 0x070b0b0d, 0x070b0f07, 0x070d030d, 0x070d0903, 0x070f0103, 0x070f0107,
    0x070f0501, 0x070f0505, 0x070f070b, 0x09010101, 0x09010109, 0x09010305, 0x09010501, 0x09010509,
    0x0901050f, 0x09010705, 0x09010903, 0x09010b01, 0x09010f01, 0x09030105, 0x0903010f, 0x09030303,
    0x09030307, 0x09030505, 0x09030701, 0x0903070b, 0x09030907, 0x09030b03, 0x09030b0b, 0x09050103,
    0x09050107, 0x09050301, 0x0905030b, 0x09050503, 0x09050707, 0x09050901, 0x09050b0f, 0x09050d05,
    0x09050f01, 0x09070109, 0x09070303, 0x09070307, 0x09070501, 0x09070505, 0x09070703, 0x0907070b,
    0x09090101, 0x09090105, 0x09090509, 0x0909070f, 0x09090901, 0x09090f03, 0x090b010b, 0x090b010f,
    0x090b0503, 0x090b0d05, 0x090d0307, 0x090d0709, 0x090d0d01, 0x090f0301, 0x090f030b, 0x090f0701,
    0x090f0907, 0x090f0b03, 0x0b010105, 0x0b010301, 0x0b010309, 0x0b010505, 0x0b010901, 0x0b010909,
    0x0b01090f, 0x0b010b05, 0x0b010d0d, 0x0b010f09, 0x0b030103, 0x0b030107, 0x0b03010b, 0x0b030305,
    0x0b030503, 0x0b030705, 0x0b030f05, 0x0b050101, 0x0b050303, 0x0b050507, 0x0b050701, 0x0b05070d,
    0x0b050b07, 0x0b070105, 0x0b07010f, 0x0b070301, 0x0b07050f, 0x0b070909, 0x0b070b03, 0x0b070d0b,
    0x0b070f07, 0x0b090103, 0x0b090109, 0x0b090501, 0x0b090705, 0x0b09090d, 0x0b0b0305, 0x0b0b050d,
    0x0b0b0b03, 0x0b0b0b07, 0x0b0d0905, 0x0b0f0105, 0x0b0f0109, 0x0b0f0505, 0x0d010303, 0x0d010307,
    0x0d01030b, 0x0d010703, 0x0d010707, 0x0d010d01, 0x0d030101, 0x0d030501, 0x0d03050f, 0x0d030d09,
    0x0d050305, 0x0d050709, 0x0d050905, 0x0d050b0b, 0x0d050d05, 0x0d050f01, 0x0d070101, 0x0d070309,
    0x0d070503, 0x0d070901, 0x0d09050b, 0x0d090907, 0x0d090d05, 0x0d0b0101, 0x0d0b0107, 0x0d0b0709,
    0x0d0b0d01, 0x0d0d010b, 0x0d0d0901, 0x0d0f0303, 0x0d0f0307, 0x0f010101, 0x0f010109, 0x0f01010f,
    0x0f010501, 0x0f010505, 0x0f01070d, 0x0f010901, 0x0f010b09, 0x0f010d05, 0x0f030105, 0x0f030303,
    0x0f030509, 0x0f030907, 0x0f03090b, 0x0f050103, 0x0f050109, 0x0f050301, 0x0f05030d, 0x0f050503,
    0x0f050701, 0x0f050b03, 0x0f070105, 0x0f070705, 0x0f07070b, 0x0f070b07, 0x0f090103, 0x0f09010b,
    0x0f090307, 0x0f090501, 0x0f090b01, 0x0f0b0505, 0x0f0b0905, 0x0f0d0105, 0x0f0d0703, 0x0f0f0101,
};

// Q8_0: d (fp16) + 32 int8. v = q * d.
struct Q8_0 {
  static constexpr int kValues = 32, kBytes = 34, kType = 8;
  __device__ static void dequant8(const uint8_t* b, int g, float (&v)[8]) {
    const float d = f16(b);
#pragma unroll
    for (int t = 0; t < 8; ++t) v[t] = mul(static_cast<float>(static_cast<int8_t>(b[2 + 8 * g + t])), d);
  }
};

// 6-bit scale/min pair j (0..7) of the 12-byte K-quant scale field.
__device__ __forceinline__ void k_scale_min(const uint8_t* s, int j, int& sc, int& mn) {
  if (j < 4) { sc = s[j] & 0x3F; mn = s[4 + j] & 0x3F; }
  else { sc = (s[8 + j - 4] & 0x0F) | ((s[j - 4] >> 2) & 0x30); mn = (s[8 + j - 4] >> 4) | ((s[4 + j - 4] >> 2) & 0x30); }
}

// Q4_K: d, dmin (fp16), 12 bytes of 6-bit scales/mins, 128 bytes of nibbles.
// Sub-block j (32 values): v = (d*sc_j) * q - (dmin*m_j).
struct Q4_K {
  static constexpr int kValues = 256, kBytes = 144, kType = 12;
  __device__ static void dequant8(const uint8_t* b, int g, float (&v)[8]) {
    const int j = g >> 2, i0 = (g & 3) * 8;
    int sc, mn;
    k_scale_min(b + 4, j, sc, mn);
    const float d = mul(f16(b), static_cast<float>(sc)), dm = mul(f16(b + 2), static_cast<float>(mn));
    const uint8_t* q = b + 16 + (j >> 1) * 32 + i0;
    const int sh = (j & 1) * 4;
#pragma unroll
    for (int t = 0; t < 8; ++t) v[t] = sub(mul(d, static_cast<float>((q[t] >> sh) & 0xF)), dm);
  }
};

// Q5_K: as Q4_K plus a fifth bit per value from qh (bit j of byte i%32).
struct Q5_K {
  static constexpr int kValues = 256, kBytes = 176, kType = 13;
  __device__ static void dequant8(const uint8_t* b, int g, float (&v)[8]) {
    const int j = g >> 2, i0 = (g & 3) * 8;
    int sc, mn;
    k_scale_min(b + 4, j, sc, mn);
    const float d = mul(f16(b), static_cast<float>(sc)), dm = mul(f16(b + 2), static_cast<float>(mn));
    const uint8_t* qh = b + 16 + i0;
    const uint8_t* ql = b + 48 + (j >> 1) * 32 + i0;
    const int sh = (j & 1) * 4;
#pragma unroll
    for (int t = 0; t < 8; ++t) {
      const int q = ((ql[t] >> sh) & 0xF) | (((qh[t] >> j) & 1) << 4);
      v[t] = sub(mul(d, static_cast<float>(q)), dm);
    }
  }
};

// Q6_K: 128 bytes low nibbles, 64 bytes high 2-bit pairs, 16 int8 scales, d.
// v = (d*scale_{i/16}) * (q - 32).
struct Q6_K {
  static constexpr int kValues = 256, kBytes = 210, kType = 14;
  __device__ static void dequant8(const uint8_t* b, int g, float (&v)[8]) {
    const int i = 8 * g, half_ = i >> 7, r = i & 127;
    const float d = mul(f16(b + 208), static_cast<float>(static_cast<int8_t>(b[192 + (i >> 4)])));
    const uint8_t* ql = b + half_ * 64 + (r & 63);
    const uint8_t* qh = b + 128 + half_ * 32 + (r & 31);
    const int sl = (r >> 6) * 4, sh = (r >> 5) * 2;
#pragma unroll
    for (int t = 0; t < 8; ++t) {
      const int q = (((ql[t] >> sl) & 0xF) | (((qh[t] >> sh) & 3) << 4)) - 32;
      v[t] = mul(d, static_cast<float>(q));
    }
  }
};

// Q3_K: 32 bytes hmask, 64 bytes 2-bit values, 12 bytes of 6-bit scales, d.
// v = (d*(scale-32)) * (q2 - 4*(1 - hbit)).
struct Q3_K {
  static constexpr int kValues = 256, kBytes = 110, kType = 11;
  __device__ static void dequant8(const uint8_t* b, int g, float (&v)[8]) {
    const int i = 8 * g, s = i >> 4, half_ = i >> 7, r = i & 127;
    const int lo = (b[96 + (s & 7)] >> (4 * (s >> 3))) & 0xF;
    const int hi = (b[104 + (s & 3)] >> (2 * (s >> 2))) & 0x3;
    const float d = mul(f16(b + 108), static_cast<float>(static_cast<int8_t>((lo | (hi << 4))) - 32));
    const uint8_t* q = b + 32 + half_ * 32 + (r & 31);
    const uint8_t* hm = b + (i & 31);
    const int sh = (r >> 5) * 2, bit = i >> 5;
#pragma unroll
    for (int t = 0; t < 8; ++t) {
      const int qv = ((q[t] >> sh) & 3) - ((((hm[t] >> bit) & 1) ^ 1) << 2);
      v[t] = mul(d, static_cast<float>(qv));
    }
  }
};

// IQ4_NL: d + 16 bytes of codebook indices; values 0..15 low nibbles, 16..31 high.
struct IQ4_NL {
  static constexpr int kValues = 32, kBytes = 18, kType = 20;
  __device__ static void dequant8(const uint8_t* b, int g, float (&v)[8]) {
    const float d = f16(b);
    const uint8_t* q = b + 2 + (g & 1) * 8;
    const int sh = (g >> 1) * 4;
#pragma unroll
    for (int t = 0; t < 8; ++t) v[t] = mul(d, static_cast<float>(iq4_value((q[t] >> sh) & 0xF)));
  }
};

// IQ4_XS: d, 16-bit high scale bits, 4 bytes low scale nibbles, 128 bytes indices.
// Sub-block j (32 values): v = (d*(scale_j - 32)) * codebook[idx].
struct IQ4_XS {
  static constexpr int kValues = 256, kBytes = 136, kType = 23;
  __device__ static void dequant8(const uint8_t* b, int g, float (&v)[8]) {
    const int j = g >> 2, w = g & 3;
    const int sh_hi = b[2] | (b[3] << 8);
    const int sc = ((b[4 + (j >> 1)] >> (4 * (j & 1))) & 0xF) | (((sh_hi >> (2 * j)) & 3) << 4);
    const float d = mul(f16(b), static_cast<float>(static_cast<int8_t>(sc) - 32));
    const uint8_t* q = b + 8 + j * 16 + (w & 1) * 8;
    const int sh = (w >> 1) * 4;
#pragma unroll
    for (int t = 0; t < 8; ++t) v[t] = mul(d, static_cast<float>(iq4_value((q[t] >> sh) & 0xF)));
  }
};

// IQ3_S: d, 64 low grid-index bytes, 8 bytes of 9th index bits, 32 bytes signs,
// 4 bytes of 4-bit scales. v = ((d*(1+2*scale)) * grid) * sign.
struct IQ3_S {
  static constexpr int kValues = 256, kBytes = 110, kType = 21;
  __device__ static void dequant8(const uint8_t* b, int g, float (&v)[8]) {
    const int j = g >> 2;  // 32-value sub-block
    const int sc = (b[106 + (j >> 1)] >> (4 * (j & 1))) & 0xF;
    const float db = mul(f16(b), static_cast<float>(1 + 2 * sc));
    const uint8_t sgn = b[74 + g];
#pragma unroll
    for (int p = 0; p < 2; ++p) {
      const int gi = 2 * g + p;  // grid group of 4 values
      const int idx = b[2 + gi] | (((b[66 + (gi >> 3)] >> (gi & 7)) & 1) << 8);
      const uint32_t gw = __ldg(&kIQ3SGrid[idx]);
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        const float m = mul(db, static_cast<float>((gw >> (8 * t)) & 0xFF));
        v[4 * p + t] = ((sgn >> (4 * p + t)) & 1) ? -m : m;
      }
    }
  }
};

}  // namespace gguf
}  // namespace t4

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
