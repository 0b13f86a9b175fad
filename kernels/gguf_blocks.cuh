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
