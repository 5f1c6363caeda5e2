// Host launcher of the smoke kernel. Device pointers; returns a cudaError_t as int
// (this header stays free of cuda_runtime.h so C++ code can include it).
#pragma once

namespace chorus::cuda {

// y[i] = a * x[i] + y[i] for i < n. REQUIRES: x, y are device pointers of n floats.
int launch_saxpy(int n, float a, const float* x, float* y);

}  // namespace chorus::cuda
