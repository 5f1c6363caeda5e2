// Page copies inside one pool (merge, fork, compaction): one block per page pair.
#include "kernels/cuda/common.cuh"

namespace chorus::cuda {
namespace {

__global__ void copy_pages_kernel(float* __restrict__ pool, int64_t page_floats,
                                  const int32_t* __restrict__ src, const int32_t* __restrict__ dst) {
  const float* from = pool + static_cast<int64_t>(src[blockIdx.x]) * page_floats;
  float* to = pool + static_cast<int64_t>(dst[blockIdx.x]) * page_floats;
  for (int64_t i = threadIdx.x; i < page_floats; i += blockDim.x) to[i] = from[i];
}

}  // namespace

Status copy_pages(float* pool, int64_t page_floats, const int32_t* src, const int32_t* dst, int n, Stream s) {
  if (n < 0 || page_floats < 1)
    return shape_error("copy_pages",
                       std::to_string(n) + " pages of " + std::to_string(page_floats) + " floats");
  if (!pool || !src || !dst) return shape_error("copy_pages", "a null pointer");
  if (n == 0) return {};
  copy_pages_kernel<<<n, 256, 0, stream_of(s)>>>(pool, page_floats, src, dst);
  return launch_status("copy_pages");
}

}  // namespace chorus::cuda
