// The k-quant super-block layouts (256 weights each), as plain accessors shared by the scalar
// dequantizer and the scalar matrix kernels. Layouts read from ggml's ggml-common.h for the facts;
// the code is chorus's own.
//   Q4_K  {f16 d, dmin; u8 scales[12]; u8 qs[128]}              144 bytes
//   Q5_K  {f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]}   176 bytes
//   Q6_K  {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}         210 bytes
// Q4_K / Q5_K: 8 groups of 32 weights, group g has a 6-bit scale sc[g] and a 6-bit minimum m[g]:
//   w = d * sc[g] * q - dmin * m[g],  q in 0..15 (Q4_K) or 0..31 (Q5_K).
//   qs byte 32 * (g / 2) + l holds weight 32 g + l in its low nibble (g even) or high nibble (g odd);
//   in Q5_K, bit g of qh[l] is that weight's fifth bit.
// Q6_K: 16 groups of 16 weights, group j has a signed 8-bit scale sc[j]:
//   w = d * sc[j] * (q - 32),  q in 0..63; weight 16 j + l lies in 32-weight group g = j / 2.
//   For g = 4 h + k (h the half of 128, k in 0..3): low 4 bits from ql[64 h + 32 (k & 1) + l]
//   (low nibble for k < 2, high for k >= 2), high 2 bits from qh[32 h + l] >> (2 k).
#pragma once

#include <cstdint>

namespace chorus::kquant {

inline constexpr int kQ4KBytes = 144;
inline constexpr int kQ5KBytes = 176;
inline constexpr int kQ6KBytes = 210;

// The eight 6-bit scales and minimums of a Q4_K / Q5_K super-block's 12-byte field.
inline void scales_mins(const uint8_t* s, uint8_t* sc, uint8_t* m) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = s[j] & 63;
    m[j] = s[j + 4] & 63;
    sc[j + 4] = static_cast<uint8_t>((s[j + 8] & 0x0f) | ((s[j] >> 6) << 4));
    m[j + 4] = static_cast<uint8_t>((s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4));
  }
}

// The 32 unsigned quants of group g (0..7) of a Q4_K (five_bit = false) or Q5_K block.
inline void group_q45k(const uint8_t* b, bool five_bit, int g, uint8_t* q) {
  const uint8_t* qs = b + (five_bit ? 48 : 16) + 32 * (g / 2);
  const uint8_t* qh = b + 16;
  for (int l = 0; l < 32; ++l) {
    int v = (g & 1) ? qs[l] >> 4 : qs[l] & 0x0f;
    if (five_bit) v |= ((qh[l] >> g) & 1) << 4;
    q[l] = static_cast<uint8_t>(v);
  }
}

// The 32 unsigned quants (0..63) of group g (0..7) of a Q6_K block.
inline void group_q6k(const uint8_t* b, int g, uint8_t* q) {
  const int h = g / 4, k = g % 4;
  const uint8_t* ql = b + 64 * h + 32 * (k & 1);
  const uint8_t* qh = b + 128 + 32 * h;
  for (int l = 0; l < 32; ++l) {
    const int lo = k < 2 ? ql[l] & 0x0f : ql[l] >> 4;
    q[l] = static_cast<uint8_t>(lo | (((qh[l] >> (2 * k)) & 3) << 4));
  }
}

// Q2_K {u8 scales[16]; u8 qs[64]; f16 d, dmin} and Q3_K {u8 hmask[32]; u8 qs[64]; u8 scales[12];
// f16 d}: 16 groups of 16 weights. Weight 32 g + k (g = 0..7, k = 0..31) has its 2 low bits at
// qs[32 (g / 4) + k] >> 2 (g % 4) and, in Q3_K, its third bit as bit g of hmask[k]; its scale is
// number 2 g + k / 16. Q2_K: w = d (s & 15) q - dmin (s >> 4); Q3_K: w = d (s6 - 32) (q - 4),
// q = the two bits | the third bit << 2.
inline constexpr int kQ2KBytes = 84;
inline constexpr int kQ3KBytes = 110;

// The 32 unsigned quants of group g: 0..3 (Q2_K) or 0..7 (Q3_K).
inline void group_q23k(const uint8_t* b, bool q3, int g, uint8_t* q) {
  const uint8_t* qs = b + (q3 ? 32 : 16) + 32 * (g / 4);
  const int shift = 2 * (g % 4);
  for (int k = 0; k < 32; ++k) {
    int v = (qs[k] >> shift) & 3;
    if (q3) v |= ((b[k] >> g) & 1) << 2;
    q[k] = static_cast<uint8_t>(v);
  }
}

// Scale j (0..15) of a Q3_K block, minus 32: the low 4 bits in bytes 0-7 (nibbles), the high 2
// in bytes 8-11.
inline int q3k_scale(const uint8_t* b, int j) {
  const uint8_t* s = b + 96;
  const int low = j < 8 ? s[j] & 15 : s[j - 8] >> 4;
  const int high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
  return (low | high << 4) - 32;
}

// IQ4_NL {f16 d; u8 qs[16]} and IQ4_XS {f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]}: a
// weight is d (times, in IQ4_XS, group g's 6-bit scale minus 32) times kIq4[nibble], a fixed
// non-linear table; in a group of 32, qs byte j holds weight j in its low nibble and weight
// j + 16 in its high one.
inline constexpr int kIq4NlBytes = 18;
inline constexpr int kIq4XsBytes = 136;
inline constexpr int8_t kIq4[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// The 32 nibbles (table indices) of a 16-byte IQ4 group.
inline void group_iq4(const uint8_t* qs, uint8_t* idx) {
  for (int j = 0; j < 16; ++j) {
    idx[j] = qs[j] & 15;
    idx[j + 16] = qs[j] >> 4;
  }
}

// Group g's signed scale (ls - 32) of an IQ4_XS super-block.
inline int iq4_xs_scale(const uint8_t* b, int g) {
  const int scales_h = b[2] | b[3] << 8;
  return (((b[4 + g / 2] >> (4 * (g % 2))) & 15) | (((scales_h >> (2 * g)) & 3) << 4)) - 32;
}

}  // namespace chorus::kquant
