// Helpers of the CUDA benchmarks (tools/bench/cuda_step_bench.cpp, cuda_bench_runners.cpp): exit
// with a message on any error, device buffers from the pool, random fills, event timing.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/status.h"
#include "device/cuda_device.h"
#include "kernels/cuda/ops.h"

namespace chorus::bench {

[[noreturn]] inline void die(const std::string& what) {
  std::fprintf(stderr, "chorus_cuda_step_bench: %s\n", what.c_str());
  std::exit(1);
}
inline void check(const std::string& err) {
  if (!err.empty()) die(err);
}
inline void check(const Status& s) {
  if (!s.ok()) die(s.error().to_string());
}
template <class T>
T* alloc(CudaDevice& dev, int64_t n, const char* what) {
  auto p = dev.alloc(n * static_cast<int64_t>(sizeof(T)), what);
  if (!p) die(p.error().to_string());
  return static_cast<T*>(*p);
}

inline float* vec(CudaDevice& dev, int64_t n, uint64_t seed, float scale = 1.0f) {
  float* p = alloc<float>(dev, n, "vector");
  check(cuda::fill_uniform_f32(p, n, seed, scale, dev.stream()).message());
  return p;
}

inline void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) die(std::string(what) + ": " + cudaGetErrorString(e));
}

// Milliseconds per step: the median of `reps` timed runs of `steps` steps each.
template <class F>
double time_steps(CudaDevice& dev, F&& run, int steps, int reps) {
  auto st = static_cast<cudaStream_t>(dev.stream());
  cudaEvent_t a, b;
  cuda_ok(cudaEventCreate(&a), "cudaEventCreate");
  cuda_ok(cudaEventCreate(&b), "cudaEventCreate");
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    cuda_ok(cudaEventRecord(a, st), "cudaEventRecord");
    for (int i = 0; i < steps; ++i) run();
    cuda_ok(cudaEventRecord(b, st), "cudaEventRecord");
    cuda_ok(cudaEventSynchronize(b), "cudaEventSynchronize");
    float t = 0;
    cuda_ok(cudaEventElapsedTime(&t, a, b), "cudaEventElapsedTime");
    ms.push_back(t / steps);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace chorus::bench
