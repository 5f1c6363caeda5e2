#include "device/cuda_info.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cmath>
#include <vector>

#include "kernels/cuda/smoke.h"

namespace chorus {

CudaInfo cuda_info() {
  CudaInfo info;
  info.built = true;
  cudaRuntimeGetVersion(&info.runtime_version);
  ncclGetVersion(&info.nccl_version);
  const cudaError_t err = cudaGetDeviceCount(&info.device_count);
  if (err != cudaSuccess) {
    info.device_count = 0;
    info.error = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(err);
  }
  return info;
}

std::string cuda_smoke_test() {
  constexpr int n = 1024;
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) {
    x[i] = static_cast<float>(i);
    y[i] = 1.0f;
  }
  float *dx = nullptr, *dy = nullptr;
  auto fail = [&](const char* what, cudaError_t e) {
    cudaFree(dx);
    cudaFree(dy);
    return std::string(what) + ": " + cudaGetErrorString(e);
  };
  cudaError_t e;
  if ((e = cudaMalloc(&dx, n * sizeof(float))) != cudaSuccess) return fail("cudaMalloc", e);
  if ((e = cudaMalloc(&dy, n * sizeof(float))) != cudaSuccess) return fail("cudaMalloc", e);
  cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  cudaMemcpy(dy, y.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  if ((e = static_cast<cudaError_t>(cuda::launch_saxpy(n, 2.0f, dx, dy))) != cudaSuccess)
    return fail("saxpy launch", e);
  if ((e = cudaMemcpy(y.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost)) != cudaSuccess)
    return fail("cudaMemcpy", e);
  cudaFree(dx);
  cudaFree(dy);
  for (int i = 0; i < n; ++i)
    if (std::fabs(y[i] - (2.0f * i + 1.0f)) > 0.0f) return "saxpy result mismatch at " + std::to_string(i);
  return {};
}

}  // namespace chorus
