// GGUF weight rows to bf16 (weights are uploaded once and converted at load), and f32 -> bf16
// for activations. ggml's block layouts: Q8_0 {f16 d; i8 q[32]} x = d*q; Q4_0 {f16 d; u8 q[16]}
// x = d*(nibble-8), low nibbles first; Q4_1 {f16 d, m; u8 q[16]} x = d*nibble + m.
#include <cuda_fp16.h>

#include "kernels/cuda/common.cuh"
#include "kernels/tensor_type.h"

namespace chorus::cuda {
namespace {

__device__ __forceinline__ float half_at(const uint8_t* p) {
  return __half2float(__ushort_as_half(*reinterpret_cast<const uint16_t*>(p)));  // 2-byte aligned in every layout
}

template <int kType>
__global__ void dequant_kernel(const uint8_t* __restrict__ src, int64_t row_bytes, int64_t n_rows, int64_t n_cols,
                               __nv_bfloat16* __restrict__ dst) {
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
    case TensorType::q8_0: return dequant_kernel<8>;
    case TensorType::bf16: return dequant_kernel<30>;
    default: return nullptr;
  }
}

}  // namespace

std::string dequantize_rows_bf16(int ggml_type, const void* src, int64_t row_bytes, int64_t n_rows, int64_t n_cols,
                                 bf16_bits* dst, Stream s) {
  const auto info = tensor_type_info(static_cast<uint32_t>(ggml_type));
  if (!info) return shape_error("dequantize_rows_bf16", "unknown tensor type id " + std::to_string(ggml_type));
  if (n_rows < 0 || n_cols < 1 || n_cols % info->block_elems != 0)
    return shape_error("dequantize_rows_bf16", std::string(info->name) + ": " + std::to_string(n_rows) + " rows of " +
                                                   std::to_string(n_cols) + " (columns must be a positive multiple of " +
                                                   std::to_string(info->block_elems) + ")");
  if (row_bytes < static_cast<int64_t>(tensor_row_bytes(*info, static_cast<uint64_t>(n_cols))))
    return shape_error("dequantize_rows_bf16", std::string(info->name) + ": row_bytes " + std::to_string(row_bytes) +
                                                   " is less than a row of " + std::to_string(n_cols) + " values");
  const DequantKernel kernel = kernel_for(ggml_type);
  if (!kernel)
    return shape_error("dequantize_rows_bf16", std::string("type ") + std::string(info->name) +
                                                   " has no CUDA conversion (F32, F16, BF16, Q8_0, Q4_0, Q4_1 do)");
  if (!src || !dst) return shape_error("dequantize_rows_bf16", "a null pointer");
  const int64_t align = info->type == TensorType::f32 ? 4 : 2;  // the typed loads of each layout
  if (row_bytes % align != 0 || reinterpret_cast<uintptr_t>(src) % align != 0)
    return shape_error("dequantize_rows_bf16", std::string(info->name) + ": rows must start on " +
                                                   std::to_string(align) + "-byte boundaries (row_bytes " +
                                                   std::to_string(row_bytes) + ")");
  const int64_t n = n_rows * n_cols;
  if (n == 0) return {};
  kernel<<<grid_stride_blocks(n), 256, 0, stream_of(s)>>>(static_cast<const uint8_t*>(src), row_bytes, n_rows, n_cols,
                                                         reinterpret_cast<__nv_bfloat16*>(dst));
  return launch_status("dequantize_rows_bf16");
}

bool converts_to_bf16(int ggml_type) { return kernel_for(ggml_type) != nullptr; }

std::string to_bf16(const float* x, bf16_bits* y, int64_t n, Stream s) {
  if (n < 0) return shape_error("to_bf16", "n = " + std::to_string(n));
  if (!x || !y) return shape_error("to_bf16", "a null pointer");
  if (n == 0) return {};
  to_bf16_kernel<<<grid_stride_blocks(n), 256, 0, stream_of(s)>>>(x, reinterpret_cast<__nv_bfloat16*>(y), n);
  return launch_status("to_bf16");
}

std::string rows_to_bf16(const float* x, const int32_t* rows, int n, int cols, bf16_bits* y, Stream s) {
  if (n < 0 || n > 65535 || cols < 1)
    return shape_error("rows_to_bf16", std::to_string(n) + " rows of " + std::to_string(cols) + " (1..65535 rows)");
  if (!x || !rows || !y) return shape_error("rows_to_bf16", "a null pointer");
  if (n == 0) return {};
  rows_to_bf16_kernel<<<n, 256, 0, stream_of(s)>>>(x, rows, cols, reinterpret_cast<__nv_bfloat16*>(y));
  return launch_status("rows_to_bf16");
}

namespace {

std::string move_rows(const char* op, const float* x, const int32_t* rows, int n, int cols, float* y, bool gather,
                      Stream s) {
  if (n < 0 || n > 65535 || cols < 1)
    return shape_error(op, std::to_string(n) + " rows of " + std::to_string(cols) + " (1..65535 rows)");
  if (!x || !rows || !y) return shape_error(op, "a null pointer");
  if (n == 0) return {};
  move_rows_kernel<<<n, 256, 0, stream_of(s)>>>(x, rows, cols, y, gather);
  return launch_status(op);
}

}  // namespace

std::string gather_rows(const float* x, const int32_t* rows, int n, int cols, float* y, Stream s) {
  return move_rows("gather_rows", x, rows, n, cols, y, true, s);
}

std::string scatter_rows(const float* x, const int32_t* rows, int n, int cols, float* y, Stream s) {
  return move_rows("scatter_rows", x, rows, n, cols, y, false, s);
}

}  // namespace chorus::cuda
