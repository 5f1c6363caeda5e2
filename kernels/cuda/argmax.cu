// Greedy sampling on the device: the index of each row's largest logit (lowest index among
// equals; NaN never wins), so only one int per sequence comes back to the host.
#include <cfloat>

#include "kernels/cuda/common.cuh"

namespace chorus::cuda {
namespace {

__device__ __forceinline__ bool better(float v, int i, float bv, int bi) {
  return v > bv || (v == bv && i < bi);
}

// The best (value, index) over the warp, on every lane.
__device__ __forceinline__ void warp_best(float& bv, int& bi) {
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
    const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (better(ov, oi, bv, bi)) {
      bv = ov;
      bi = oi;
    }
  }
}

__global__ void argmax_kernel(const float* __restrict__ logits, int n, int32_t* __restrict__ out) {
  __shared__ float sv[32];
  __shared__ int si[32];
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * n;
  float bv = -INFINITY;
  int bi = n;  // "none yet": loses to any real index
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = row[i];
    if (!isnan(v) && better(v, i, bv, bi)) {
      bv = v;
      bi = i;
    }
  }
  warp_best(bv, bi);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    sv[warp] = bv;
    si[warp] = bi;
  }
  __syncthreads();
  if (warp == 0) {
    const int n_warps = blockDim.x >> 5;
    bv = lane < n_warps ? sv[lane] : -INFINITY;
    bi = lane < n_warps ? si[lane] : n;
    warp_best(bv, bi);
    if (lane == 0) out[blockIdx.x] = bi < n ? bi : 0;  // all NaN: 0
  }
}

}  // namespace

Status argmax(const float* logits, int rows, int n, int32_t* out, Stream s) {
  if (rows < 0 || n < 1) return shape_error("argmax", std::to_string(rows) + " rows of " + std::to_string(n));
  if (!logits || !out) return shape_error("argmax", "a null pointer");
  if (rows == 0) return {};
  argmax_kernel<<<rows, 1024, 0, stream_of(s)>>>(logits, n, out);
  return launch_status("argmax");
}

}  // namespace chorus::cuda
