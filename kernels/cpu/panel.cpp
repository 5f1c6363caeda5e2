#include "kernels/cpu/panel.h"

#include <cassert>
#include <cstring>

#include "kernels/cpu/groups.h"
#include "kernels/cpu/kquant.h"

namespace chorus {
namespace {

void put16(uint8_t* p, const uint8_t* from) {
  std::memcpy(p, from, 2);
}

// The scales before k-block b (legacy) or super-block b / 8 (k-quants), rows r0 .. r0 + n.
void pack_scales(TensorType t, const uint8_t* rows, size_t row_bytes, int64_t r0, int n, int64_t b,
                 uint8_t* out) {
  for (int r = 0; r < n; ++r) {
    const uint8_t* row = rows + static_cast<size_t>(r0 + r) * row_bytes;
    switch (t) {
      case TensorType::q4_0: put16(out + 2 * r, row + b * 18); break;
      case TensorType::q4_1:
        put16(out + 2 * r, row + b * 20);
        put16(out + 32 + 2 * r, row + b * 20 + 2);
        break;
      case TensorType::q5_0: put16(out + 2 * r, row + b * 22); break;
      case TensorType::q8_0: put16(out + 2 * r, row + b * 34); break;
      case TensorType::q5_1:
        put16(out + 2 * r, row + b * 24);
        put16(out + 32 + 2 * r, row + b * 24 + 2);
        break;
      case TensorType::q4_k:
      case TensorType::q5_k: {
        const uint8_t* blk = row + (b / 8) * (t == TensorType::q4_k ? kquant::kQ4KBytes : kquant::kQ5KBytes);
        put16(out + 2 * r, blk);
        put16(out + 32 + 2 * r, blk + 2);
        uint8_t sc[8], mn[8];
        kquant::scales_mins(blk + 4, sc, mn);
        for (int g = 0; g < 8; ++g) {
          out[64 + 16 * g + r] = sc[g];
          out[192 + 16 * g + r] = mn[g];
        }
        break;
      }
      case TensorType::q6_k: {
        const uint8_t* blk = row + (b / 8) * kquant::kQ6KBytes;
        put16(out + 2 * r, blk + 208);
        for (int j = 0; j < 16; ++j) out[32 + 16 * j + r] = blk[192 + j];
        break;
      }
      case TensorType::q2_k: {
        const uint8_t* blk = row + (b / 8) * kquant::kQ2KBytes;
        put16(out + 2 * r, blk + 80);
        put16(out + 32 + 2 * r, blk + 82);
        for (int j = 0; j < 16; ++j) {
          out[64 + 16 * j + r] = blk[j] & 15;
          out[64 + 256 + 16 * j + r] = blk[j] >> 4;
        }
        break;
      }
      case TensorType::q3_k: {
        const uint8_t* blk = row + (b / 8) * kquant::kQ3KBytes;
        put16(out + 2 * r, blk + 108);
        for (int j = 0; j < 16; ++j) out[32 + 16 * j + r] = static_cast<uint8_t>(kquant::q3k_scale(blk, j));
        break;
      }
      case TensorType::iq4_nl: put16(out + 2 * r, row + b * kquant::kIq4NlBytes); break;
      case TensorType::iq4_xs: {
        const uint8_t* blk = row + (b / 8) * kquant::kIq4XsBytes;
        put16(out + 2 * r, blk);
        for (int g = 0; g < 8; ++g) out[32 + 16 * g + r] = static_cast<uint8_t>(kquant::iq4_xs_scale(blk, g));
        break;
      }
      default: break;
    }
  }
}

}  // namespace

bool panel_type(TensorType type) {
  return panel_scale_bytes(type) != 0;
}

PanelLayout panel_layout(TensorType type, int64_t rows, int64_t cols) {
  assert(panel_type(type));
  PanelLayout l;
  l.type = type;
  l.rows = rows;
  l.cols = cols;
  l.n_panels = (rows + kPanelRows - 1) / kPanelRows;
  const int64_t nkb = cols / 32;
  const int64_t n_scales = panel_kquant(type) ? nkb / 8 : nkb;
  const size_t bytes = static_cast<size_t>(n_scales) * panel_scale_bytes(type) +
                       static_cast<size_t>(nkb) * panel_quant_bytes(type);
  l.panel_bytes = (bytes + 63) & ~size_t{63};
  return l;
}

void pack_panels(const PanelLayout& l, const uint8_t* rows, size_t row_bytes, uint8_t* out, int64_t p0,
                 int64_t p1) {
  const TensorType t = l.type;
  const int64_t nkb = l.cols / 32;
  const int bits = panel_quant_bits(t);
  uint8_t u[kPanelRows][32];
  for (int64_t p = p0; p < p1; ++p) {
    uint8_t* o = out + static_cast<size_t>(p) * l.panel_bytes;
    std::memset(o, 0, l.panel_bytes);
    const int64_t r0 = p * kPanelRows;
    const int n = static_cast<int>(l.rows - r0 < kPanelRows ? l.rows - r0 : kPanelRows);
    for (int64_t b = 0; b < nkb; ++b) {
      if (!panel_kquant(t) || b % 8 == 0) {
        pack_scales(t, rows, row_bytes, r0, n, b, o);
        o += panel_scale_bytes(t);
      }
      std::memset(u, 0, sizeof u);
      for (int r = 0; r < n; ++r) {  // IQ4 panels hold the table indices; the kernels look them up
        const uint8_t* row = rows + static_cast<size_t>(r0 + r) * row_bytes;
        if (groups::iq4(t))
          groups::iq4_indices(t, row, b, u[r]);
        else
          groups::quants(t, row, b, u[r]);
      }
      // V_j[4 r + i] = u[r][4 j + i]
      auto V = [&](int j, int pos) { return u[pos / 4][4 * j + pos % 4]; };
      if (bits == 8) {
        for (int j = 0; j < 8; ++j)
          for (int pos = 0; pos < 64; ++pos) o[64 * j + pos] = V(j, pos);
      } else {
        for (int m = 0; m < 4; ++m)
          for (int pos = 0; pos < 64; ++pos)
            o[64 * m + pos] = static_cast<uint8_t>((V(m, pos) & 15) | (V(m + 4, pos) & 15) << 4);
      }
      if (bits == 5) {
        for (int j = 0; j < 8; ++j) {
          uint64_t mask = 0;
          for (int pos = 0; pos < 64; ++pos) mask |= static_cast<uint64_t>((V(j, pos) >> 4) & 1) << pos;
          std::memcpy(o + 256 + 8 * j, &mask, 8);
        }
      } else if (bits == 6) {
        for (int m = 0; m < 2; ++m)
          for (int pos = 0; pos < 64; ++pos) {
            int h = 0;
            for (int s = 0; s < 4; ++s) h |= ((V(m + 2 * s, pos) >> 4) & 3) << (2 * s);
            o[256 + 64 * m + pos] = static_cast<uint8_t>(h);
          }
      }
      o += panel_quant_bytes(t);
    }
  }
}

}  // namespace chorus
