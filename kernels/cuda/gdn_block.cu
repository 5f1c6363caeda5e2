// The bookkeeping ops of a block's Gated DeltaNet state on the device (engine/forward/cuda/cuda_linear.h):
// the convolution's input window moved on by a block's tokens, a summary set to the identity
// map, a convolution output cut into q, k and v; and the per-sequence ones of a step in one
// launch each, their slots named by number (slot s, part at offset o: base + s * slot_floats + o).
#include "kernels/cuda/common.cuh"

namespace chorus::cuda {
namespace {

// One thread per channel, in place (n >= 1).
// Channel c of tail [keep][C] moved on by the n rows of x, in place: row i takes row n + i of
// (tail ++ x), so with n >= 1 it reads only rows not yet written (n = 0: nothing moves).
__device__ __forceinline__ void shift_column(float* tail, int keep, const float* x, int n, int C, int c) {
  for (int i = 0; i < keep && n > 0; ++i) {
    const int z = n + i;
    tail[static_cast<int64_t>(i) * C + c] =
        z < keep ? tail[static_cast<int64_t>(z) * C + c] : x[static_cast<int64_t>(z - keep) * C + c];
  }
}

__global__ void shift_rows_kernel(float* __restrict__ tail, int keep, const float* __restrict__ x, int n,
                                  int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c < C) shift_column(tail, keep, x, n, C, c);
}

__global__ void summary_reset_kernel(float* m, int64_t total, int dk, int dv) {
  const int64_t per_head = static_cast<int64_t>(dk + dv) * dk;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t in_head = i % per_head;
    const int64_t r = in_head / dk, c = in_head % dk;
    m[i] = r < dk && r == c ? 1.0f : 0.0f;
  }
}

__global__ void split_qkv_kernel(const float* __restrict__ y, int64_t total, int kd, int vd,
                                 float* __restrict__ q, float* __restrict__ k, float* __restrict__ v) {
  const int C = 2 * kd + vd;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / C;
    const int c = static_cast<int>(i % C);
    if (c < kd) {
      if (q) q[t * kd + c] = y[i];
    } else if (c < 2 * kd) {
      k[t * kd + c - kd] = y[i];
    } else {
      v[t * vd + c - 2 * kd] = y[i];
    }
  }
}

__device__ __forceinline__ float* slot_part(float* base, int64_t slot_floats, int32_t slot, int64_t offset) {
  return base + static_cast<int64_t>(slot) * slot_floats + offset;
}

__global__ void conv_slots_kernel(const float* __restrict__ x, int n, const int32_t* __restrict__ row_seq,
                                  const int32_t* __restrict__ first, const int32_t* __restrict__ slot,
                                  const float* base, int64_t slot_floats, int64_t tail_offset,
                                  const float* __restrict__ w, int C, int K, float* __restrict__ y) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<int64_t>(n) * C) return;
  const int t = static_cast<int>(idx / C), c = static_cast<int>(idx % C);
  const int r = row_seq[t], j = t - first[r];
  const float* prev = base + static_cast<int64_t>(slot[r]) * slot_floats + tail_offset;
  const float* xs = x + static_cast<int64_t>(first[r]) * C;
  float acc = 0.0f;
  for (int i = 0; i < K; ++i) {  // as gdn_conv: tap i reads (prev ++ x) at j + i
    const int z = j + i;
    const float in =
        z < K - 1 ? prev[static_cast<int64_t>(z) * C + c] : xs[static_cast<int64_t>(z - (K - 1)) * C + c];
    acc = fmaf(w[static_cast<int64_t>(i) * C + c], in, acc);
  }
  y[idx] = acc / (1.0f + expf(-acc));
}

// One thread per (sequence, channel).
__global__ void shift_slots_kernel(float* base, int64_t slot_floats, int64_t offset,
                                   const int32_t* __restrict__ slot, const int32_t* __restrict__ first,
                                   int n_seqs, int keep, const float* __restrict__ x, int C) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<int64_t>(n_seqs) * C) return;
  const int r = static_cast<int>(idx / C), c = static_cast<int>(idx % C);
  shift_column(slot_part(base, slot_floats, slot[r], offset), keep, x + static_cast<int64_t>(first[r]) * C,
               first[r + 1] - first[r], C, c);
}

__global__ void rows_to_slots_kernel(const float* __restrict__ src, int width,
                                     const SlotRow* __restrict__ rows, int n, float* base,
                                     int64_t slot_floats, int64_t offset) {
  const int64_t total = static_cast<int64_t>(n) * width;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const SlotRow r = rows[i / width];
    const int64_t col = i % width;
    slot_part(base, slot_floats, r.slot, offset)[static_cast<int64_t>(r.dst_row) * width + col] =
        src[static_cast<int64_t>(r.src_row) * width + col];
  }
}

}  // namespace

