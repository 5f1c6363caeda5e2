// Chain reads of Gated DeltaNet views (ops.h gdn_chain_inputs, gdn_chain_read): a writer's one
// token reads its view's state through its query, carried backwards through the view's blocks,
// instead of composing the state (O(dk^2) per summarised block and head, not O(dk^3)).
#include "kernels/cuda/common.cuh"

namespace chorus::cuda {
namespace {

constexpr int kThreads = 128;  // gdn_chain_read: 4 warps; thread i holds y[i] and c[i]
constexpr int kWidth = 128;    // the largest head size
constexpr int kChunk = 32;     // tokens staged in shared memory at a time

__device__ __forceinline__ float* part_of(const GdnChainArgs& a, int32_t slot, int64_t part) {
  return a.slots + static_cast<int64_t>(slot) * a.slot_floats + a.layer_offset + part;
}

// Channel c of the raw input at position p of block i of read r (gdn_chain_source).
__device__ __forceinline__ float chain_input(const GdnChainArgs& a, const GdnChainRead& r, int i, int p,
                                             int c) {
  const GdnChainBlock* blocks = a.blocks + r.first_block;
  const GdnChainSource s = gdn_chain_source(blocks, i, p, a.keep, r.has_base != 0);
  int64_t at = 0;
  switch (s.from) {
    case GdnChainSource::head: at = a.parts.head_x; break;
    case GdnChainSource::tail: at = a.parts.tail; break;
    case GdnChainSource::base: at = a.parts.base_tail; break;
    default: return 0.0f;
  }
  const int32_t slot = s.from == GdnChainSource::base ? r.slot : blocks[s.block].slot;
  return part_of(a, slot, at)[static_cast<int64_t>(s.row) * a.C + c];
}

// blockIdx.y: a head row (< n_heads), or a read's run-tail row; one thread per channel.
__global__ void chain_inputs_kernel(GdnChainArgs a) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= a.C) return;
  const int row = blockIdx.y;
  if (row < a.n_heads) {
    const GdnChainHead h = a.heads[row];
    const GdnChainRead r = a.reads[h.read];
    const int i = h.block - r.first_block;
    float acc = 0.0f;
    for (int t = 0; t <= a.keep; ++t)  // as gdn_conv: tap t reads the input keep - t positions back
      acc = fmaf(a.conv_w[static_cast<int64_t>(t) * a.C + c], chain_input(a, r, i, h.j - a.keep + t, c), acc);
    a.head_y[static_cast<int64_t>(row) * a.C + c] = acc / (1.0f + expf(-acc));
  } else {
    const int at = row - a.n_heads, j = at % a.keep;
    const GdnChainRead r = a.reads[at / a.keep];
    part_of(a, r.slot, a.parts.run_tail)[static_cast<int64_t>(j) * a.C + c] =
        chain_input(a, r, r.n_blocks, j - a.keep, c);
  }
}

// The per-block state of one read and value head: thread i < dk holds y[i] and c[i].
struct Carry {
  float y, c;
  int parity;
};

struct Shared {
  float k[kChunk][kWidth], v[kChunk][kWidth], decay[kChunk], beta[kChunk];
  float y[kWidth], mv[2 * kWidth], partial[2][kThreads / 32];
};

// Tokens [0, n) of a run (k, v rows at the given strides from already-offset pointers; g as log
// decay, beta), last first: the query through each token's map.
__device__ void tokens_back(const float* k, int64_t k_stride, const float* v, int64_t v_stride,
                            const float* g, const float* beta, int64_t gb_stride, int n, int dk, Carry& s,
                            Shared& sh) {
  const int i = threadIdx.x, lane = i & 31, warp = i >> 5;
  for (int end = n; end > 0; end -= kChunk) {
    const int beg = max(0, end - kChunk), m = end - beg;
    __syncthreads();  // the previous chunk is no longer read
    for (int idx = i; idx < m * dk; idx += kThreads) {
      const int j = idx / dk, d = idx % dk;
      sh.k[j][d] = k[(beg + j) * k_stride + d];
      sh.v[j][d] = v[(beg + j) * v_stride + d];
    }
    if (i < m) {
      sh.decay[i] = expf(g[(beg + i) * gb_stride]);
      sh.beta[i] = beta[(beg + i) * gb_stride];
    }
    __syncthreads();
    for (int j = m - 1; j >= 0; --j) {
      const float kj = i < dk ? sh.k[j][i] : 0.0f;
      const float part = warp_sum(kj * s.y);
      if (lane == 0) sh.partial[s.parity][warp] = part;
      __syncthreads();  // (the other parity's partials were read before the previous barrier)
      float ky = 0.0f;
#pragma unroll
      for (int w = 0; w < kThreads / 32; ++w) ky += sh.partial[s.parity][w];
      s.parity ^= 1;
      if (i < dk) {
        const float bk = sh.beta[j] * ky;
        s.c = fmaf(bk, sh.v[j][i], s.c);
        s.y = sh.decay[j] * (s.y - bk * kj);
      }
    }
  }
}

// c += B y and, with A, y <- A y: rows of [dk][dk] matrices, a warp per row (lanes over columns).
__device__ void affine_back(const float* A, const float* B, int dk, Carry& s, Shared& sh) {
  const int i = threadIdx.x, lane = i & 31, warp = i >> 5;
  sh.y[i] = s.y;
  __syncthreads();
  const int rows = A ? 2 * dk : dk;
  for (int row = warp; row < rows; row += kThreads / 32) {
    const float* R =
        row < dk && A ? A + static_cast<int64_t>(row) * dk : B + static_cast<int64_t>(row % dk) * dk;
    float acc = 0.0f;
    for (int d = lane; d < dk; d += 32) acc = fmaf(R[d], sh.y[d], acc);
    acc = warp_sum(acc);
    if (lane == 0) sh.mv[row] = acc;
  }
  __syncthreads();
  if (i < dk) {
    if (A) {
      s.y = sh.mv[i];
      s.c += sh.mv[dk + i];
    } else {
      s.c += sh.mv[i];
    }
  }
}

