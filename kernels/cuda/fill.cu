// Uniform random fill from a counter hash (splitmix64 of seed + index): reproducible, no state.
#include "kernels/cuda/common.cuh"

namespace chorus::cuda {
namespace {

__device__ __forceinline__ float uniform_at(uint64_t seed, int64_t i, float scale) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(i + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  const float u = static_cast<float>(z >> 40) * (1.0f / 16777216.0f);  // [0, 1)
  return (2.0f * u - 1.0f) * scale;
}

template <class T>
__global__ void fill_kernel(T* __restrict__ x, int64_t n, uint64_t seed, float scale) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if constexpr (sizeof(T) == 2)
      x[i] = __float2bfloat16(uniform_at(seed, i, scale));
    else
      x[i] = uniform_at(seed, i, scale);
  }
}

template <class T>
Status fill(const char* op, T* x, int64_t n, uint64_t seed, float scale, Stream s) {
  if (n < 0) return shape_error(op, "n = " + std::to_string(n));
  if (!x) return shape_error(op, "a null pointer");
  if (n == 0) return {};
  fill_kernel<T><<<grid_stride_blocks(n), 256, 0, stream_of(s)>>>(x, n, seed, scale);
  return launch_status(op);
}

}  // namespace

Status fill_uniform_bf16(bf16_bits* x, int64_t n, uint64_t seed, float scale, Stream s) {
  return fill("fill_uniform_bf16", reinterpret_cast<__nv_bfloat16*>(x), n, seed, scale, s);
}

Status fill_uniform_f32(float* x, int64_t n, uint64_t seed, float scale, Stream s) {
  return fill("fill_uniform_f32", x, n, seed, scale, s);
}

}  // namespace chorus::cuda