Status gdn_conv_slots(const float* x, int n, const int32_t* row_seq, const int32_t* first,
                      const int32_t* slot, const float* base, int64_t slot_floats, int64_t tail_offset,
                      const float* w, int C, int K, float* y, Stream s) {
  if (n < 0 || C < 1 || K < 2 || K > kMaxGdnKeep + 1)
    return shape_error("gdn_conv_slots", std::to_string(n) + " tokens, " + std::to_string(C) +
                                             " channels, width " + std::to_string(K) + " (width 2.." +
                                             std::to_string(kMaxGdnKeep + 1) + ")");
  if (n == 0) return {};
  if (!x || !row_seq || !first || !slot || !base || !w || !y)
    return shape_error("gdn_conv_slots", "a null pointer");
  const int64_t blocks = (static_cast<int64_t>(n) * C + 255) / 256;
  if (blocks > 0x7fffffff) return shape_error("gdn_conv_slots", "too many elements");
  conv_slots_kernel<<<static_cast<unsigned>(blocks), 256, 0, stream_of(s)>>>(
      x, n, row_seq, first, slot, base, slot_floats, tail_offset, w, C, K, y);
  return launch_status("gdn_conv_slots");
}

Status shift_rows_slots(float* base, int64_t slot_floats, int64_t offset, const int32_t* slot,
                        const int32_t* first, int n_seqs, int keep, const float* x, int C, Stream s) {
  if (n_seqs < 0 || keep < 0 || keep > kMaxGdnKeep || C < 1)
    return shape_error("shift_rows_slots", std::to_string(n_seqs) + " sequences, keep " +
                                               std::to_string(keep) + " (0.." + std::to_string(kMaxGdnKeep) +
                                               "), " + std::to_string(C) + " channels");
  if (n_seqs == 0 || keep == 0) return {};
  if (!base || !slot || !first || !x) return shape_error("shift_rows_slots", "a null pointer");
  const int64_t blocks = (static_cast<int64_t>(n_seqs) * C + 255) / 256;
  if (blocks > 0x7fffffff) return shape_error("shift_rows_slots", "too many elements");
  shift_slots_kernel<<<static_cast<unsigned>(blocks), 256, 0, stream_of(s)>>>(base, slot_floats, offset, slot,
                                                                              first, n_seqs, keep, x, C);
  return launch_status("shift_rows_slots");
}

Status rows_to_slots(const float* src, int width, const SlotRow* rows, int n, float* base,
                     int64_t slot_floats, int64_t offset, Stream s) {
  if (n < 0 || width < 1)
    return shape_error("rows_to_slots", std::to_string(n) + " rows of " + std::to_string(width));
  if (n == 0) return {};
  if (!src || !rows || !base) return shape_error("rows_to_slots", "a null pointer");
  rows_to_slots_kernel<<<grid_stride_blocks(static_cast<int64_t>(n) * width), 256, 0, stream_of(s)>>>(
      src, width, rows, n, base, slot_floats, offset);
  return launch_status("rows_to_slots");
}

Status shift_rows(float* tail, int keep, const float* x, int n, int C, Stream s) {
  if (keep < 0 || keep > kMaxGdnKeep || n < 0 || C < 1)
    return shape_error("shift_rows", "keep " + std::to_string(keep) + " (0.." + std::to_string(kMaxGdnKeep) +
                                         "), " + std::to_string(n) + " rows of " + std::to_string(C));
  if (keep == 0 || n == 0) return {};
  if (!tail || !x) return shape_error("shift_rows", "a null pointer");
  shift_rows_kernel<<<(C + 255) / 256, 256, 0, stream_of(s)>>>(tail, keep, x, n, C);
  return launch_status("shift_rows");
}

Status gdn_summary_reset(float* m, int n_heads, int dk, int dv, Stream s) {
  if (n_heads < 1 || dk < 1 || dv < 1)
    return shape_error("gdn_summary_reset", std::to_string(n_heads) + " heads of " + std::to_string(dk) +
                                                " x " + std::to_string(dv));
  if (!m) return shape_error("gdn_summary_reset", "a null pointer");
  const int64_t total = static_cast<int64_t>(n_heads) * (dk + dv) * dk;
  summary_reset_kernel<<<grid_stride_blocks(total), 256, 0, stream_of(s)>>>(m, total, dk, dv);
  return launch_status("gdn_summary_reset");
}

Status split_qkv(const float* y, int n, int kd, int vd, float* q, float* k, float* v, Stream s) {
  if (n < 0 || kd < 1 || vd < 1)
    return shape_error("split_qkv", std::to_string(n) + " rows, key width " + std::to_string(kd) +
                                        ", value width " + std::to_string(vd));
  if (n == 0) return {};
  if (!y || !k || !v) return shape_error("split_qkv", "a null pointer");
  const int64_t total = static_cast<int64_t>(n) * (2 * kd + vd);
  split_qkv_kernel<<<grid_stride_blocks(total), 256, 0, stream_of(s)>>>(y, total, kd, vd, q, k, v);
  return launch_status("split_qkv");
}

}  // namespace chorus::cuda
