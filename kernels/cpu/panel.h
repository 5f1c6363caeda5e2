// Weight panels: a quantized matrix repacked, once at load, so that one SIMD lane holds one
// output row. The GGUF layout keeps a row's weights together, so a dot product ends with a
// horizontal sum and every vector op serves one row; in a panel, 16 rows are interleaved four
// weights at a time, so one vpdpbusd multiplies 4 weights of each of 16 rows by the same 4
// activations (broadcast), and the 16 results are the 16 rows' sums with no horizontal step.
// Each weight is read once per step, as before; the unpacking and the float work per weight
// fall by about 16x, which is what bounds batched and prefill products.
//
// Layout, for a matrix [rows, cols] of a panel type (panel_type()), cols a multiple of 32
// (of 256 for the k-quants): panels of kPanelRows rows (the last one padded with zero rows),
// each panel_bytes long; in a panel, the 32-weight groups ("k-blocks") b = 0 .. cols/32 - 1 in
// order, each as
//   [scales]   legacy types, before every k-block:  d[16] f16 (Q4_0, Q5_0, Q8_0);  d[16], m[16] f16
//              (Q4_1, Q5_1)
//              k-quants, before every 8th k-block (a super-block of 256 weights):
//                Q4_K / Q5_K  d[16], dmin[16] f16, sc[8][16] u8, mn[8][16] u8 (6-bit values)
//                Q6_K         d[16] f16, sc[16][16] i8 (scale j covers weights 16 j .. 16 j + 15)
//                IQ4_XS       d[16] f16, sc[8][16] i8 (group g's ls - 32)
//                Q3_K         as Q6_K: d[16] f16, sc[16][16] i8 (the 6-bit scales - 32)
//                Q2_K         d[16], dmin[16] f16, sc[16][16] u8, mn[16][16] u8 (per 16 weights)
//              IQ4_NL as Q5_0: d[16] f16 before every k-block
//   [quants]   the k-block's unsigned quants u (0 .. 2^bits - 1) as 8 step vectors V_0..V_7 of
//              64 bytes, V_j[4 r + i] = u[row r][weight 4 j + i], stored as
//                nib[4][64]   nib[m] = (V_m & 15) | (V_{m+4} & 15) << 4         (every type)
//                bit5[8] u64  bit p of bit5[j] = bit 4 of V_j[p]              (Q5_0, Q5_1, Q5_K)
//                hi[2][64]    hi[m] = sum_s (V_{m+2s} >> 4 & 3) << 2s, s = 0..3    (Q6_K)
//              Q8_0 instead stores the 8 step vectors whole: raw[8][64], raw[j] = V_j
// Row r's value of weight k is, with g = k / 32 the k-block's group in its super-block:
//   Q4_0  d (u - 8)    Q4_1  d u + m    Q5_0  d (u - 16)    Q5_1  d u + m    Q8_0  d (u - 128)
//   Q4_K / Q5_K  d sc[g] u - dmin mn[g]
//   Q6_K  d sc[k / 16 % 16] (u - 32)
//   IQ4_NL  d kIq4[u]    IQ4_XS  d sc[g] kIq4[u]    (u the 4-bit index, kernels/cpu/kquant.h)
//   Q3_K  d sc[k / 16 % 16] (u - 4)    Q2_K  d sc[k / 16 % 16] u - dmin mn[k / 16 % 16]    (u <= 7)
// The kernels that read panels (CpuKernels::gemm_panels) compute exactly the arithmetic of
// the scalar row kernels (gemm_group_scalar), lane by lane, so their results are bit-identical.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/tensor_type.h"

namespace chorus {

inline constexpr int kPanelRows = 16;

// Whether `type` has a panel layout.
bool panel_type(TensorType type);

// Record sizes, for the kernels that walk a panel.
inline constexpr bool panel_kquant(TensorType t) {  // scales per super-block of 256
  switch (t) {
    case TensorType::q4_k:
    case TensorType::q5_k:
    case TensorType::q6_k:
    case TensorType::q2_k:
    case TensorType::q3_k:
    case TensorType::iq4_xs: return true;
    default: return false;
  }
}
// Bits of the stored quants: Q2_K and Q3_K (u <= 7) and the IQ4 table indices fit a nibble.
inline constexpr int panel_quant_bits(TensorType t) {
  switch (t) {
    case TensorType::q8_0: return 8;
    case TensorType::q6_k: return 6;
    case TensorType::q5_0:
    case TensorType::q5_1:
    case TensorType::q5_k: return 5;
    default: return 4;
  }
}
// Bytes of a k-block's quants.
inline constexpr size_t panel_quant_bytes(TensorType t) {
  switch (panel_quant_bits(t)) {
    case 5: return 256 + 64;
    case 6: return 256 + 128;
    case 8: return 512;
    default: return 256;
  }
}
// Bytes of the scales before a k-block (legacy types) or a super-block (k-quants).
inline constexpr size_t panel_scale_bytes(TensorType t) {
  switch (t) {
    case TensorType::q4_0:
    case TensorType::q5_0:
    case TensorType::q8_0: return 32;
    case TensorType::q4_1:
    case TensorType::q5_1: return 64;
    case TensorType::q4_k:
    case TensorType::q5_k: return 64 + 256;
    case TensorType::q6_k: return 32 + 256;
    case TensorType::q2_k: return 64 + 512;
    case TensorType::q3_k: return 32 + 256;
    case TensorType::iq4_nl: return 32;
    case TensorType::iq4_xs: return 32 + 128;
    default: return 0;
  }
}

struct PanelLayout {
  TensorType type = TensorType::f32;
  int64_t rows = 0, cols = 0;
  int64_t n_panels = 0;    // ceil(rows / kPanelRows)
  size_t panel_bytes = 0;  // bytes per panel, a multiple of 64
  size_t bytes() const { return static_cast<size_t>(n_panels) * panel_bytes; }
};

// REQUIRES: panel_type(type); cols a multiple of the type's block size.
PanelLayout panel_layout(TensorType type, int64_t rows, int64_t cols);

// Repacks rows [rows, row_bytes] (the GGUF layout) into `out` (layout.bytes(), 64-byte aligned).
// Pure and thread-safe; panels [p0, p1) only, so callers may split the work.
void pack_panels(const PanelLayout& layout, const uint8_t* rows, size_t row_bytes, uint8_t* out, int64_t p0,
                 int64_t p1);

}  // namespace chorus
