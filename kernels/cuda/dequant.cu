// GGUF weight rows to bf16 (weights are uploaded once and converted at load), and f32 -> bf16
// for activations. Every type the CPU dequantizes (kernels/cpu/dequant.cpp gives the block
// layouts), with the CPU's arithmetic in its order (products and sums rounded separately: nvcc
// would fuse them), so each value is the CPU's rounded to bf16.
#include <cuda_fp16.h>

#include "kernels/cuda/common.cuh"
#include "kernels/tensor_type.h"

namespace chorus::cuda {
namespace {

__device__ __forceinline__ float half_at(const uint8_t* p) {
  return __half2float(
      __ushort_as_half(*reinterpret_cast<const uint16_t*>(p)));  // 2-byte aligned in every layout
}

// Element j (0..31) of a Q5_0 (offset 16, no min) or Q5_1 block.
template <bool kMin>
__device__ __forceinline__ float q5_at(const uint8_t* blk, int j) {
  const uint8_t* p = blk + (kMin ? 4 : 2);
  const uint32_t qh = p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<uint32_t>(p[3]) << 24);
  const uint8_t* qs = p + 4;
  const int q = (j < 16 ? (qs[j] & 0x0f) : (qs[j - 16] >> 4)) | static_cast<int>(((qh >> j) & 1u) << 4);
  const float y = __fmul_rn(static_cast<float>(q - (kMin ? 0 : 16)), half_at(blk));
  return __fadd_rn(y, kMin ? half_at(blk + 2) : 0.0f);  // + 0 as the CPU (-0 becomes +0)
}

// Element e (0..255) of a Q4_K or (kFive) Q5_K block: 8 sub-blocks of 32, each with a 6-bit
// scale and min packed in 12 bytes; 64 elements per 32 bytes of nibbles (low, then high).
template <bool kFive>
__device__ __forceinline__ float q45k_at(const uint8_t* blk, int e) {
  const int sub = e / 64, within = e % 64, l = within % 32, j = 2 * sub + within / 32;
  const uint8_t* s = blk + 4;
  int sc, mn;
  if (j < 4) {
    sc = s[j] & 63;
    mn = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
    mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
  const uint8_t* qs = blk + (kFive ? 48 : 16) + sub * 32;
  int q = within < 32 ? (qs[l] & 0x0f) : (qs[l] >> 4);
  if (kFive) q |= ((blk[16 + l] >> j) & 1) << 4;
  const float d = __fmul_rn(half_at(blk), static_cast<float>(sc)),
              m = __fmul_rn(half_at(blk + 2), static_cast<float>(mn));
  return __fsub_rn(__fmul_rn(d, static_cast<float>(q)), m);
}

// Element e (0..255) of a Q6_K block: two halves of 128, each four quarters of 32 with 16-element
// int8 scales; 4 low bits in ql, 2 high bits in qh, minus 32.
__device__ __forceinline__ float q6k_at(const uint8_t* blk, int e) {
  const int half = e / 128, w = e % 128, quarter = w / 32, l = w % 32;
  const uint8_t* ql = blk + half * 64;
  const uint8_t* qh = blk + 128 + half * 32;
  const auto* sc = reinterpret_cast<const int8_t*>(blk + 192 + half * 8);
  const int low = quarter & 1 ? ql[l + 32] : ql[l];
  const int q = ((quarter < 2 ? low & 0x0f : low >> 4) | (((qh[l] >> (2 * quarter)) & 3) << 4)) - 32;
  return __fmul_rn(__fmul_rn(half_at(blk + 208), static_cast<float>(sc[l / 16 + 2 * quarter])),
                   static_cast<float>(q));
}

// Element e (0..255) of a Q2_K or (kThree) Q3_K block: group g = e / 32 takes its 2 low bits from
// qs[32 (g / 4) + k] >> 2 (g % 4) (k = e % 32) and, in Q3_K, its third bit from bit g of hmask[k];
// scale 2 g + k / 16 (Q2_K: 4 bits and a 4-bit min; Q3_K: 6 bits - 32, packed in 12 bytes).
template <bool kThree>
__device__ __forceinline__ float q23k_at(const uint8_t* blk, int e) {
  const int g = e / 32, k = e % 32, j = 2 * g + k / 16;
  const int q = (blk[(kThree ? 32 : 16) + 32 * (g / 4) + k] >> (2 * (g % 4))) & 3;
  if constexpr (kThree) {
    const uint8_t* s = blk + 96;
    const int low = j < 8 ? s[j] & 15 : s[j - 8] >> 4;
    const int scale = (low | ((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4) - 32;
    const int v = q - (((blk[k] >> g) & 1) ? 0 : 4);
    return __fmul_rn(__fmul_rn(half_at(blk + 108), static_cast<float>(scale)), static_cast<float>(v));
  } else {
    const float dl = __fmul_rn(half_at(blk + 80), static_cast<float>(blk[j] & 15)),
                ml = __fmul_rn(half_at(blk + 82), static_cast<float>(blk[j] >> 4));
    return __fsub_rn(__fmul_rn(dl, static_cast<float>(q)), ml);
  }
}

// Element e of an IQ4_NL block (32) or (kXs) an IQ4_XS block (256): d (times, in IQ4_XS, the
// group's 6-bit scale - 32) times a fixed table at the element's nibble.
template <bool kXs>
__device__ __forceinline__ float iq4_at(const uint8_t* blk, int e) {
  constexpr int8_t kTable[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
  const int g = e / 32, k = e % 32;
  const uint8_t* qs = blk + (kXs ? 8 + 16 * g : 2);
  const int n = k < 16 ? qs[k] & 15 : qs[k - 16] >> 4;
  float d = half_at(blk);
  if constexpr (kXs) {
    const int scales_h = blk[2] | blk[3] << 8;
    const int ls = ((blk[4 + g / 2] >> (4 * (g % 2))) & 15) | (((scales_h >> (2 * g)) & 3) << 4);
    d = __fmul_rn(d, static_cast<float>(ls - 32));
  }
  return __fmul_rn(d, static_cast<float>(kTable[n]));
}

template <int kType>
__global__ void dequant_kernel(const uint8_t* __restrict__ src, int64_t row_bytes, int64_t n_rows,
                               int64_t n_cols, __nv_bfloat16* __restrict__ dst) {
  const int64_t n = n_rows * n_cols;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = idx / n_cols, c = idx % n_cols;
    const uint8_t* row = src + r * row_bytes;
    float x = 0.0f;
    if constexpr (kType == static_cast<int>(TensorType::f32)) {
      x = reinterpret_cast<const float*>(row)[c];
    } else if constexpr (kType == static_cast<int>(TensorType::f16)) {
      x = half_at(row + 2 * c);
    } else if constexpr (kType == static_cast<int>(TensorType::bf16)) {
      dst[idx] = reinterpret_cast<const __nv_bfloat16*>(row)[c];
      continue;
    } else if constexpr (kType == static_cast<int>(TensorType::q4_k)) {
      x = q45k_at<false>(row + (c / 256) * 144, static_cast<int>(c % 256));
    } else if constexpr (kType == static_cast<int>(TensorType::q5_k)) {
      x = q45k_at<true>(row + (c / 256) * 176, static_cast<int>(c % 256));
    } else if constexpr (kType == static_cast<int>(TensorType::q6_k)) {
      x = q6k_at(row + (c / 256) * 210, static_cast<int>(c % 256));
    } else if constexpr (kType == static_cast<int>(TensorType::q2_k)) {
      x = q23k_at<false>(row + (c / 256) * 84, static_cast<int>(c % 256));
    } else if constexpr (kType == static_cast<int>(TensorType::q3_k)) {
      x = q23k_at<true>(row + (c / 256) * 110, static_cast<int>(c % 256));
    } else if constexpr (kType == static_cast<int>(TensorType::iq4_nl)) {
      x = iq4_at<false>(row + (c / 32) * 18, static_cast<int>(c % 32));
    } else if constexpr (kType == static_cast<int>(TensorType::iq4_xs)) {
      x = iq4_at<true>(row + (c / 256) * 136, static_cast<int>(c % 256));
    } else if constexpr (kType == static_cast<int>(TensorType::q5_0)) {
      x = q5_at<false>(row + (c / 32) * 22, static_cast<int>(c % 32));
    } else if constexpr (kType == static_cast<int>(TensorType::q5_1)) {
      x = q5_at<true>(row + (c / 32) * 24, static_cast<int>(c % 32));
    } else {
      const int64_t b = c / 32;
      const int j = static_cast<int>(c % 32);
      if constexpr (kType == static_cast<int>(TensorType::q8_0)) {
        const uint8_t* blk = row + b * 34;
        x = half_at(blk) * static_cast<float>(static_cast<int8_t>(blk[2 + j]));
      } else if constexpr (kType == static_cast<int>(TensorType::q4_0)) {
        const uint8_t* blk = row + b * 18;
        const int q = j < 16 ? (blk[2 + j] & 0x0f) : (blk[2 + j - 16] >> 4);
        x = half_at(blk) * static_cast<float>(q - 8);
      } else {  // q4_1
        const uint8_t* blk = row + b * 20;
        const int q = j < 16 ? (blk[4 + j] & 0x0f) : (blk[4 + j - 16] >> 4);
        // Product and sum rounded separately, as the CPU reference (nvcc would fuse them).
        x = __fadd_rn(__fmul_rn(half_at(blk), static_cast<float>(q)), half_at(blk + 2));
      }
    }
    dst[idx] = __float2bfloat16(x);
  }
}

__global__ void to_bf16_kernel(const float* __restrict__ x, __nv_bfloat16* __restrict__ y, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] = __float2bfloat16(x[i]);
}

__global__ void rows_to_bf16_kernel(const float* __restrict__ x, const int32_t* __restrict__ rows, int cols,
                                    __nv_bfloat16* __restrict__ y) {
  const float* src = x + static_cast<int64_t>(rows[blockIdx.x]) * cols;
  __nv_bfloat16* dst = y + static_cast<int64_t>(blockIdx.x) * cols;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) dst[i] = __float2bfloat16(src[i]);
}

__global__ void move_rows_kernel(const float* __restrict__ x, const int32_t* __restrict__ rows, int cols,
                                 float* __restrict__ y, bool gather) {
  const int64_t r = rows[blockIdx.x];
  const float* src = gather ? x + r * cols : x + static_cast<int64_t>(blockIdx.x) * cols;
  float* dst = gather ? y + static_cast<int64_t>(blockIdx.x) * cols : y + r * cols;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) dst[i] = src[i];
}

using DequantKernel = void (*)(const uint8_t*, int64_t, int64_t, int64_t, __nv_bfloat16*);

// The kernel for a GGUF type id, or nullptr for a type without a CUDA conversion.
DequantKernel kernel_for(int ggml_type) {
  switch (static_cast<TensorType>(ggml_type)) {
    case TensorType::f32: return dequant_kernel<0>;
    case TensorType::f16: return dequant_kernel<1>;
    case TensorType::q4_0: return dequant_kernel<2>;
    case TensorType::q4_1: return dequant_kernel<3>;
    case TensorType::q5_0: return dequant_kernel<6>;
    case TensorType::q5_1: return dequant_kernel<7>;
    case TensorType::q8_0: return dequant_kernel<8>;
    case TensorType::q4_k: return dequant_kernel<12>;
    case TensorType::q5_k: return dequant_kernel<13>;
    case TensorType::q6_k: return dequant_kernel<14>;
    case TensorType::q2_k: return dequant_kernel<10>;
    case TensorType::q3_k: return dequant_kernel<11>;
    case TensorType::iq4_nl: return dequant_kernel<20>;
    case TensorType::iq4_xs: return dequant_kernel<23>;
    case TensorType::bf16: return dequant_kernel<30>;
    default: return nullptr;
  }
}

}  // namespace

