// A trivial kernel whose only job is to prove that nvcc output compiles, links and (where a
// GPU exists) runs: y[i] = a * x[i] + y[i]. Real kernels arrive with the CUDA backend.
#include "kernels/cuda/smoke.h"

namespace chorus::cuda {

__global__ void saxpy_kernel(int n, float a, const float* x, float* y) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

int launch_saxpy(int n, float a, const float* x, float* y) {
  const int threads = 256;
  saxpy_kernel<<<(n + threads - 1) / threads, threads>>>(n, a, x, y);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace chorus::cuda
