// Gated DeltaNet's per-head gates: decay g = ssm_a * softplus(alpha + dt_bias), strength
// beta = sigmoid(b). One thread per (token, head).
#include "kernels/cuda/common.cuh"

namespace chorus::cuda {
namespace {

__global__ void gdn_gates_kernel(const float* __restrict__ alpha, const float* __restrict__ b,
                                 const float* __restrict__ dt_bias, const float* __restrict__ ssm_a, int n, int hv,
                                 float* __restrict__ g, float* __restrict__ beta) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<int64_t>(n) * hv) return;
  const int h = static_cast<int>(idx % hv);
  const float a = alpha[idx] + dt_bias[h];
  const float softplus = a > 20.0f ? a : log1pf(expf(a));
  g[idx] = ssm_a[h] * softplus;
  beta[idx] = 1.0f / (1.0f + expf(-b[idx]));
}

}  // namespace

std::string gdn_gates(const float* alpha, const float* b, const float* dt_bias, const float* ssm_a, int n_tokens,
                      int n_v_heads, float* g, float* beta, Stream s) {
  if (n_tokens < 0 || n_v_heads < 1)
    return shape_error("gdn_gates", std::to_string(n_tokens) + " tokens, " + std::to_string(n_v_heads) + " heads");
  if (!alpha || !b || !dt_bias || !ssm_a || !g || !beta) return shape_error("gdn_gates", "a null pointer");
  const int64_t total = static_cast<int64_t>(n_tokens) * n_v_heads;
  if (total == 0) return {};
  gdn_gates_kernel<<<static_cast<unsigned>((total + 255) / 256), 256, 0, stream_of(s)>>>(alpha, b, dt_bias, ssm_a,
                                                                                          n_tokens, n_v_heads, g, beta);
  return launch_status("gdn_gates");
}

}  // namespace chorus::cuda
