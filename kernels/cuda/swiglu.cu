// SwiGLU: out = silu(gate) * up.
#include "kernels/cuda/common.cuh"

namespace chorus::cuda {
namespace {

__global__ void swiglu_kernel(const float* gate, const float* up, float* out,
                              int64_t n) {  // out may be gate or up
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

}  // namespace

Status swiglu(const float* gate, const float* up, float* out, int64_t n, Stream s) {
  if (n < 0) return shape_error("swiglu", "n = " + std::to_string(n));
  if (!gate || !up || !out) return shape_error("swiglu", "a null pointer");
  if (n == 0) return {};
  swiglu_kernel<<<grid_stride_blocks(n), 256, 0, stream_of(s)>>>(gate, up, out, n);
  return launch_status("swiglu");
}

}  // namespace chorus::cuda
