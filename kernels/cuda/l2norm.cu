// L2 normalisation of rows in place (Gated DeltaNet's q and k, per head): one warp per row.
#include "kernels/cuda/common.cuh"

namespace chorus::cuda {
namespace {

__global__ void l2norm_kernel(float* __restrict__ x, int rows, int n, float eps) {
  const int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  float* r = x + static_cast<int64_t>(row) * n;
  float ss = 0.0f;
  for (int i = lane; i < n; i += 32) ss = fmaf(r[i], r[i], ss);
  ss = warp_sum(ss);
  const float scale = 1.0f / fmaxf(sqrtf(ss), eps);
  for (int i = lane; i < n; i += 32) r[i] *= scale;
}

}  // namespace

Status l2norm_rows(float* x, int rows, int n, float eps, Stream s) {
  if (rows < 0 || n < 1)
    return shape_error("l2norm_rows", std::to_string(rows) + " rows of " + std::to_string(n));
  if (!x) return shape_error("l2norm_rows", "a null pointer");
  if (rows == 0) return {};
  constexpr int kRowsPerBlock = 8;  // a warp each
  l2norm_kernel<<<(rows + kRowsPerBlock - 1) / kRowsPerBlock, 32 * kRowsPerBlock, 0, stream_of(s)>>>(x, rows,
                                                                                                     n, eps);
  return launch_status("l2norm_rows");
}

}  // namespace chorus::cuda
