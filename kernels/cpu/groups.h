// A row of a panel type (kernels/cpu/panel.h) seen 32 weights at a time, in its GGUF layout:
// the unsigned quants of k-block b and what turns them into values. Shared by the scalar
// reference kernel (gemm_group_scalar) and the panel packer, so both read a row alike.
#pragma once

#include <cassert>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/fp16.h"
#include "kernels/cpu/kquant.h"
#include "kernels/tensor_type.h"

namespace chorus::groups {

// Weight k of k-block b is  dw[h] (u - off) + mo,  h = (k % 32) / 16 for Q6_K and 0 otherwise.
// For IQ4_NL / IQ4_XS, u is the table value plus 128 (1 .. 241) and off is 128, so u - off is
// the table value and every dot stays an exact integer sum.
// Q6_K, Q3_K and Q2_K have a scale per 16 weights (dw[h]), Q2_K a minimum per 16 too (mo, mo1).
struct Scales {
  float dw[2];
  float mo;          // 0 for the types without a minimum; Q2_K: the first 16 weights'
  int off;           // 8 (Q4_0), 16 (Q5_0), 32 (Q6_K), 4 (Q3_K), 128 (IQ4, Q8_0), else 0
  float mo1 = 0.0f;  // Q2_K: the second 16 weights' minimum
};

// The types with a scale (and for Q2_K a minimum) per 16 weights.
inline bool per_half(TensorType t) {
  return t == TensorType::q6_k || t == TensorType::q3_k || t == TensorType::q2_k;
}

inline bool iq4(TensorType t) {
  return t == TensorType::iq4_nl || t == TensorType::iq4_xs;
}

// The 32 table indices (nibbles) of k-block b of an IQ4 row: what a panel stores.
inline void iq4_indices(TensorType t, const uint8_t* row, int64_t b, uint8_t* idx) {
  if (t == TensorType::iq4_nl)
    kquant::group_iq4(row + b * kquant::kIq4NlBytes + 2, idx);
  else
    kquant::group_iq4(row + (b / 8) * kquant::kIq4XsBytes + 8 + 16 * (b % 8), idx);
}

// The types whose weights have a minimum (the mo term).
inline bool has_min(TensorType t) {
  return t == TensorType::q4_1 || t == TensorType::q5_1 || t == TensorType::q4_k || t == TensorType::q5_k ||
         t == TensorType::q2_k;
}

inline float f16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

inline void quants(TensorType t, const uint8_t* row, int64_t b, uint8_t* u) {
  switch (t) {
    case TensorType::q4_0:
    case TensorType::q4_1: {
      const uint8_t* qs = row + b * (t == TensorType::q4_1 ? 20 : 18) + (t == TensorType::q4_1 ? 4 : 2);
      for (int j = 0; j < 16; ++j) {
        u[j] = static_cast<uint8_t>(qs[j] & 0x0f);
        u[j + 16] = static_cast<uint8_t>(qs[j] >> 4);
      }
      return;
    }
    case TensorType::q5_0:
    case TensorType::q5_1: {
      const bool min = t == TensorType::q5_1;
      const uint8_t* qh = row + b * (min ? 24 : 22) + (min ? 4 : 2);
      const uint8_t* qs = qh + 4;
      uint32_t bits;
      std::memcpy(&bits, qh, 4);
      for (int j = 0; j < 16; ++j) {
        u[j] = static_cast<uint8_t>((qs[j] & 0x0f) | ((bits >> j) & 1u) << 4);
        u[j + 16] = static_cast<uint8_t>((qs[j] >> 4) | ((bits >> (j + 16)) & 1u) << 4);
      }
      return;
    }
    case TensorType::q8_0:  // signed q, stored as u = q + 128 (off 128)
      for (int i = 0; i < 32; ++i)
        u[i] = static_cast<uint8_t>(static_cast<int8_t>(row[b * 34 + 2 + i]) + 128);
      return;
    case TensorType::q4_k:
      kquant::group_q45k(row + (b / 8) * kquant::kQ4KBytes, false, static_cast<int>(b % 8), u);
      return;
    case TensorType::q5_k:
      kquant::group_q45k(row + (b / 8) * kquant::kQ5KBytes, true, static_cast<int>(b % 8), u);
      return;
    case TensorType::q6_k:
      kquant::group_q6k(row + (b / 8) * kquant::kQ6KBytes, static_cast<int>(b % 8), u);
      return;
    case TensorType::q2_k:
    case TensorType::q3_k: {
      const bool q3 = t == TensorType::q3_k;
      kquant::group_q23k(row + (b / 8) * (q3 ? kquant::kQ3KBytes : kquant::kQ2KBytes), q3,
                         static_cast<int>(b % 8), u);
      return;
    }
    case TensorType::iq4_nl:
    case TensorType::iq4_xs:
      iq4_indices(t, row, b, u);
      for (int i = 0; i < 32; ++i) u[i] = static_cast<uint8_t>(kquant::kIq4[u[i]] + 128);
      return;
    default: assert(false && "groups::quants: not a panel type");
  }
}

inline Scales scales(TensorType t, const uint8_t* row, int64_t b) {
  switch (t) {
    case TensorType::q4_0: return {{f16_at(row + b * 18), 0.0f}, 0.0f, 8};
    case TensorType::q4_1: return {{f16_at(row + b * 20), 0.0f}, f16_at(row + b * 20 + 2), 0};
    case TensorType::q5_0: return {{f16_at(row + b * 22), 0.0f}, 0.0f, 16};
    case TensorType::q5_1: return {{f16_at(row + b * 24), 0.0f}, f16_at(row + b * 24 + 2), 0};
    case TensorType::q8_0: return {{f16_at(row + b * 34), 0.0f}, 0.0f, 128};
    case TensorType::q4_k:
    case TensorType::q5_k: {
      const uint8_t* blk = row + (b / 8) * (t == TensorType::q4_k ? kquant::kQ4KBytes : kquant::kQ5KBytes);
      uint8_t sc[8], mn[8];
      kquant::scales_mins(blk + 4, sc, mn);
      const int g = static_cast<int>(b % 8);
      return {
          {f16_at(blk) * static_cast<float>(sc[g]), 0.0f}, -(f16_at(blk + 2) * static_cast<float>(mn[g])), 0};
    }
    case TensorType::q6_k: {
      const uint8_t* blk = row + (b / 8) * kquant::kQ6KBytes;
      const auto* sc = reinterpret_cast<const int8_t*>(blk + 192);
      const float d = f16_at(blk + 208);
      const int g = static_cast<int>(b % 8);
      return {{d * static_cast<float>(sc[2 * g]), d * static_cast<float>(sc[2 * g + 1])}, 0.0f, 32};
    }
    case TensorType::q2_k: {
      const uint8_t* blk = row + (b / 8) * kquant::kQ2KBytes;
      const float d = f16_at(blk + 80), dmin = f16_at(blk + 82);
      const int j = 2 * static_cast<int>(b % 8);
      return {{d * static_cast<float>(blk[j] & 15), d * static_cast<float>(blk[j + 1] & 15)},
              -(dmin * static_cast<float>(blk[j] >> 4)),
              0,
              -(dmin * static_cast<float>(blk[j + 1] >> 4))};
    }
    case TensorType::q3_k: {
      const uint8_t* blk = row + (b / 8) * kquant::kQ3KBytes;
      const float d = f16_at(blk + 108);
      const int j = 2 * static_cast<int>(b % 8);
      return {{d * static_cast<float>(kquant::q3k_scale(blk, j)),
               d * static_cast<float>(kquant::q3k_scale(blk, j + 1))},
              0.0f,
              4};
    }
    case TensorType::iq4_nl: return {{f16_at(row + b * kquant::kIq4NlBytes), 0.0f}, 0.0f, 128};
    case TensorType::iq4_xs: {
      const uint8_t* blk = row + (b / 8) * kquant::kIq4XsBytes;
      const int ls = kquant::iq4_xs_scale(blk, static_cast<int>(b % 8));
      return {{f16_at(blk) * static_cast<float>(ls), 0.0f}, 0.0f, 128};
    }
    default: assert(false && "groups::scales: not a panel type"); return {};
  }
}

}  // namespace chorus::groups
