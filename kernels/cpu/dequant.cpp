// Scalar reference dequantization. Block layouts (read from ggml's ggml-common.h for the
// facts; this code is chorus's own):
//   Q4_0  {f16 d; u8 qs[16]}                  x = (nibble - 8) * d
//   Q4_1  {f16 d, m; u8 qs[16]}               x = nibble * d + m
//   Q5_0  {f16 d; u8 qh[4]; u8 qs[16]}        x = (nibble | hibit << 4) - 16) * d
//   Q5_1  {f16 d, m; u8 qh[4]; u8 qs[16]}     x = (nibble | hibit << 4) * d + m
//   Q8_0  {f16 d; i8 qs[32]}                  x = q * d
//   Q4_K, Q5_K, Q6_K: kernels/cpu/kquant.h
//   Q2_K  {u8 scales[16]; u8 qs[64]; f16 d, dmin}   16 groups of 16: x = d * (s & 15) * q2 - dmin * (s >> 4)
//   Q3_K  {u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d}   16 groups of 16, 6-bit scales - 32:
//         x = d * s * (q2 - (the group's hmask bit clear ? 4 : 0))
//   IQ4_NL {f16 d; u8 qs[16]}                 x = d * kIq4[nibble] (a fixed non-linear table)
//   IQ4_XS {f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]}   8 groups of 32, 6-bit scales - 32:
//         x = d * s * kIq4[nibble]
// In the 256-element Q2_K/Q3_K blocks, each 128 values read 32 bytes of qs four times, 2 bits at a
// time (shift 0, 2, 4, 6), each time 16 + 16 values with their own scale.
// In the 32-element legacy blocks, byte j holds element j (low nibble) and j + 16 (high).
#include "kernels/cpu/dequant.h"

#include <cassert>
#include <cstring>

#include "kernels/cpu/fp16.h"
#include "kernels/cpu/kquant.h"

namespace chorus {
namespace {

inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline float load_f16(const uint8_t* p) {
  return f16_to_f32(load_u16(p));
}

void dequant_q4_0(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 18, y += 32) {
    const float d = load_f16(b);
    const uint8_t* qs = b + 2;
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>((qs[j] & 0x0f) - 8) * d;
      y[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
    }
  }
}

void dequant_q4_1(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 20, y += 32) {
    const float d = load_f16(b);
    const float m = load_f16(b + 2);
    const uint8_t* qs = b + 4;
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>(qs[j] & 0x0f) * d + m;
      y[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
    }
  }
}

// Shared by Q5_0 (offset 16, no min) and Q5_1 (offset 0, min m).
void dequant_q5(const uint8_t* b, float* y, int64_t nb, bool has_min) {
  const int64_t bytes = has_min ? 24 : 22;
  for (int64_t i = 0; i < nb; ++i, b += bytes, y += 32) {
    const float d = load_f16(b);
    const float m = has_min ? load_f16(b + 2) : 0.0f;
    const uint8_t* p = b + (has_min ? 4 : 2);
    const uint32_t qh = load_u32(p);
    const uint8_t* qs = p + 4;
    const int offset = has_min ? 0 : 16;
    for (int j = 0; j < 16; ++j) {
      const int lo = (qs[j] & 0x0f) | static_cast<int>(((qh >> j) & 1u) << 4);
      const int hi = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
      y[j] = static_cast<float>(lo - offset) * d + m;
      y[j + 16] = static_cast<float>(hi - offset) * d + m;
    }
  }
}

void dequant_q8_0(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 34, y += 32) {
    const float d = load_f16(b);
    const auto* qs = reinterpret_cast<const int8_t*>(b + 2);
    for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(qs[j]) * d;
  }
}

// Q4_K and Q5_K share the scale scheme; Q5_K adds one high bit per element from qh.
void dequant_q45_k(const uint8_t* b, float* y, int64_t nb, bool five_bit) {
  const int64_t bytes = five_bit ? kquant::kQ5KBytes : kquant::kQ4KBytes;
  uint8_t sc[8], mn[8], q[32];
  for (int64_t i = 0; i < nb; ++i, b += bytes) {
    const float d = load_f16(b);
    const float dmin = load_f16(b + 2);
    kquant::scales_mins(b + 4, sc, mn);
    for (int g = 0; g < 8; ++g, y += 32) {
      const float dg = d * sc[g], mg = dmin * mn[g];
      kquant::group_q45k(b, five_bit, g, q);
      for (int l = 0; l < 32; ++l) y[l] = dg * static_cast<float>(q[l]) - mg;
    }
  }
}