// One block per (value head, read).
__global__ void __launch_bounds__(kThreads) chain_read_kernel(GdnChainArgs a) {
  __shared__ Shared sh;
  const int h = blockIdx.x, i = threadIdx.x, dk = a.dk;
  const GdnChainRead r = a.reads[blockIdx.y];
  const int kh = a.kh_mod ? h % a.n_k_heads : h / (a.n_v_heads / a.n_k_heads);
  const int64_t kd = static_cast<int64_t>(a.n_k_heads) * dk, vd = static_cast<int64_t>(a.n_v_heads) * dk;
  const int64_t Hv = a.n_v_heads, row = r.row;
  Carry s{i < dk ? a.q[row * kd + kh * dk + i] : 0.0f, 0.0f, 0};
  tokens_back(a.k + row * kd + kh * dk, kd, a.v + row * vd + h * dk, vd, a.g + row * Hv + h,
              a.beta + row * Hv + h, Hv, 1, dk, s, sh);
  const int64_t per_head = static_cast<int64_t>(dk) * dk;
  for (int b = r.n_blocks - 1; b >= 0; --b) {
    const GdnChainBlock blk = a.blocks[r.first_block + b];
    const int n_head = min(blk.n, a.keep), n_buffered = blk.n - n_head - blk.dense;
    const float* B0 = part_of(a, blk.slot, 0);
    tokens_back(B0 + a.parts.ck + kh * dk, kd, B0 + a.parts.cv + h * dk, vd, B0 + a.parts.cg + h,
                B0 + a.parts.cb + h, Hv, n_buffered, dk, s, sh);
    if (blk.dense > 0) {
      const float* AB = B0 + a.parts.AB + h * 2 * per_head;
      affine_back(AB, AB + per_head, dk, s, sh);
    }
    const int64_t hr = blk.head_row;
    tokens_back(a.head_k + hr * kd + kh * dk, kd, a.head_v + hr * vd + h * dk, vd, B0 + a.parts.head_g + h,
                B0 + a.parts.head_b + h, Hv, n_head, dk, s, sh);
  }
  if (r.has_base) affine_back(nullptr, part_of(a, r.slot, a.parts.S) + h * per_head, dk, s, sh);
  if (i < dk) a.out[row * vd + h * dk + i] = s.c;
}

Status check(const char* op, const GdnChainArgs& a) {
  auto bad = [op](const std::string& what) { return shape_error(op, what); };
  if (a.dk != 16 && (a.dk < 32 || a.dk > kWidth || a.dk % 32 != 0))
    return bad("dk " + std::to_string(a.dk) + " (16, or a multiple of 32 up to 128)");
  if (a.keep < 1 || a.keep > kMaxGdnKeep)
    return bad("keep " + std::to_string(a.keep) + " (1.." + std::to_string(kMaxGdnKeep) + ")");
  if (a.n_k_heads < 1 || a.n_v_heads < a.n_k_heads || a.n_v_heads % a.n_k_heads != 0)
    return bad(std::to_string(a.n_v_heads) + " value heads over " + std::to_string(a.n_k_heads) +
               " key heads");
  if (a.C != (2 * a.n_k_heads + a.n_v_heads) * a.dk)  // value heads as wide as key heads (dv = dk)
    return bad(std::to_string(a.C) + " channels for " + std::to_string(a.n_k_heads) + " key and " +
               std::to_string(a.n_v_heads) + " value heads of " + std::to_string(a.dk) + " (2 kd + vd)");
  if (a.n_reads < 0 || a.n_heads < 0 || a.n_heads + static_cast<int64_t>(a.n_reads) * a.keep > kMaxChainRows)
    return bad(std::to_string(a.n_reads) + " reads and " + std::to_string(a.n_heads) +
               " head rows (at most " + std::to_string(kMaxChainRows) + " rows)");
  return {};
}

}  // namespace

Status gdn_chain_inputs(const GdnChainArgs& a, Stream s) {
  if (Status e = check("gdn_chain_inputs", a); !e.ok()) return e;
  if (a.n_reads == 0) return {};
  if (!a.reads || !a.blocks || (a.n_heads > 0 && (!a.heads || !a.head_y)) || !a.slots || !a.conv_w)
    return shape_error("gdn_chain_inputs", "a null pointer");
  const dim3 grid((a.C + 255) / 256, a.n_heads + a.n_reads * a.keep);
  chain_inputs_kernel<<<grid, 256, 0, stream_of(s)>>>(a);
  return launch_status("gdn_chain_inputs");
}

Status gdn_chain_read(const GdnChainArgs& a, Stream s) {
  if (Status e = check("gdn_chain_read", a); !e.ok()) return e;
  if (a.n_reads == 0) return {};
  if (!a.reads || !a.blocks || (a.n_heads > 0 && (!a.head_k || !a.head_v)) || !a.slots || !a.q || !a.k ||
      !a.v || !a.g || !a.beta || !a.out)
    return shape_error("gdn_chain_read", "a null pointer");
  chain_read_kernel<<<dim3(a.n_v_heads, a.n_reads), kThreads, 0, stream_of(s)>>>(a);
  return launch_status("gdn_chain_read");
}

}  // namespace chorus::cuda
