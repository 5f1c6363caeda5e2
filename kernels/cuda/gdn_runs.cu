// Gated DeltaNet over runs of tokens (prefill, and block summaries): under the delta rule the
// rows of S [dv][dk] evolve independently (row i sees only v_i), and so do the rows of a
// summary's A [dk][dk] (value 0) and B [dv][dk] (value v). One block of 4 warps per (v-head,
// run, 16 rows): a warp keeps 4 rows in registers for the whole run, the run's keys and queries
// pass through shared memory 32 tokens at a time, and per token a row costs two warp sums (S k,
// and S q for the output). The arithmetic is gdn_decode's, in the same order, so a run equals
// its tokens decoded one by one.
#include "kernels/cuda/common.cuh"

namespace chorus::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kRowsPerWarp = 4;
constexpr int kRowsPerBlock = kWarps * kRowsPerWarp;
constexpr int kChunk = 32;  // tokens staged in shared memory at a time

// D = dk / 32, rounded up; kDk the head size when it is D * 32 (known at compile time), or 0:
// dk = a.dk below D * 32 (dk 16), a lane's entries past dk being zeros.
template <int D, int kDk>
__global__ void __launch_bounds__(kWarps * 32) gdn_runs_kernel(GdnRunsArgs a) {
  constexpr int width = D * 32;
  const int dk = kDk > 0 ? kDk : a.dk;
  __shared__ float ks[kChunk][width];
  __shared__ float qs[kChunk][width];
  const int h = blockIdx.x, run = blockIdx.y;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int kh = a.kh_mod ? h % a.n_k_heads : h / (a.n_v_heads / a.n_k_heads);
  const int n_rows = a.n_zero_rows + a.dv;
  const int t0 = a.run_first[run], t1 = a.run_first[run + 1];
  if (!a.mats[run]) return;  // a run whose rows are computed elsewhere (the whole block leaves)
  float* M = a.mats[run] + static_cast<int64_t>(h) * n_rows * dk;
  const bool outputs = a.out != nullptr;

  int row[kRowsPerWarp];
  float s[kRowsPerWarp][D];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    row[r] = blockIdx.z * kRowsPerBlock + warp * kRowsPerWarp + r;
#pragma unroll
    for (int d = 0; d < D; ++d) {
      const int col = lane + 32 * d;
      s[r][d] = row[r] < n_rows && col < dk ? M[static_cast<int64_t>(row[r]) * dk + col] : 0.0f;
    }
  }

  for (int c0 = t0; c0 < t1; c0 += kChunk) {
    const int n = min(kChunk, t1 - c0);
    __syncthreads();  // the previous chunk is no longer read
    for (int idx = threadIdx.x; idx < n * width; idx += blockDim.x) {
      const int j = idx / width, d = idx % width;
      const int64_t at = (static_cast<int64_t>(c0 + j) * a.n_k_heads + kh) * dk + d;
      ks[j][d] = d < dk ? a.k[at] : 0.0f;
      qs[j][d] = outputs && d < dk ? a.q[at] : 0.0f;
    }
    __syncthreads();
    for (int j = 0; j < n; ++j) {
      const int64_t t = c0 + j;
      const float decay = expf(a.g[t * a.n_v_heads + h]);
      const float beta = a.beta[t * a.n_v_heads + h];
      float kr[D];
#pragma unroll
      for (int d = 0; d < D; ++d) kr[d] = ks[j][lane + 32 * d];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        if (row[r] >= n_rows) continue;  // uniform across the warp
        float sk = 0.0f;
#pragma unroll
        for (int d = 0; d < D; ++d) {
          s[r][d] *= decay;
          sk = fmaf(s[r][d], kr[d], sk);
        }
        sk = warp_sum(sk);
        const int vi = row[r] - a.n_zero_rows;  // < 0: a row of A (value 0)
        const float v = vi >= 0 ? a.v[(t * a.n_v_heads + h) * a.dv + vi] : 0.0f;
        const float delta = beta * (v - sk);
#pragma unroll
        for (int d = 0; d < D; ++d) s[r][d] = fmaf(delta, kr[d], s[r][d]);
        if (outputs && vi >= 0) {
          float o = 0.0f;
#pragma unroll
          for (int d = 0; d < D; ++d) o = fmaf(s[r][d], qs[j][lane + 32 * d], o);
          o = warp_sum(o);
          if (lane == 0) a.out[(t * a.n_v_heads + h) * a.dv + vi] = o;
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r)
    if (row[r] < n_rows)
#pragma unroll
      for (int d = 0; d < D; ++d)
        if (lane + 32 * d < dk) M[static_cast<int64_t>(row[r]) * dk + lane + 32 * d] = s[r][d];
}

}  // namespace

Status gdn_runs(const GdnRunsArgs& a, Stream s) {
  auto bad = [](const std::string& what) { return shape_error("gdn_runs", what); };
  if (a.dk != 16 && (a.dk < 32 || a.dk > 128 || a.dk % 32 != 0))
    return bad("dk " + std::to_string(a.dk) + " (16, or a multiple of 32 up to 128)");
  if (a.dv < 1) return bad("dv " + std::to_string(a.dv));
  if (a.n_zero_rows != 0 && a.n_zero_rows != a.dk)
    return bad("n_zero_rows " + std::to_string(a.n_zero_rows) + " (0: states, dk: summaries)");
  if (a.n_zero_rows != 0 && a.out) return bad("summaries have no outputs (out must be null)");
  if (a.n_k_heads < 1 || a.n_v_heads < a.n_k_heads || a.n_v_heads % a.n_k_heads != 0)
    return bad(std::to_string(a.n_v_heads) + " value heads over " + std::to_string(a.n_k_heads) +
               " key heads (must be a multiple)");
  if (a.n_runs < 0 || a.n_runs > 65535) return bad("n_runs " + std::to_string(a.n_runs) + " (0..65535)");
  if (!a.mats || !a.run_first || !a.k || !a.v || !a.g || !a.beta || (a.out && !a.q))
    return bad("a null pointer");
  if (a.n_runs == 0) return {};
  const int n_rows = a.n_zero_rows + a.dv;
  const dim3 grid(a.n_v_heads, a.n_runs, (n_rows + kRowsPerBlock - 1) / kRowsPerBlock);
  if (grid.z > 65535) return bad(std::to_string(n_rows) + " rows per head");
  cudaStream_t st = stream_of(s);
  switch (a.dk) {
    case 16: gdn_runs_kernel<1, 0><<<grid, kWarps * 32, 0, st>>>(a); break;
    case 32: gdn_runs_kernel<1, 32><<<grid, kWarps * 32, 0, st>>>(a); break;
    case 64: gdn_runs_kernel<2, 64><<<grid, kWarps * 32, 0, st>>>(a); break;
    case 96: gdn_runs_kernel<3, 96><<<grid, kWarps * 32, 0, st>>>(a); break;
    default: gdn_runs_kernel<4, 128><<<grid, kWarps * 32, 0, st>>>(a); break;
  }
  return launch_status("gdn_runs");
}

}  // namespace chorus::cuda
