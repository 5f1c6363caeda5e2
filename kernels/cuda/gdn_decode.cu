// Gated DeltaNet decode: one token per sequence on its recurrent state. One block of 4 warps per
// (v-head, sequence); a warp updates whole rows of S [dv][dk] (a lane holds dk/32 columns of
// the row, loads coalesced), so (S k)_i and (S q)_i are warp sums and S is read and written
// once per token.
#include "kernels/cuda/common.cuh"

namespace chorus::cuda {
namespace {

constexpr int kWarps = 4;

template <int D>  // D = dk / 32
__global__ void __launch_bounds__(kWarps * 32) gdn_decode_kernel(GdnDecodeArgs a) {
  const int h = blockIdx.x, sq = blockIdx.y;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int dk = D * 32;
  const int kh = a.kh_mod ? h % a.n_k_heads : h / (a.n_v_heads / a.n_k_heads);
  const float* q = a.q + (static_cast<int64_t>(sq) * a.n_k_heads + kh) * dk;
  const float* k = a.k + (static_cast<int64_t>(sq) * a.n_k_heads + kh) * dk;
  const float* v = a.v + (static_cast<int64_t>(sq) * a.n_v_heads + h) * a.dv;
  const float decay = expf(a.g[static_cast<int64_t>(sq) * a.n_v_heads + h]);
  const float beta = a.beta[static_cast<int64_t>(sq) * a.n_v_heads + h];
  float* S = a.states[sq] + static_cast<int64_t>(h) * a.dv * dk;
  float* out = a.out + (static_cast<int64_t>(sq) * a.n_v_heads + h) * a.dv;
  float qr[D], kr[D];
#pragma unroll
  for (int d = 0; d < D; ++d) {
    qr[d] = q[lane + 32 * d];
    kr[d] = k[lane + 32 * d];
  }
  for (int i = warp; i < a.dv; i += kWarps) {
    float* row = S + static_cast<int64_t>(i) * dk;
    float s[D];
    float sk = 0.0f;
#pragma unroll
    for (int d = 0; d < D; ++d) {
      s[d] = row[lane + 32 * d] * decay;
      sk = fmaf(s[d], kr[d], sk);
    }
    sk = warp_sum(sk);
    const float delta = beta * (v[i] - sk);
    float o = 0.0f;
#pragma unroll
    for (int d = 0; d < D; ++d) {
      s[d] = fmaf(delta, kr[d], s[d]);
      row[lane + 32 * d] = s[d];
      o = fmaf(s[d], qr[d], o);
    }
    o = warp_sum(o);
    if (lane == 0) out[i] = o;
  }
}

}  // namespace

Status gdn_decode(const GdnDecodeArgs& a, Stream s) {
  auto bad = [](const std::string& what) { return shape_error("gdn_decode", what); };
  if (a.dk < 32 || a.dk > 256 || a.dk % 32 != 0)
    return bad("dk " + std::to_string(a.dk) + " (a multiple of 32, 32..256)");
  if (a.dv < 1) return bad("dv " + std::to_string(a.dv));
  if (a.n_k_heads < 1 || a.n_v_heads < a.n_k_heads || a.n_v_heads % a.n_k_heads != 0)
    return bad(std::to_string(a.n_v_heads) + " value heads over " + std::to_string(a.n_k_heads) +
               " key heads (must be a multiple)");
  if (a.n_seq < 0 || a.n_seq > 65535) return bad("n_seq " + std::to_string(a.n_seq) + " (0..65535)");
  if (!a.states || !a.q || !a.k || !a.v || !a.g || !a.beta || !a.out) return bad("a null pointer");
  if (a.n_seq == 0) return {};
  const dim3 grid(a.n_v_heads, a.n_seq);
  cudaStream_t st = stream_of(s);
  switch (a.dk / 32) {
    case 1: gdn_decode_kernel<1><<<grid, kWarps * 32, 0, st>>>(a); break;
    case 2: gdn_decode_kernel<2><<<grid, kWarps * 32, 0, st>>>(a); break;
    case 3: gdn_decode_kernel<3><<<grid, kWarps * 32, 0, st>>>(a); break;
    case 4: gdn_decode_kernel<4><<<grid, kWarps * 32, 0, st>>>(a); break;
    case 5: gdn_decode_kernel<5><<<grid, kWarps * 32, 0, st>>>(a); break;
    case 6: gdn_decode_kernel<6><<<grid, kWarps * 32, 0, st>>>(a); break;
    case 7: gdn_decode_kernel<7><<<grid, kWarps * 32, 0, st>>>(a); break;
    default: gdn_decode_kernel<8><<<grid, kWarps * 32, 0, st>>>(a); break;
  }
  return launch_status("gdn_decode");
}

}  // namespace chorus::cuda
