// RMSNorm, one block per row.
#include "kernels/cuda/common.cuh"

namespace chorus::cuda {
namespace {

// y may be x (in place): each element is read, then written, by the same thread, and the two
// passes are separated by block_sum's barriers.
__global__ void rmsnorm_kernel(const float* x, const float* __restrict__ w, float* y, int n, float eps) {
  __shared__ float shared[32];
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * n;
  float* yr = y + static_cast<int64_t>(blockIdx.x) * n;
  float sum = 0.0f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) sum += xr[i] * xr[i];
  sum = block_sum(sum, shared);
  const float scale = 1.0f / sqrtf(sum / static_cast<float>(n) + eps);
  for (int i = threadIdx.x; i < n; i += blockDim.x) yr[i] = xr[i] * scale * w[i];
}

}  // namespace

Status rmsnorm(const float* x, const float* w, float* y, int rows, int n, float eps, Stream s) {
  if (rows < 0) return shape_error("rmsnorm", "rows = " + std::to_string(rows) + " (must be >= 0)");
  if (n < 1 || n > (1 << 20))
    return shape_error("rmsnorm", "n = " + std::to_string(n) + " (must be 1..1048576)");
  if (!x || !w || !y) return shape_error("rmsnorm", "a null pointer");
  if (rows == 0) return {};
  rmsnorm_kernel<<<rows, 256, 0, stream_of(s)>>>(x, w, y, n, eps);
  return launch_status("rmsnorm");
}

}  // namespace chorus::cuda
