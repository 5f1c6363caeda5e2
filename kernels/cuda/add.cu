// Residual add: y += x; and a bias added to every row.
#include "kernels/cuda/common.cuh"

namespace chorus::cuda {
namespace {

__global__ void add_kernel(float* __restrict__ y, const float* __restrict__ x, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] += x[i];
}

__global__ void add_rows_kernel(float* __restrict__ y, const float* __restrict__ bias, int64_t n,
                                int64_t cols) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] += bias[i % cols];
}

}  // namespace

Status add_rows(float* y, const float* bias, int64_t rows, int64_t cols, Stream s) {
  if (rows < 0 || cols <= 0)
    return shape_error("add_rows", std::to_string(rows) + " rows of " + std::to_string(cols));
  if (!y || !bias) return shape_error("add_rows", "a null pointer");
  if (rows == 0) return {};
  add_rows_kernel<<<grid_stride_blocks(rows * cols), 256, 0, stream_of(s)>>>(y, bias, rows * cols, cols);
  return launch_status("add_rows");
}

Status add(float* y, const float* x, int64_t n, Stream s) {
  if (n < 0) return shape_error("add", "n = " + std::to_string(n));
  if (!y || !x) return shape_error("add", "a null pointer");
  if (n == 0) return {};
  add_kernel<<<grid_stride_blocks(n), 256, 0, stream_of(s)>>>(y, x, n);
  return launch_status("add");
}

}  // namespace chorus::cuda
