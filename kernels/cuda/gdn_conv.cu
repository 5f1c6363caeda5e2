// Gated DeltaNet's causal depthwise convolution then SiLU: one thread per (token, channel), the
// taps summed in the CPU's order (tap 0 first, fused multiply-adds).
#include "kernels/cuda/common.cuh"

namespace chorus::cuda {
namespace {

__global__ void gdn_conv_kernel(const float* __restrict__ prev, const float* __restrict__ x, int n,
                                const float* __restrict__ w, int C, int K, float* __restrict__ y) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<int64_t>(n) * C) return;
  const int t = static_cast<int>(idx / C), c = static_cast<int>(idx % C);
  float acc = 0.0f;
  for (int j = 0; j < K; ++j) {
    const int z = t + j;  // index into prev ++ x
    const float in =
        z < K - 1 ? prev[static_cast<int64_t>(z) * C + c] : x[static_cast<int64_t>(z - (K - 1)) * C + c];
    acc = fmaf(w[static_cast<int64_t>(j) * C + c], in, acc);
  }
  y[idx] = acc / (1.0f + expf(-acc));
}

}  // namespace

Status gdn_conv(const float* prev, const float* x, int n, const float* w, int C, int K, float* y, Stream s) {
  if (n < 0 || C < 1 || K < 1 || K > 16)
    return shape_error("gdn_conv", std::to_string(n) + " tokens, " + std::to_string(C) + " channels, width " +
                                       std::to_string(K) + " (width 1..16)");
  if ((K > 1 && !prev) || !x || !w || !y) return shape_error("gdn_conv", "a null pointer");
  const int64_t total = static_cast<int64_t>(n) * C;
  if (total == 0) return {};
  const int64_t blocks = (total + 255) / 256;
  if (blocks > 0x7fffffff) return shape_error("gdn_conv", "too many elements");
  gdn_conv_kernel<<<static_cast<unsigned>(blocks), 256, 0, stream_of(s)>>>(prev, x, n, w, C, K, y);
  return launch_status("gdn_conv");
}

}  // namespace chorus::cuda