Status dequantize_rows_bf16(int ggml_type, const void* src, int64_t row_bytes, int64_t n_rows, int64_t n_cols,
                            bf16_bits* dst, Stream s) {
  const auto info = tensor_type_info(static_cast<uint32_t>(ggml_type));
  if (!info)
    return shape_error("dequantize_rows_bf16", "unknown tensor type id " + std::to_string(ggml_type));
  if (n_rows < 0 || n_cols < 1 || n_cols % info->block_elems != 0)
    return shape_error("dequantize_rows_bf16", std::string(info->name) + ": " + std::to_string(n_rows) +
                                                   " rows of " + std::to_string(n_cols) +
                                                   " (columns must be a positive multiple of " +
                                                   std::to_string(info->block_elems) + ")");
  if (row_bytes < static_cast<int64_t>(tensor_row_bytes(*info, static_cast<uint64_t>(n_cols))))
    return shape_error("dequantize_rows_bf16", std::string(info->name) + ": row_bytes " +
                                                   std::to_string(row_bytes) + " is less than a row of " +
                                                   std::to_string(n_cols) + " values");
  const DequantKernel kernel = kernel_for(ggml_type);
  if (!kernel)
    return shape_error("dequantize_rows_bf16", std::string("type ") + std::string(info->name) +
                                                   " has no CUDA conversion (" + bf16_conversions() + " do)");
  if (!src || !dst) return shape_error("dequantize_rows_bf16", "a null pointer");
  const int64_t align = info->type == TensorType::f32 ? 4 : 2;  // the typed loads of each layout
  if (row_bytes % align != 0 || reinterpret_cast<uintptr_t>(src) % align != 0)
    return shape_error("dequantize_rows_bf16", std::string(info->name) + ": rows must start on " +
                                                   std::to_string(align) + "-byte boundaries (row_bytes " +
                                                   std::to_string(row_bytes) + ")");
  const int64_t n = n_rows * n_cols;
  if (n == 0) return {};
  kernel<<<grid_stride_blocks(n), 256, 0, stream_of(s)>>>(static_cast<const uint8_t*>(src), row_bytes, n_rows,
                                                          n_cols, reinterpret_cast<__nv_bfloat16*>(dst));
  return launch_status("dequantize_rows_bf16");
}

