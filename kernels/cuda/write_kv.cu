// New tokens' keys and values into their KV page slots: one block per token.
#include "kernels/cuda/common.cuh"

namespace chorus::cuda {
namespace {

__device__ __forceinline__ void store(float* p, float x) {
  *p = x;
}
__device__ __forceinline__ void store(__nv_bfloat16* p, float x) {
  *p = __float2bfloat16(x);
}

template <class T>
__global__ void write_kv_kernel(T* __restrict__ k_pool, T* __restrict__ v_pool, int64_t page_stride,
                                int kv_stride, const int32_t* __restrict__ page,
                                const int32_t* __restrict__ slot, const float* __restrict__ k,
                                const float* __restrict__ v) {
  const int t = blockIdx.x;
  const int64_t at = static_cast<int64_t>(page[t]) * page_stride + static_cast<int64_t>(slot[t]) * kv_stride;
  for (int i = threadIdx.x; i < kv_stride; i += blockDim.x) {
    store(k_pool + at + i, k[static_cast<int64_t>(t) * kv_stride + i]);
    store(v_pool + at + i, v[static_cast<int64_t>(t) * kv_stride + i]);
  }
}

}  // namespace

Status write_kv(void* k_pool, void* v_pool, bool kv_bf16, int64_t page_stride, int kv_stride,
                const int32_t* page, const int32_t* slot, const float* k, const float* v, int n, Stream s) {
  if (n < 0 || kv_stride < 1 || page_stride < 16 * int64_t{kv_stride})
    return shape_error("write_kv", std::to_string(n) + " tokens, kv_stride " + std::to_string(kv_stride) +
                                       ", page_stride " + std::to_string(page_stride) +
                                       " (>= 16 * kv_stride)");
  if (!k_pool || !v_pool || !page || !slot || !k || !v) return shape_error("write_kv", "a null pointer");
  if (n == 0) return {};
  if (kv_bf16)
    write_kv_kernel<<<n, 256, 0, stream_of(s)>>>(static_cast<__nv_bfloat16*>(k_pool),
                                                 static_cast<__nv_bfloat16*>(v_pool), page_stride, kv_stride,
                                                 page, slot, k, v);
  else
    write_kv_kernel<<<n, 256, 0, stream_of(s)>>>(static_cast<float*>(k_pool), static_cast<float*>(v_pool),
                                                 page_stride, kv_stride, page, slot, k, v);
  return launch_status("write_kv");
}

}  // namespace chorus::cuda
