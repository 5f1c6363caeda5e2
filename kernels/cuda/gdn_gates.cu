// Gated DeltaNet's per-head gates: decay g = ssm_a * softplus(alpha + dt_bias), strength
// beta = sigmoid(b), from separate alpha and b rows or qwen3next's packed ones. One thread per
// (token, head).
#include "kernels/cuda/common.cuh"

namespace chorus::cuda {
namespace {

// packed_r 0: alpha and b are [n][hv]; else ba is [n][hv / packed_r][b x packed_r | alpha x packed_r].
__global__ void gdn_gates_kernel(const float* __restrict__ alpha, const float* __restrict__ b, int packed_r,
                                 const float* __restrict__ dt_bias, const float* __restrict__ ssm_a, int n,
                                 int hv, float* __restrict__ g, float* __restrict__ beta) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<int64_t>(n) * hv) return;
  const int h = static_cast<int>(idx % hv);
  int64_t at_a = idx, at_b = idx;
  if (packed_r > 0) {
    const int64_t t = idx / hv, kg = h / packed_r, j = h % packed_r;
    at_b = t * 2 * hv + kg * 2 * packed_r + j;
    at_a = at_b + packed_r;
  }
  const float a = alpha[at_a] + dt_bias[h];
  const float softplus = a > 20.0f ? a : log1pf(expf(a));
  g[idx] = ssm_a[h] * softplus;
  beta[idx] = 1.0f / (1.0f + expf(-b[at_b]));
}

Status launch_gates(const float* alpha, const float* b, int packed_r, const float* dt_bias,
                    const float* ssm_a, int n_tokens, int n_v_heads, float* g, float* beta, Stream s) {
  const int64_t total = static_cast<int64_t>(n_tokens) * n_v_heads;
  if (total == 0) return {};
  gdn_gates_kernel<<<static_cast<unsigned>((total + 255) / 256), 256, 0, stream_of(s)>>>(
      alpha, b, packed_r, dt_bias, ssm_a, n_tokens, n_v_heads, g, beta);
  return launch_status("gdn_gates");
}

}  // namespace

Status gdn_gates(const float* alpha, const float* b, const float* dt_bias, const float* ssm_a, int n_tokens,
                 int n_v_heads, float* g, float* beta, Stream s) {
  if (n_tokens < 0 || n_v_heads < 1)
    return shape_error("gdn_gates",
                       std::to_string(n_tokens) + " tokens, " + std::to_string(n_v_heads) + " heads");
  if (!alpha || !b || !dt_bias || !ssm_a || !g || !beta) return shape_error("gdn_gates", "a null pointer");
  return launch_gates(alpha, b, 0, dt_bias, ssm_a, n_tokens, n_v_heads, g, beta, s);
}

Status gdn_gates_packed(const float* ba, const float* dt_bias, const float* ssm_a, int n_tokens,
                        int n_v_heads, int n_k_heads, float* g, float* beta, Stream s) {
  if (n_tokens < 0 || n_k_heads < 1 || n_v_heads < n_k_heads || n_v_heads % n_k_heads != 0)
    return shape_error("gdn_gates_packed", std::to_string(n_tokens) + " tokens, " +
                                               std::to_string(n_v_heads) + " value heads over " +
                                               std::to_string(n_k_heads) + " key heads");
  if (!ba || !dt_bias || !ssm_a || !g || !beta) return shape_error("gdn_gates_packed", "a null pointer");
  return launch_gates(ba, ba, n_v_heads / n_k_heads, dt_bias, ssm_a, n_tokens, n_v_heads, g, beta, s);
}

}  // namespace chorus::cuda
