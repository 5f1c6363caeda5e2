// Paged multi-block view attention (kernels/cuda/ops.h has the contract). One block of 4 warps
// per (token, KV head): the query heads sharing the KV head (grouped-query attention, up to 8)
// are rotated per segment into shared memory; each warp walks whole pages of the segment (a
// lane holds head_dim/32 dimensions; a score is a warp sum) with its own online softmax; at the
// end the warps' states are combined in shared memory, rescaled to the largest maximum.
#include <cfloat>

#include "kernels/cuda/common.cuh"

namespace chorus::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kMaxGroup = 8;
constexpr int kPage = 16;

template <class T, int D>  // D = head_dim / 32
__global__ void __launch_bounds__(kWarps * 32, 4) attention_kernel(AttnArgs a) {
  extern __shared__ float smem[];
  const int hd = D * 32;
  const int nq = a.n_heads / a.n_kv_heads;
  float* qs = smem;                             // [nq][hd] the rotated queries
  float* part_acc = qs + nq * hd;               // [kWarps][nq][hd]
  float* part_m = part_acc + kWarps * nq * hd;  // [kWarps][nq]
  float* part_l = part_m + kWarps * nq;         // [kWarps][nq]

  const int kvh = blockIdx.x, t = blockIdx.y;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const AttnToken tok = a.tokens[t];
  const float* q_raw = a.q + (static_cast<int64_t>(t) * a.n_heads + static_cast<int64_t>(kvh) * nq) * hd;
  const T* k_pool = static_cast<const T*>(a.k_pool);
  const T* v_pool = static_cast<const T*>(a.v_pool);
  const int half = a.n_rot / 2;

  float m[kMaxGroup], l[kMaxGroup], acc[kMaxGroup][D];
#pragma unroll
  for (int h = 0; h < kMaxGroup; ++h) {
    m[h] = -FLT_MAX;
    l[h] = 0.0f;
#pragma unroll
    for (int d = 0; d < D; ++d) acc[h][d] = 0.0f;
  }

  for (int si = 0; si < tok.n_segs; ++si) {
    const AttnSegment seg = a.segs[tok.first_seg + si];
    __syncthreads();  // the previous segment's queries are no longer read
    // Rotate the group's queries by q_pos, as rope_cache + rope on the CPU.
    for (int idx = threadIdx.x; idx < nq * half; idx += blockDim.x) {
      const int h = idx / half, i = idx % half;
      float theta = static_cast<float>(seg.q_pos);
      for (int j = 0; j < i; ++j) theta *= a.theta_scale;
      const float angle = a.freq_scale * theta;
      const float c = cosf(angle), s = sinf(angle);
      const int ia = a.neox ? i : 2 * i, ib = a.neox ? i + half : 2 * i + 1;
      const float x0 = q_raw[h * hd + ia], x1 = q_raw[h * hd + ib];
      qs[h * hd + ia] = fmaf(x0, c, -(x1 * s));
      qs[h * hd + ib] = fmaf(x0, s, x1 * c);
    }
    for (int idx = threadIdx.x; idx < nq * (hd - a.n_rot); idx += blockDim.x) {
      const int h = idx / (hd - a.n_rot), i = a.n_rot + idx % (hd - a.n_rot);
      qs[h * hd + i] = q_raw[h * hd + i];
    }
    __syncthreads();

    const int n_pages = (seg.n_kv + kPage - 1) / kPage;
    for (int pi = warp; pi < n_pages; pi += kWarps) {
      const int64_t page = a.page_ids[seg.first_page + pi];
      const T* kp = k_pool + page * a.page_stride + static_cast<int64_t>(kvh) * hd;
      const T* vp = v_pool + page * a.page_stride + static_cast<int64_t>(kvh) * hd;
      const int n_here = min(kPage, seg.n_kv - pi * kPage);
      for (int j = 0; j < n_here; ++j) {
        float kr[D], vr[D];
#pragma unroll
        for (int d = 0; d < D; ++d) {
          kr[d] = load_f(kp + static_cast<int64_t>(j) * a.kv_stride + lane + 32 * d);
          vr[d] = load_f(vp + static_cast<int64_t>(j) * a.kv_stride + lane + 32 * d);
        }
#pragma unroll
        for (int h = 0; h < kMaxGroup; ++h) {
          if (h >= nq) break;
          float dot = 0.0f;
#pragma unroll
          for (int d = 0; d < D; ++d) dot = fmaf(qs[h * hd + lane + 32 * d], kr[d], dot);
          const float score = warp_sum(dot) * a.scale;
          const float m_new = fmaxf(m[h], score);
          const float corr = expf(m[h] - m_new), p = expf(score - m_new);
          l[h] = l[h] * corr + p;
#pragma unroll
          for (int d = 0; d < D; ++d) acc[h][d] = fmaf(p, vr[d], acc[h][d] * corr);
          m[h] = m_new;
        }
      }
    }
  }

  // Combine the warps' partial softmax states.
#pragma unroll
  for (int h = 0; h < kMaxGroup; ++h) {
    if (h >= nq) break;
#pragma unroll
    for (int d = 0; d < D; ++d) part_acc[(warp * nq + h) * hd + lane + 32 * d] = acc[h][d];
    if (lane == 0) {
      part_m[warp * nq + h] = m[h];
      part_l[warp * nq + h] = l[h];
    }
  }
  __syncthreads();
  float* out = a.out + (static_cast<int64_t>(t) * a.n_heads + static_cast<int64_t>(kvh) * nq) * hd;
  for (int idx = threadIdx.x; idx < nq * hd; idx += blockDim.x) {
    const int h = idx / hd, d = idx % hd;
    float mx = -FLT_MAX;
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, part_m[w * nq + h]);
    float num = 0.0f, den = 0.0f;
    for (int w = 0; w < kWarps; ++w) {
      if (part_l[w * nq + h] == 0.0f) continue;  // a warp that saw no position
      const float f = expf(part_m[w * nq + h] - mx);
      num += part_acc[(w * nq + h) * hd + d] * f;
      den += part_l[w * nq + h] * f;
    }
    out[idx] = den > 0.0f ? num / den : 0.0f;
  }
}