bool converts_to_bf16(int ggml_type) {
  return kernel_for(ggml_type) != nullptr;
}

std::string bf16_conversions() {
  return "F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL and IQ4_XS";
}

Status to_bf16(const float* x, bf16_bits* y, int64_t n, Stream s) {
  if (n < 0) return shape_error("to_bf16", "n = " + std::to_string(n));
  if (!x || !y) return shape_error("to_bf16", "a null pointer");
  if (n == 0) return {};
  to_bf16_kernel<<<grid_stride_blocks(n), 256, 0, stream_of(s)>>>(x, reinterpret_cast<__nv_bfloat16*>(y), n);
  return launch_status("to_bf16");
}

Status rows_to_bf16(const float* x, const int32_t* rows, int n, int cols, bf16_bits* y, Stream s) {
  if (n < 0 || n > 65535 || cols < 1)
    return shape_error("rows_to_bf16",
                       std::to_string(n) + " rows of " + std::to_string(cols) + " (1..65535 rows)");
  if (!x || !rows || !y) return shape_error("rows_to_bf16", "a null pointer");
  if (n == 0) return {};
  rows_to_bf16_kernel<<<n, 256, 0, stream_of(s)>>>(x, rows, cols, reinterpret_cast<__nv_bfloat16*>(y));
  return launch_status("rows_to_bf16");
}

namespace {

Status move_rows(const char* op, const float* x, const int32_t* rows, int n, int cols, float* y, bool gather,
                 Stream s) {
  if (n < 0 || n > 65535 || cols < 1)
    return shape_error(op, std::to_string(n) + " rows of " + std::to_string(cols) + " (1..65535 rows)");
  if (!x || !rows || !y) return shape_error(op, "a null pointer");
  if (n == 0) return {};
  move_rows_kernel<<<n, 256, 0, stream_of(s)>>>(x, rows, cols, y, gather);
  return launch_status(op);
}

}  // namespace

Status gather_rows(const float* x, const int32_t* rows, int n, int cols, float* y, Stream s) {
  return move_rows("gather_rows", x, rows, n, cols, y, true, s);
}

Status scatter_rows(const float* x, const int32_t* rows, int n, int cols, float* y, Stream s) {
  return move_rows("scatter_rows", x, rows, n, cols, y, false, s);
}

}  // namespace chorus::cuda
