// The scalar reference table: plain C++, no intrinsics. Every optimized table is tested
// against this one.
#include <cstring>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/dequant.h"
#include "kernels/cpu/fp16.h"
#include "kernels/cpu/kquant.h"
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
// w = d * wq + m. Formats without a minimum (Q4_0, Q5_0, Q8_0) unpack to signed values
// (q - 8, q - 16, q), as llama.cpp computes them; Q4_1 and Q5_1 unpack to unsigned values.
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
    case TensorType::q5_0:
    case TensorType::q5_1: {
      const bool has_min = t == TensorType::q5_1;
      const uint8_t* p = b + (has_min ? 4 : 2);
      uint32_t qh;
      std::memcpy(&qh, p, 4);
      const int off = has_min ? 0 : 16;
      for (int j = 0; j < 16; ++j) {
        wq[j] = static_cast<int8_t>(((p[4 + j] & 0x0f) | (((qh >> j) & 1u) << 4)) - off);
        wq[j + 16] = static_cast<int8_t>(((p[4 + j] >> 4) | (((qh >> (j + 16)) & 1u) << 4)) - off);
      }
      return {f16_at(b), has_min ? f16_at(b + 2) : 0.0f};
    }
    case TensorType::q8_0:
      std::memcpy(wq, b + 2, 32);
      return {f16_at(b), 0.0f};
    default: return {0, 0};
  }
}

// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 against int8 activations:
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

// Q4_K, Q5_K, Q6_K against BlockQ8K activations. Per super-block (256 weights), in integers:
//   Q4_K / Q5_K:  isum = sum_g sc[g] sum_l q x,  msum = sum_g m[g] (bsums[2g] + bsums[2g+1])
//                 y += (d dx) isum - (dmin dx) msum
//   Q6_K:         isum = sum_j sc[j] sum_l q x - 32 sum_j sc[j] bsums[j]
//                 y += (d dx) isum
// The optimized kernels compute the same integers; only the float sums' order differs.
void gemm_kquant_scalar(const GemmArgs& a) {
  const auto& info = tensor_type_info(a.type);
  const int64_t nsb = a.n_cols / kQ8KBlock;
  uint8_t q[32];
  for (int64_t r = a.r0; r < a.r1; ++r) {
    const uint8_t* row = a.w + r * a.w_row_bytes;
    for (int64_t t = 0; t < a.n_tokens; ++t) {
      const BlockQ8K* xs = a.xk + t * nsb;
      float sum = 0.0f;
      for (int64_t sb = 0; sb < nsb; ++sb) {
        const uint8_t* b = row + sb * info.block_bytes;
        const BlockQ8K& x = xs[sb];
        if (a.type == TensorType::q6_k) {
          const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
          int32_t isum = 0, corr = 0;
          for (int g = 0; g < 8; ++g) {
            kquant::group_q6k(b, g, q);
            for (int half = 0; half < 2; ++half) {
              int32_t s16 = 0;
              for (int l = 16 * half; l < 16 * half + 16; ++l) s16 += q[l] * x.q[32 * g + l];
              isum += sc[2 * g + half] * s16;
            }
          }
          for (int j = 0; j < 16; ++j) corr += sc[j] * x.bsums[j];
          sum += f16_at(b + 208) * x.d * static_cast<float>(isum - 32 * corr);
        } else {
          const bool five = a.type == TensorType::q5_k;
          uint8_t sc[8], mn[8];
          kquant::scales_mins(b + 4, sc, mn);
          int32_t isum = 0, msum = 0;
          for (int g = 0; g < 8; ++g) {
            kquant::group_q45k(b, five, g, q);
            int32_t s32 = 0;
            for (int l = 0; l < 32; ++l) s32 += q[l] * x.q[32 * g + l];
            isum += sc[g] * s32;
            msum += mn[g] * (x.bsums[2 * g] + x.bsums[2 * g + 1]);
          }
          sum += f16_at(b) * x.d * static_cast<float>(isum) - f16_at(b + 2) * x.d * static_cast<float>(msum);
        }
      }
      a.y[t * a.y_stride + r] = sum;
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
    case TensorType::q4_0: case TensorType::q4_1: case TensorType::q5_0: case TensorType::q5_1:
    case TensorType::q8_0: return GemmInput::q8;
    case TensorType::q4_k: case TensorType::q5_k: case TensorType::q6_k: return GemmInput::q8k;
    default: return GemmInput::f32;
  }
}

GemmFn gemm_for(const CpuKernels& k, TensorType type) {
  const auto id = static_cast<uint32_t>(type);
  if (id < 40 && k.gemm[id] != nullptr) return k.gemm[id];
  return can_dequantize(type) ? k.gemm_f32 : nullptr;
}

const CpuKernels& cpu_kernels_scalar() {
  static const CpuKernels table = [] {
    CpuKernels k{};
    k.isa = "scalar";
    fill_common_ops(k);
    k.gemm_f32 = gemm_dequantized;
    for (TensorType t : {TensorType::q4_0, TensorType::q4_1, TensorType::q5_0, TensorType::q5_1, TensorType::q8_0})
      k.gemm[static_cast<uint32_t>(t)] = gemm_legacy_scalar;
    for (TensorType t : {TensorType::q4_k, TensorType::q5_k, TensorType::q6_k})
      k.gemm[static_cast<uint32_t>(t)] = gemm_kquant_scalar;
    return k;
  }();
  return table;
}

}  // namespace chorus