template <class T>
Status launch(const AttnArgs& a, cudaStream_t st) {
  const int nq = a.n_heads / a.n_kv_heads;
  const size_t shared =
      sizeof(float) * (static_cast<size_t>(nq) * a.head_dim * (1 + kWarps) + 2 * kWarps * nq);
  const dim3 grid(a.n_kv_heads, a.n_tokens);
  switch (a.head_dim / 32) {
    case 1: attention_kernel<T, 1><<<grid, kWarps * 32, shared, st>>>(a); break;
    case 2: attention_kernel<T, 2><<<grid, kWarps * 32, shared, st>>>(a); break;
    case 3: attention_kernel<T, 3><<<grid, kWarps * 32, shared, st>>>(a); break;
    case 4: attention_kernel<T, 4><<<grid, kWarps * 32, shared, st>>>(a); break;
    case 5: attention_kernel<T, 5><<<grid, kWarps * 32, shared, st>>>(a); break;
    case 6: attention_kernel<T, 6><<<grid, kWarps * 32, shared, st>>>(a); break;
    case 7: attention_kernel<T, 7><<<grid, kWarps * 32, shared, st>>>(a); break;
    default: attention_kernel<T, 8><<<grid, kWarps * 32, shared, st>>>(a); break;
  }
  return launch_status("attention");
}

}  // namespace

Status check_attention_args(const char* op, const AttnArgs& a) {
  auto bad = [op](const std::string& what) { return shape_error(op, what); };
  if (a.head_dim < 32 || a.head_dim > 256 || a.head_dim % 32 != 0)
    return bad("head_dim " + std::to_string(a.head_dim) + " (must be a multiple of 32, 32..256)");
  if (a.n_kv_heads < 1 || a.n_heads < a.n_kv_heads || a.n_heads % a.n_kv_heads != 0 ||
      a.n_heads / a.n_kv_heads > kMaxGroup)
    return bad(std::to_string(a.n_heads) + " query heads over " + std::to_string(a.n_kv_heads) +
               " KV heads (groups of 1.." + std::to_string(kMaxGroup) + ")");
  if (a.n_rot < 0 || a.n_rot > a.head_dim || a.n_rot % 2 != 0)
    return bad("n_rot " + std::to_string(a.n_rot) + " (must be even, 0.." + std::to_string(a.head_dim) + ")");
  if (a.kv_stride < a.n_kv_heads * a.head_dim)
    return bad("kv_stride " + std::to_string(a.kv_stride) + " < n_kv_heads * head_dim");
  if (a.page_stride < static_cast<int64_t>(kPage) * a.kv_stride)
    return bad("page_stride " + std::to_string(a.page_stride) + " < 16 * kv_stride");
  if (a.n_tokens < 0 || a.n_tokens > 65535)
    return bad("n_tokens " + std::to_string(a.n_tokens) + " (0..65535)");
  if (!a.q || !a.k_pool || !a.v_pool || !a.page_ids || !a.segs || !a.tokens || !a.out)
    return bad("a null pointer");
  return {};
}

Status attention(const AttnArgs& a, Stream s) {
  if (Status err = check_attention_args("attention", a); !err.ok()) return err;
  if (a.n_tokens == 0) return {};
  return a.kv_bf16 ? launch<__nv_bfloat16>(a, stream_of(s)) : launch<float>(a, stream_of(s));
}

}  // namespace chorus::cuda
