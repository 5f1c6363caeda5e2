// Matrix-vector products straight from GGUF Q8_0 weights, for decode steps of a few sequences:
// y [n][m] = x [n][k] W^T with W's rows as ggml stores them ({f16 d; i8 q[32]} blocks), so the
// weights are read once at 34 bytes per 32 values (1.06 bytes a value, against bf16's 2) and
// never converted. One warp per output row, a lane per block of 32 columns at a time; the n <= 4
// input rows are read as float4s (cached: every warp of the grid reads them).
#include <cuda_fp16.h>

#include "kernels/cuda/common.cuh"

namespace chorus::cuda {
namespace {

constexpr int kWarps = 8;

template <int N>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_q8_0_kernel(const uint8_t* __restrict__ w, int64_t row_bytes, int64_t m, int64_t k,
                     const float* __restrict__ x, float* __restrict__ y) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  if (row >= m) return;  // whole warps only: no barrier below
  const uint8_t* wr = w + row * row_bytes;
  const int64_t n_blocks = k / 32;
  float acc[N];
#pragma unroll
  for (int v = 0; v < N; ++v) acc[v] = 0.0f;
  for (int64_t b = lane; b < n_blocks; b += 32) {
    const uint8_t* blk = wr + b * 34;
    const float d = __half2float(__ushort_as_half(*reinterpret_cast<const uint16_t*>(blk)));
    const uint16_t* q2 = reinterpret_cast<const uint16_t*>(blk + 2);  // 2-byte aligned: pairs of quants
    float s[N];
#pragma unroll
    for (int v = 0; v < N; ++v) s[v] = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; ++j) {  // 4 quants (two pairs) against one float4 of each input row
      const uint16_t lo = q2[2 * j], hi = q2[2 * j + 1];
      const float q0 = static_cast<float>(static_cast<int8_t>(lo & 0xff)),
                  q1 = static_cast<float>(static_cast<int8_t>(lo >> 8));
      const float q2f = static_cast<float>(static_cast<int8_t>(hi & 0xff)),
                  q3 = static_cast<float>(static_cast<int8_t>(hi >> 8));
#pragma unroll
      for (int v = 0; v < N; ++v) {
        const float4 xv = reinterpret_cast<const float4*>(x + v * k + b * 32)[j];
        s[v] = fmaf(q0, xv.x, s[v]);
        s[v] = fmaf(q1, xv.y, s[v]);
        s[v] = fmaf(q2f, xv.z, s[v]);
        s[v] = fmaf(q3, xv.w, s[v]);
      }
    }
#pragma unroll
    for (int v = 0; v < N; ++v) acc[v] = fmaf(d, s[v], acc[v]);
  }
#pragma unroll
  for (int v = 0; v < N; ++v) {
    const float t = warp_sum(acc[v]);
    if (lane == 0) y[v * m + row] = t;
  }
}

}  // namespace

Status gemv_q8_0(const void* w, int64_t row_bytes, int64_t m, int64_t k, const float* x, int n, float* y,
                 Stream s) {
  auto bad = [](const std::string& what) { return shape_error("gemv_q8_0", what); };
  if (m < 1 || k < 32 || k % 32 != 0)
    return bad("m " + std::to_string(m) + ", k " + std::to_string(k) + " (k a multiple of 32)");
  if (row_bytes < k / 32 * 34)
    return bad("row_bytes " + std::to_string(row_bytes) + " < " + std::to_string(k / 32 * 34));
  if (row_bytes % 2 != 0)
    return bad("row_bytes " + std::to_string(row_bytes) + " (must be even: 2-byte aligned blocks)");
  if (n < 1 || n > 4) return bad("n " + std::to_string(n) + " (1..4 rows: a GEMM serves more)");
  if (!w || !x || !y) return bad("a null pointer");
  if (reinterpret_cast<uintptr_t>(x) % 16 != 0) return bad("x must be 16-byte aligned");
  const unsigned grid = static_cast<unsigned>((m + kWarps - 1) / kWarps);
  cudaStream_t st = stream_of(s);
  const auto* wb = static_cast<const uint8_t*>(w);
  switch (n) {
    case 1: gemv_q8_0_kernel<1><<<grid, kWarps * 32, 0, st>>>(wb, row_bytes, m, k, x, y); break;
    case 2: gemv_q8_0_kernel<2><<<grid, kWarps * 32, 0, st>>>(wb, row_bytes, m, k, x, y); break;
    case 3: gemv_q8_0_kernel<3><<<grid, kWarps * 32, 0, st>>>(wb, row_bytes, m, k, x, y); break;
    default: gemv_q8_0_kernel<4><<<grid, kWarps * 32, 0, st>>>(wb, row_bytes, m, k, x, y); break;
  }
  return launch_status("gemv_q8_0");
}

}  // namespace chorus::cuda
