// Mixture-of-experts feed-forward on the device (ops.h rows_dot_f32, moe_route, moe_sort,
// moe_experts, moe_combine), in the CPU's order of operations (engine/forward/cpu/cpu_runner_moe.cpp).
#include "kernels/cuda/common.cuh"

namespace chorus::cuda {
namespace {

constexpr int kRouteThreads = 256;
constexpr int kRowsPerBlock = 8;  // moe_experts: a warp per row
constexpr int kSortThreads = 1024;

// A warp per (token, row), lanes over the columns.
__global__ void rows_dot_kernel(const float* __restrict__ W, int rows, int cols, const float* __restrict__ x,
                                int n, float* __restrict__ out) {
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (warp >= static_cast<int64_t>(rows) * n) return;  // the whole warp
  const int64_t t = warp / rows, r = warp % rows;
  const float* w = W + r * cols;
  const float* xv = x + t * cols;
  float acc = 0.0f;
  for (int i = lane; i < cols; i += 32) acc = fmaf(w[i], xv[i], acc);
  acc = warp_sum(acc);
  if (lane == 0) out[t * rows + r] = acc;
}

// One block per token: softmax over the experts (the sum in double, as the CPU), then the
// n_used most probable one at a time (ties: the lower id), their probabilities renormalised.
__global__ void __launch_bounds__(kRouteThreads)
    route_kernel(const float* __restrict__ logits, int n_expert, int n_used, float scale,
                 int32_t* __restrict__ slot_expert, float* __restrict__ slot_weight) {
  __shared__ float p[kMaxMoeExperts];
  __shared__ float best_p[32];
  __shared__ int best_e[32];
  __shared__ double sums[32];
  __shared__ float picked_p[kMaxMoeUsed];
  __shared__ int picked_e[kMaxMoeUsed];
  const int t = blockIdx.x, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, n_warps = blockDim.x >> 5;
  const float* l = logits + static_cast<int64_t>(t) * n_expert;
  float mx = -INFINITY;
  for (int e = tid; e < n_expert; e += blockDim.x) mx = fmaxf(mx, l[e]);
  mx = warp_max(mx);
  if (lane == 0) best_p[warp] = mx;
  __syncthreads();
  mx = -INFINITY;
  for (int w = 0; w < n_warps; ++w) mx = fmaxf(mx, best_p[w]);
  double sum = 0;
  for (int e = tid; e < n_expert; e += blockDim.x) {
    p[e] = expf(l[e] - mx);
    sum += p[e];
  }
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (lane == 0) sums[warp] = sum;
  __syncthreads();
  sum = 0;
  for (int w = 0; w < n_warps; ++w) sum += sums[w];
  const auto inv = static_cast<float>(1.0 / sum);
  for (int e = tid; e < n_expert; e += blockDim.x) p[e] *= inv;
  __syncthreads();
  for (int s = 0; s < n_used; ++s) {
    float bp = -1.0f;
    int be = n_expert;
    for (int e = tid; e < n_expert; e += blockDim.x) {
      const float v =
          p[e] == p[e] ? p[e] : -0.5f;  // NaN (a NaN hidden state): below every number, above taken
      if (v > bp || (v == bp && e < be)) {
        bp = v;
        be = e;
      }
    }
    for (int o = 16; o > 0; o >>= 1) {
      const float op = __shfl_xor_sync(0xffffffffu, bp, o);
      const int oe = __shfl_xor_sync(0xffffffffu, be, o);
      if (op > bp || (op == bp && oe < be)) {
        bp = op;
        be = oe;
      }
    }
    if (lane == 0) {
      best_p[warp] = bp;
      best_e[warp] = be;
    }
    __syncthreads();
    if (tid == 0) {
      for (int w = 1; w < n_warps; ++w)
        if (best_p[w] > best_p[0] || (best_p[w] == best_p[0] && best_e[w] < best_e[0])) {
          best_p[0] = best_p[w];
          best_e[0] = best_e[w];
        }
      picked_p[s] = best_p[0];
      picked_e[s] = best_e[0];
      p[best_e[0]] = -2.0f;  // taken
    }
    __syncthreads();
  }
  if (tid == 0) {
    float wsum = 0.0f;
    for (int s = 0; s < n_used; ++s) wsum += picked_p[s];
    wsum = fmaxf(wsum, 6.103515625e-5f);
    for (int s = 0; s < n_used; ++s) {
      float w = picked_p[s] / wsum;
      if (scale != 0.0f && scale != 1.0f) w *= scale;
      slot_expert[t * n_used + s] = picked_e[s];
      slot_weight[t * n_used + s] = w;
    }
  }
}

// One block: each expert's slots, counted then placed (the order within an expert is free:
// every slot's output is its own), and the experts chosen at all, in id order. Expert ids
// outside 0..n_expert-1 are clamped into it (moe_route makes none).
__global__ void sort_kernel(const int32_t* __restrict__ slot_expert, int n_slots, int n_expert,
                            int32_t* __restrict__ first, int32_t* __restrict__ slots,
                            int32_t* __restrict__ active) {
  __shared__ int at[kMaxMoeExperts];
  auto expert = [&](int i) { return min(max(slot_expert[i], 0), n_expert - 1); };
  for (int e = threadIdx.x; e < n_expert; e += blockDim.x) at[e] = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < n_slots; i += blockDim.x) atomicAdd(&at[expert(i)], 1);
  __syncthreads();
  if (threadIdx.x == 0) {
    int run = 0, n_active = 0;
    for (int e = 0; e < n_expert; ++e) {
      const int n = at[e];
      first[e] = run;
      at[e] = run;
      run += n;
      if (n > 0) active[1 + n_active++] = e;
    }
    first[n_expert] = run;
    active[0] = n_active;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < n_slots; i += blockDim.x) slots[atomicAdd(&at[expert(i)], 1)] = i;
}

// Block (row group, i): the i-th expert chosen in the step (none: the block leaves). Each warp
// takes one row of the expert's matrix (or two, w and w2) through every slot that chose the
// expert, so an expert's rows come from memory once a step.
__global__ void __launch_bounds__(kRowsPerBlock * 32) experts_kernel(MoeExpertArgs a) {
  if (static_cast<int>(blockIdx.y) >= a.active[0]) return;
  const int e = a.active[1 + blockIdx.y], lane = threadIdx.x & 31;
  const int r = blockIdx.x * kRowsPerBlock + (threadIdx.x >> 5);
  if (r >= a.rows) return;  // the whole warp; no barrier below
  const int64_t at = (static_cast<int64_t>(e) * a.rows + r) * a.cols;
  const auto* w = reinterpret_cast<const __nv_bfloat16*>(a.w) + at;
  const auto* w2 = a.w2 ? reinterpret_cast<const __nv_bfloat16*>(a.w2) + at : nullptr;
  for (int j = a.first[e]; j < a.first[e + 1]; ++j) {
    const int slot = a.slots[j];
    const float* x = a.x + static_cast<int64_t>(a.x_per_slot ? slot : slot / a.n_used) * a.cols;
    float acc = 0.0f, acc2 = 0.0f;
    for (int i = lane; i < a.cols; i += 32) {
      acc = fmaf(load_f(w + i), x[i], acc);
      if (w2) acc2 = fmaf(load_f(w2 + i), x[i], acc2);
    }
    acc = warp_sum(acc);
    if (w2) acc2 = warp_sum(acc2);
    if (lane == 0) {
      float y = w2 ? acc / (1.0f + expf(-acc)) * acc2 : acc;  // silu(gate) * up, as swiglu
      if (a.slot_weight) y *= a.slot_weight[slot];
      a.out[static_cast<int64_t>(slot) * a.rows + r] = y;
    }
  }
}

__global__ void combine_kernel(const float* __restrict__ slot_out, int n_used,
                               const float* __restrict__ shared, const float* __restrict__ shared_logit,
                               int64_t total, int E, float* __restrict__ x) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / E, c = i % E;
    const float* o = slot_out + t * n_used * E + c;
    float acc = o[0];
    for (int s = 1; s < n_used; ++s) acc += o[static_cast<int64_t>(s) * E];
    if (shared) {
      const float g = 1.0f / (1.0f + expf(-shared_logit[t]));
      acc += shared[i] * g;
    }
    x[i] += acc;
  }
}

}  // namespace

