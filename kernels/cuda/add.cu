// Residual add: y += x.
#include "kernels/cuda/common.cuh"

namespace chorus::cuda {
namespace {

__global__ void add_kernel(float* __restrict__ y, const float* __restrict__ x, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] += x[i];
}

}  // namespace

std::string add(float* y, const float* x, int64_t n, Stream s) {
  if (n < 0) return shape_error("add", "n = " + std::to_string(n));
  if (!y || !x) return shape_error("add", "a null pointer");
  if (n == 0) return {};
  add_kernel<<<grid_stride_blocks(n), 256, 0, stream_of(s)>>>(y, x, n);
  return launch_status("add");
}

}  // namespace chorus::cuda
