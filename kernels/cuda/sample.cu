// Sampling on the device: each row's token from its logits with the CPU Sampler's filters and
// arithmetic (engine/forward/sampler.cpp: top-k -> top-p -> min-p -> temperature -> draw at u), so only
// one int per sequence comes back to the host instead of a row of logits.
//
// One block of 256 threads per row:
//   1. radix select (four 8-bit passes over an order-preserving key of each logit) finds the
//      k-th largest key T and how many entries equal to T are needed;
//   2. every entry above T, and the lowest-id entries equal to T, are gathered (each thread
//      walks a contiguous slice, so the ties are taken in id order);
//   3. a bitonic sort orders the k candidates by (logit desc, id asc), the CPU's order;
//   4. the exponentials are computed in parallel, the sums and the filters run in order on one
//      thread, exactly as the CPU loops do.
#include <cfloat>

#include "kernels/cuda/common.cuh"

namespace chorus::cuda {
namespace {

constexpr int kThreads = 256;
static_assert(kMaxSampleTopK == kThreads, "one candidate per thread");

// Larger logit -> larger key; -0 and +0 equal; NaN lowest (never drawn unless nothing else is
// left).
__device__ __forceinline__ uint32_t order_key(float v) {
  if (isnan(v)) return 0u;
  const uint32_t b = __float_as_uint(v == 0.0f ? 0.0f : v);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

__global__ void __launch_bounds__(kThreads)
    sample_kernel(const float* __restrict__ logits, int n_rows, int n, const SampleRow* __restrict__ params,
                  int32_t* __restrict__ out) {
  __shared__ uint32_t hist[256];
  __shared__ uint32_t n_gt[kThreads], n_eq[kThreads];  // per thread, then exclusive prefixes
  __shared__ uint32_t ckey[kThreads];
  __shared__ int32_t cid[kThreads];
  __shared__ float cprob[kThreads];
  __shared__ double cw[kThreads];
  __shared__ uint32_t s_prefix, s_remaining;
  __shared__ int s_keep;
  __shared__ float s_mx;
  const int tid = threadIdx.x;
  const SampleRow p = params[blockIdx.x];
  if (p.row < 0 || p.row >= n_rows) {  // the launcher cannot see device parameters: refuse here
    if (tid == 0) out[blockIdx.x] = -1;
    return;
  }
  const float* row = logits + static_cast<int64_t>(p.row) * n;
  const bool greedy = !(p.temperature > 0.0f);
  const int k = greedy ? 1 : max(1, min(min(p.top_k, n), kThreads));

  // 1. The k-th largest key, a byte at a time from the top.
  uint32_t prefix = 0, mask = 0, remaining = static_cast<uint32_t>(k);
  for (int shift = 24; shift >= 0; shift -= 8) {
    hist[tid] = 0;
    __syncthreads();
    for (int i = tid; i < n; i += kThreads) {
      const uint32_t key = order_key(row[i]);
      if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (tid == 0) {
      uint32_t above = 0;
      int d = 255;
      for (; d > 0; --d) {
        if (above + hist[d] >= remaining) break;
        above += hist[d];
      }
      s_prefix = prefix | (static_cast<uint32_t>(d) << shift);
      s_remaining = remaining - above;
    }
    __syncthreads();
    prefix = s_prefix;
    remaining = s_remaining;
    mask |= 255u << shift;
  }
  const uint32_t T = prefix;
  const uint32_t want_gt = static_cast<uint32_t>(k) - remaining;

  // 2. Gather: counts per contiguous slice, prefixes, then the entries at their places.
  const int len = (n + kThreads - 1) / kThreads;
  const int lo = min(n, tid * len), hi = min(n, lo + len);
  uint32_t gt = 0, eq = 0;
  for (int i = lo; i < hi; ++i) {
    const uint32_t key = order_key(row[i]);
    gt += key > T;
    eq += key == T;
  }
  n_gt[tid] = gt;
  n_eq[tid] = eq;
  __syncthreads();
  if (tid == 0) {
    uint32_t a = 0, b = 0;
    for (int t = 0; t < kThreads; ++t) {
      const uint32_t x = n_gt[t], y = n_eq[t];
      n_gt[t] = a;
      n_eq[t] = b;
      a += x;
      b += y;
    }
  }
  ckey[tid] = 0;
  cid[tid] = INT32_MAX;  // padding sorts last
  __syncthreads();
  uint32_t at_gt = n_gt[tid], at_eq = n_eq[tid];
  for (int i = lo; i < hi; ++i) {
    const uint32_t key = order_key(row[i]);
    if (key > T) {
      if (at_gt < want_gt) {
        ckey[at_gt] = key;
        cid[at_gt] = i;
      }
      ++at_gt;
    } else if (key == T) {
      if (at_eq < remaining) {
        ckey[want_gt + at_eq] = key;
        cid[want_gt + at_eq] = i;
      }
      ++at_eq;
    }
  }
  __syncthreads();

  // 3. Bitonic sort of the 256 slots: key descending, id ascending.
  for (int size = 2; size <= kThreads; size <<= 1)
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      const int j = tid ^ stride;
      if (j > tid) {
        const bool first_before = ckey[tid] > ckey[j] || (ckey[tid] == ckey[j] && cid[tid] < cid[j]);
        const bool descending_run = (tid & size) == 0;  // this run puts the best first
        if (descending_run != first_before) {
          const uint32_t tk = ckey[tid];
          ckey[tid] = ckey[j];
          ckey[j] = tk;
          const int32_t ti = cid[tid];
          cid[tid] = cid[j];
          cid[j] = ti;
        }
      }
      __syncthreads();
    }
  if (greedy) {
    if (tid == 0) out[blockIdx.x] = cid[0] < n ? cid[0] : 0;
    return;
  }

  // 4. Probabilities at temperature 1 for top-p / min-p, then the tempered weights and the draw,
  // in the CPU's order and precision.
  const float mx = row[cid[0]];
  if (tid < k) cprob[tid] = expf(row[cid[tid]] - mx);
  __syncthreads();
  if (tid == 0) {
    float sum = 0.0f;
    for (int i = 0; i < k; ++i) sum += cprob[i];
    for (int i = 0; i < k; ++i) cprob[i] /= sum;
    int keep = k;
    if (p.top_p < 1.0f) {
      float cum = 0.0f;
      int kk = 0;
      while (kk < keep) {
        cum += cprob[kk++];
        if (cum >= p.top_p) break;
      }
      keep = max(kk, 1);
    }
    if (p.min_p > 0.0f) {
      int kk = 1;
      while (kk < keep && cprob[kk] >= p.min_p * cprob[0]) ++kk;
      keep = kk;
    }
    s_keep = keep;
    s_mx = mx;
  }
  __syncthreads();
  const int keep = s_keep;
  if (tid < keep) cw[tid] = exp(static_cast<double>(row[cid[tid]] - s_mx) / p.temperature);
  __syncthreads();
  if (tid == 0) {
    double total = 0.0;
    for (int i = 0; i < keep; ++i) total = __dadd_rn(total, cw[i]);
    double r = __dmul_rn(p.u, total);  // rounded as written: no fused multiply-subtract
    int pick = keep - 1;
    for (int i = 0; i < keep; ++i) {
      r = __dsub_rn(r, cw[i]);
      if (r <= 0.0) {
        pick = i;
        break;
      }
    }
    out[blockIdx.x] = cid[pick];
  }
}

}  // namespace

Status sample_rows(const float* logits, int n_rows, int n, const SampleRow* params, int n_samples,
                   int32_t* out, Stream s) {
  if (n_samples < 0 || n_rows < 0 || n < 1)
    return shape_error("sample_rows", std::to_string(n_samples) + " samples from " + std::to_string(n_rows) +
                                          " rows of " + std::to_string(n));
  if (!logits || !params || !out) return shape_error("sample_rows", "a null pointer");
  if (n_samples == 0) return {};
  sample_kernel<<<n_samples, kThreads, 0, stream_of(s)>>>(logits, n_rows, n, params, out);
  return launch_status("sample_rows");
}

}  // namespace chorus::cuda