void dequant_q6_k(const uint8_t* b, float* y, int64_t nb) {
  uint8_t q[32];
  for (int64_t i = 0; i < nb; ++i, b += kquant::kQ6KBytes) {
    const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
    const float d = load_f16(b + 208);
    for (int g = 0; g < 8; ++g, y += 32) {
      kquant::group_q6k(b, g, q);
      for (int l = 0; l < 32; ++l)
        y[l] = d * static_cast<float>(sc[2 * g + l / 16]) * static_cast<float>(q[l] - 32);
    }
  }
}

using kquant::kIq4;

void dequant_q2_k(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 84) {
    const uint8_t* scales = b;
    const float d = load_f16(b + 80), dmin = load_f16(b + 82);
    int is = 0;
    for (int half = 0; half < 2; ++half) {
      const uint8_t* q = b + 16 + 32 * half;
      for (int shift = 0; shift < 8; shift += 2)
        for (int part = 0; part < 2; ++part, ++is, y += 16) {
          const float dl = d * static_cast<float>(scales[is] & 15),
                      ml = dmin * static_cast<float>(scales[is] >> 4);
          for (int l = 0; l < 16; ++l) y[l] = dl * static_cast<float>((q[16 * part + l] >> shift) & 3) - ml;
        }
    }
  }
}

void dequant_q3_k(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 110) {
    const uint8_t* hmask = b;
    const float d = load_f16(b + 108);
    int scale[16];
    for (int j = 0; j < 16; ++j) scale[j] = kquant::q3k_scale(b, j);
    int is = 0;
    uint8_t m = 1;
    for (int half = 0; half < 2; ++half) {
      const uint8_t* q = b + 32 + 32 * half;
      for (int shift = 0; shift < 8; shift += 2, m = static_cast<uint8_t>(m << 1))
        for (int part = 0; part < 2; ++part, ++is, y += 16) {
          const float dl = d * static_cast<float>(scale[is]);
          for (int l = 0; l < 16; ++l) {
            const int k = 16 * part + l;
            const int v = ((q[k] >> shift) & 3) - ((hmask[k] & m) ? 0 : 4);
            y[l] = dl * static_cast<float>(v);
          }
        }
    }
  }
}

void dequant_iq4_nl(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 18, y += 32) {
    const float d = load_f16(b);
    for (int j = 0; j < 16; ++j) {
      y[j] = d * static_cast<float>(kIq4[b[2 + j] & 15]);
      y[j + 16] = d * static_cast<float>(kIq4[b[2 + j] >> 4]);
    }
  }
}

void dequant_iq4_xs(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 136) {
    const float d = load_f16(b);
    const uint16_t scales_h = load_u16(b + 2);
    for (int g = 0; g < 8; ++g, y += 32) {
      const int ls = ((b[4 + g / 2] >> (4 * (g % 2))) & 15) | (((scales_h >> (2 * g)) & 3) << 4);
      const float dl = d * static_cast<float>(ls - 32);
      const uint8_t* q = b + 8 + 16 * g;
      for (int j = 0; j < 16; ++j) {
        y[j] = dl * static_cast<float>(kIq4[q[j] & 15]);
        y[j + 16] = dl * static_cast<float>(kIq4[q[j] >> 4]);
      }
    }
  }
}

}  // namespace

bool can_dequantize(TensorType type) {
  return tensor_type_info(type).can_dequantize;
}

void dequantize_row(TensorType type, const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const uint8_t*>(src);
  const auto& info = tensor_type_info(type);
  assert(n % info.block_elems == 0);
  const int64_t nb = n / info.block_elems;
  switch (type) {
    case TensorType::f32: std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); return;
    case TensorType::f16:
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(load_u16(b + 2 * i));
      return;
    case TensorType::bf16:
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(load_u16(b + 2 * i));
      return;
    case TensorType::q4_0: dequant_q4_0(b, dst, nb); return;
    case TensorType::q4_1: dequant_q4_1(b, dst, nb); return;
    case TensorType::q5_0: dequant_q5(b, dst, nb, false); return;
    case TensorType::q5_1: dequant_q5(b, dst, nb, true); return;
    case TensorType::q8_0: dequant_q8_0(b, dst, nb); return;
    case TensorType::q4_k: dequant_q45_k(b, dst, nb, false); return;
    case TensorType::q5_k: dequant_q45_k(b, dst, nb, true); return;
    case TensorType::q6_k: dequant_q6_k(b, dst, nb); return;
    case TensorType::q2_k: dequant_q2_k(b, dst, nb); return;
    case TensorType::q3_k: dequant_q3_k(b, dst, nb); return;
    case TensorType::iq4_nl: dequant_iq4_nl(b, dst, nb); return;
    case TensorType::iq4_xs: dequant_iq4_xs(b, dst, nb); return;
    default: assert(false && "dequantize_row: unsupported type");
  }
}

}  // namespace chorus