Status rows_dot_f32(const float* W, int rows, int cols, const float* x, int n, float* out, Stream s) {
  if (rows < 1 || cols < 1 || n < 0)
    return shape_error("rows_dot_f32", std::to_string(rows) + " rows of " + std::to_string(cols) + ", " +
                                           std::to_string(n) + " inputs");
  if (n == 0) return {};
  if (!W || !x || !out) return shape_error("rows_dot_f32", "a null pointer");
  const int64_t threads = static_cast<int64_t>(rows) * n * 32;
  if ((threads + 255) / 256 > 0x7fffffff) return shape_error("rows_dot_f32", "too many rows");
  rows_dot_kernel<<<static_cast<unsigned>((threads + 255) / 256), 256, 0, stream_of(s)>>>(W, rows, cols, x, n,
                                                                                          out);
  return launch_status("rows_dot_f32");
}

Status moe_route(const float* logits, int n, int n_expert, int n_used, float scale, int32_t* slot_expert,
                 float* slot_weight, Stream s) {
  if (n < 0 || n_expert < 1 || n_expert > kMaxMoeExperts || n_used < 1 || n_used > kMaxMoeUsed ||
      n_used > n_expert)
    return shape_error("moe_route", std::to_string(n_used) + " of " + std::to_string(n_expert) +
                                        " experts (1.." + std::to_string(kMaxMoeUsed) + " of at most " +
                                        std::to_string(kMaxMoeExperts) + ")");
  if (n == 0) return {};
  if (!logits || !slot_expert || !slot_weight) return shape_error("moe_route", "a null pointer");
  route_kernel<<<n, kRouteThreads, 0, stream_of(s)>>>(logits, n_expert, n_used, scale, slot_expert,
                                                      slot_weight);
  return launch_status("moe_route");
}

