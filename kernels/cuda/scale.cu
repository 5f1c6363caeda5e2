// x *= s.
#include "kernels/cuda/common.cuh"

namespace chorus::cuda {
namespace {

__global__ void scale_kernel(float* __restrict__ x, int64_t n, float s) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    x[i] *= s;
}

}  // namespace

Status scale(float* x, int64_t n, float s, Stream st) {
  if (n < 0) return shape_error("scale", "n = " + std::to_string(n));
  if (!x) return shape_error("scale", "a null pointer");
  if (n == 0) return {};
  scale_kernel<<<grid_stride_blocks(n), 256, 0, stream_of(st)>>>(x, n, s);
  return launch_status("scale");
}

}  // namespace chorus::cuda
