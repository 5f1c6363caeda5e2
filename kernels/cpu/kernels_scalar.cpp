// The scalar reference table: plain C++, no intrinsics. Every optimized table is tested
// against this one.
#include <cstring>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/dequant.h"
#include "kernels/cpu/fp16.h"
#include "kernels/cpu/groups.h"
#include "kernels/cpu/ops_impl.h"

namespace chorus {
namespace {

inline float f16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// Integer dot of one weight block (32 values, as unsigned or signed ints in `wq`) with one
// activation block.
inline int32_t idot32(const int8_t* wq, const int8_t* xq) {
  int32_t s = 0;
  for (int i = 0; i < 32; ++i) s += static_cast<int32_t>(wq[i]) * xq[i];
  return s;
}

// Unpacks the 32 quants of a legacy block into wq, and returns (scale, min) so that
// w = d * wq + m. Formats without a minimum (Q4_0, Q8_0) unpack to signed values (q - 8, q),
// as llama.cpp computes them; Q4_1 unpacks to unsigned values.
struct LegacyBlock {
  float d, m;
};

LegacyBlock unpack_legacy(TensorType t, const uint8_t* b, int8_t* wq) {
  switch (t) {
    case TensorType::q4_0:
      for (int j = 0; j < 16; ++j) {
        wq[j] = static_cast<int8_t>((b[2 + j] & 0x0f) - 8);
        wq[j + 16] = static_cast<int8_t>((b[2 + j] >> 4) - 8);
      }
      return {f16_at(b), 0.0f};
    case TensorType::q4_1:
      for (int j = 0; j < 16; ++j) {
        wq[j] = static_cast<int8_t>(b[4 + j] & 0x0f);
        wq[j + 16] = static_cast<int8_t>(b[4 + j] >> 4);
      }
      return {f16_at(b), f16_at(b + 2)};
    case TensorType::q8_0: std::memcpy(wq, b + 2, 32); return {f16_at(b), 0.0f};
    default: return {0, 0};
  }
}

// Q4_0, Q4_1, Q8_0 against int8 activations:
//   sum_j (d wq_j + m) * dx qx_j = d dx sum(wq qx) + m sx,  sx = dx sum(qx)
void gemm_legacy_scalar(const GemmArgs& a) {
  const auto& info = tensor_type_info(a.type);
  const int64_t nb = a.n_cols / 32;
  int8_t wq[32];
  for (int64_t r = a.r0; r < a.r1; ++r) {
    const uint8_t* row = a.w + r * a.w_row_bytes;
    for (int64_t t = 0; t < a.n_tokens; ++t) {
      const BlockQ8* x = a.xq + t * nb;
      float sum = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const LegacyBlock lb = unpack_legacy(a.type, row + b * info.block_bytes, wq);
        const int32_t isum = idot32(wq, x[b].q);
        sum += lb.d * x[b].d * static_cast<float>(isum) + lb.m * x[b].s;
      }
      a.y[t * a.y_stride + r] = sum;
    }
  }
}

// The panel types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, the k-quants, IQ4) from their GGUF rows, 32 weights at a
// time (groups::quants / groups::scales), in the order every panel kernel follows lane by lane: per k-block
// b, with exact integer sums I = sum u qx - off * sum qx (per 16-weight half for Q6_K),
//   acc = fma(float(I_h), dw[h] * dx, acc)         for each half h (one for the other types)
//   acc = fma(mo, dx * float(sum qx), acc)         for the types with a minimum
void gemm_group_scalar(const GemmArgs& a) {
  const int64_t nb = a.n_cols / 32;
  const bool halves = groups::per_half(a.type);
  const bool min = groups::has_min(a.type);
  uint8_t u[32];
  for (int64_t r = a.r0; r < a.r1; ++r) {
    const uint8_t* row = a.w + r * a.w_row_bytes;
    for (int64_t t = 0; t < a.n_tokens; ++t) {
      const BlockQ8* x = a.xq + t * nb;
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        groups::quants(a.type, row, b, u);
        const groups::Scales sc = groups::scales(a.type, row, b);
        int32_t dot[2] = {0, 0};
        for (int i = 0; i < 32; ++i) dot[i / 16] += u[i] * x[b].q[i];
        const int32_t qsum = x[b].qsum[0] + x[b].qsum[1];
        if (halves) {  // per 16 weights: the scale, then (Q2_K) the minimum
          for (int h = 0; h < 2; ++h) {
            acc = std::fma(static_cast<float>(dot[h] - sc.off * x[b].qsum[h]), sc.dw[h] * x[b].d, acc);
            if (min) acc = std::fma(h == 0 ? sc.mo : sc.mo1, x[b].dq[h], acc);
          }
        } else {
          acc = std::fma(static_cast<float>(dot[0] + dot[1] - sc.off * qsum), sc.dw[0] * x[b].d, acc);
          if (min) acc = std::fma(sc.mo, x[b].dq[2], acc);
        }
      }
      a.y[t * a.y_stride + r] = acc;
    }
  }
}

}  // namespace

void gemm_dequantized(const GemmArgs& a) {
  std::vector<float> wrow(static_cast<size_t>(a.n_cols));
  for (int64_t r = a.r0; r < a.r1; ++r) {
    dequantize_row(a.type, a.w + r * a.w_row_bytes, wrow.data(), a.n_cols);
    for (int64_t t = 0; t < a.n_tokens; ++t) {
      const float* x = a.xf + t * a.n_cols;
      float sum = 0.0f;
      for (int64_t k = 0; k < a.n_cols; ++k) sum += wrow[static_cast<size_t>(k)] * x[k];
      a.y[t * a.y_stride + r] = sum;
    }
  }
}

GemmInput gemm_input(TensorType type) {
  switch (type) {
    case TensorType::q4_0:
    case TensorType::q4_1:
    case TensorType::q5_0:
    case TensorType::q5_1:
    case TensorType::q8_0:
    case TensorType::q4_k:
    case TensorType::q5_k:
    case TensorType::q6_k:
    case TensorType::q2_k:
    case TensorType::q3_k:
    case TensorType::iq4_nl:
    case TensorType::iq4_xs: return GemmInput::q8;
    default: return GemmInput::f32;
  }
}

GemmFn gemm_for(const CpuKernels& k, TensorType type, bool panels) {
  const auto id = static_cast<uint32_t>(type);
  if (panels && id < 40 && k.gemm_panels[id] != nullptr) return k.gemm_panels[id];
  if (id < 40 && k.gemm[id] != nullptr) return k.gemm[id];
  return can_dequantize(type) ? k.gemm_f32 : nullptr;
}

const CpuKernels& cpu_kernels_scalar() {
  static const CpuKernels table = [] {
    CpuKernels k{};
    k.isa = "scalar";
    fill_common_ops(k);
    k.gemm_f32 = gemm_dequantized;
    for (TensorType t : {TensorType::q4_0, TensorType::q4_1, TensorType::q8_0})
      k.gemm_llama[static_cast<uint32_t>(t)] = gemm_legacy_scalar;
    for (TensorType t : {TensorType::q4_0, TensorType::q4_1, TensorType::q8_0, TensorType::q5_0,
                         TensorType::q5_1, TensorType::q4_k, TensorType::q5_k, TensorType::q6_k,
                         TensorType::q2_k, TensorType::q3_k, TensorType::iq4_nl, TensorType::iq4_xs})
      k.gemm[static_cast<uint32_t>(t)] = gemm_group_scalar;
    return k;
  }();
  return table;
}

}  // namespace chorus