Status moe_sort(const int32_t* slot_expert, int n_slots, int n_expert, int32_t* first, int32_t* slots,
                int32_t* active, Stream s) {
  if (n_slots < 0 || n_expert < 1 || n_expert > kMaxMoeExperts)
    return shape_error("moe_sort",
                       std::to_string(n_slots) + " slots over " + std::to_string(n_expert) + " experts");
  if (!slot_expert || !first || !slots || !active) return shape_error("moe_sort", "a null pointer");
  sort_kernel<<<1, kSortThreads, 0, stream_of(s)>>>(slot_expert, n_slots, n_expert, first, slots, active);
  return launch_status("moe_sort");
}

Status moe_experts(const MoeExpertArgs& a, Stream s) {
  if (a.n_expert < 1 || a.n_expert > kMaxMoeExperts || a.n_used < 1 || a.n_slots < 0 || a.rows < 1 ||
      a.cols < 1)
    return shape_error("moe_experts", std::to_string(a.n_expert) + " experts of " + std::to_string(a.rows) +
                                          " x " + std::to_string(a.cols) + ", " + std::to_string(a.n_used) +
                                          " used");
  if (a.n_slots == 0) return {};
  if (!a.w || !a.x || !a.first || !a.slots || !a.active || !a.out)
    return shape_error("moe_experts", "a null pointer");
  // At most n_slots experts are chosen in a step: a block row for each, whatever the routing.
  const dim3 grid((a.rows + kRowsPerBlock - 1) / kRowsPerBlock, std::min(a.n_expert, a.n_slots));
  experts_kernel<<<grid, kRowsPerBlock * 32, 0, stream_of(s)>>>(a);
  return launch_status("moe_experts");
}

Status moe_combine(const float* slot_out, int n, int n_used, int E, const float* shared,
                   const float* shared_logit, float* x, Stream s) {
  if (n < 0 || n_used < 1 || E < 1)
    return shape_error("moe_combine", std::to_string(n) + " tokens of " + std::to_string(E) + ", " +
                                          std::to_string(n_used) + " slots each");
  if (n == 0) return {};
  if (!slot_out || !x || (shared && !shared_logit)) return shape_error("moe_combine", "a null pointer");
  const int64_t total = static_cast<int64_t>(n) * E;
  combine_kernel<<<grid_stride_blocks(total), 256, 0, stream_of(s)>>>(slot_out, n_used, shared, shared_logit,
                                                                      total, E, x);
  return launch_status("moe_combine");
}

}  // namespace chorus::cuda
