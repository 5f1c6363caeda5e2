// What the CUDA ops share: launch-error reporting, warp reductions, bf16 conversion. Included by
// the .cu files only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "kernels/cuda/ops.h"

namespace chorus::cuda {

inline cudaStream_t stream_of(Stream s) {
  return static_cast<cudaStream_t>(s);
}

// "" after a good launch, else "cuda OP: <CUDA's error>".
inline Status launch_status(const char* op) {
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return Status::success();
  return make_error(Errc::internal,
                    std::string("cuda ") + op + ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
}

inline Status shape_error(const char* op, const std::string& what) {
  return make_error(Errc::invalid_argument, std::string("cuda ") + op + ": " + what);
}

// The shape checks of both attention kernels (attention.cu): "" or what is wrong, as `op`.
Status check_attention_args(const char* op, const AttnArgs& a);

// Blocks of 256 threads for a grid-stride loop over n elements (at most 65535: the loop covers
// the rest).
inline unsigned grid_stride_blocks(int64_t n) {
  return static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 65535));
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ float load_f(const float* p) {
  return *p;
}
__device__ __forceinline__ float load_f(const __nv_bfloat16* p) {
  return __bfloat162float(*p);
}

// Sum over a block of blockDim.x threads (a multiple of 32, <= 1024); every thread gets it.
// `shared` holds 32 floats. Ends with a barrier, so `shared` may be reused right after.
__device__ __forceinline__ float block_sum(float v, float* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  v = warp_sum(v);
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float t = lane < n_warps ? shared[lane] : 0.0f;
  t = warp_sum(t);
  __syncthreads();
  return t;
}

}  // namespace chorus::cuda
