// Attention output gates (qwen35's attention layers): attn_q yields each head's query then its
// gate; the query goes to attention, and the attention output is multiplied by sigmoid(gate).
#include "kernels/cuda/common.cuh"

namespace chorus::cuda {
namespace {

__global__ void split_query_gate_kernel(const float* __restrict__ qg, float* __restrict__ q,
                                        float* __restrict__ gate, int64_t n, int head_dim) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / head_dim, d = i % head_dim;  // row: a (token, head)
    q[i] = qg[row * 2 * head_dim + d];
    gate[i] = qg[row * 2 * head_dim + head_dim + d];
  }
}

__global__ void sigmoid_mul_kernel(float* __restrict__ y, const float* __restrict__ g, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] *= 1.0f / (1.0f + expf(-g[i]));
}

}  // namespace

Status split_query_gate(const float* qg, float* q, float* gate, int n_tokens, int n_heads, int head_dim,
                        Stream s) {
  if (n_tokens < 0 || n_heads <= 0 || head_dim <= 0)
    return shape_error("split_query_gate", std::to_string(n_tokens) + " tokens of " +
                                               std::to_string(n_heads) + " heads of " +
                                               std::to_string(head_dim));
  if (!qg || !q || !gate) return shape_error("split_query_gate", "a null pointer");
  const int64_t n = int64_t{n_tokens} * n_heads * head_dim;
  if (n == 0) return {};
  split_query_gate_kernel<<<grid_stride_blocks(n), 256, 0, stream_of(s)>>>(qg, q, gate, n, head_dim);
  return launch_status("split_query_gate");
}

Status sigmoid_mul(float* y, const float* g, int64_t n, Stream s) {
  if (n < 0) return shape_error("sigmoid_mul", "n = " + std::to_string(n));
  if (!y || !g) return shape_error("sigmoid_mul", "a null pointer");
  if (n == 0) return {};
  sigmoid_mul_kernel<<<grid_stride_blocks(n), 256, 0, stream_of(s)>>>(y, g, n);
  return launch_status("sigmoid_mul");
}

}  // namespace chorus::cuda
