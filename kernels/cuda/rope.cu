// Rotary embedding in place, one thread per (token, head, pair).
#include "kernels/cuda/common.cuh"

namespace chorus::cuda {
namespace {

__global__ void rope_kernel(float* __restrict__ x, const int32_t* __restrict__ pos, int n_tokens, int n_heads,
                            int head_dim, int n_rot, float theta_scale, float freq_scale, bool neox) {
  const int half = n_rot / 2;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<int64_t>(n_tokens) * n_heads * half) return;
  const int i = static_cast<int>(idx % half);
  const int64_t th = idx / half;  // token * n_heads + head
  const int t = static_cast<int>(th / n_heads);
  // theta_scale^i by repeated multiplication in float, as the CPU's rope_cache (same angles).
  float theta = static_cast<float>(pos[t]);
  for (int j = 0; j < i; ++j) theta *= theta_scale;
  const float angle = freq_scale * theta;
  const float c = cosf(angle), sn = sinf(angle);
  float* h = x + th * head_dim;
  const int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
  const float x0 = h[a], x1 = h[b];
  h[a] = fmaf(x0, c, -(x1 * sn));  // the CPU's order: one product rounded, one fused
  h[b] = fmaf(x0, sn, x1 * c);
}

}  // namespace

Status rope(float* x, const int32_t* pos, int n_tokens, int n_heads, int head_dim, int n_rot,
            float theta_scale, float freq_scale, bool neox, Stream s) {
  if (n_tokens < 0 || n_heads < 1 || head_dim < 2)
    return shape_error("rope", "n_tokens " + std::to_string(n_tokens) + ", n_heads " +
                                   std::to_string(n_heads) + ", head_dim " + std::to_string(head_dim) +
                                   " (need n_tokens >= 0, heads >= 1, head_dim >= 2)");
  if (n_rot < 2 || n_rot > head_dim || n_rot % 2 != 0)
    return shape_error(
        "rope", "n_rot = " + std::to_string(n_rot) + " (must be even, 2.." + std::to_string(head_dim) + ")");
  if (!x || !pos) return shape_error("rope", "a null pointer");
  const int64_t n = static_cast<int64_t>(n_tokens) * n_heads * (n_rot / 2);
  if (n == 0) return {};
  const int threads = 256;
  const int64_t blocks = (n + threads - 1) / threads;
  if (blocks > 0x7fffffff) return shape_error("rope", "too many elements");
  rope_kernel<<<static_cast<unsigned>(blocks), threads, 0, stream_of(s)>>>(
      x, pos, n_tokens, n_heads, head_dim, n_rot, theta_scale, freq_scale, neox);
  return launch_status("rope");
}

}  // namespace chorus::cuda
