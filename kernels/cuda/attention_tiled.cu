// Paged view attention for prefill-in-context (kernels/cuda/ops.h has the contract): a tile of up
// to 32 consecutive query tokens of one sequence, which attend the same pages, is handled by one
// block per query head. Per segment the tile's queries are rotated (each by its own q_pos) into
// shared memory; the segment's keys and values stream through shared memory 32 positions at a
// time and every one is used by all the tile's queries (the per-token kernel reads them once per
// token). 4 warps own 8 query rows each; lane j scores key j of a tile, the row's softmax state
// lives in registers, and a lane accumulates head_dim/32 output dimensions of its warp's rows.
// Each token masks the positions past its own n_kv (causal on the write block).
#include <cfloat>

#include "kernels/cuda/common.cuh"

namespace chorus::cuda {
namespace {

constexpr int kRows = 8;  // query rows per warp
constexpr int kWarps = 4;
constexpr int kTile = kRows * kWarps;  // 32 query tokens per block
constexpr int kKeys = 32;              // positions per shared-memory tile
constexpr int kPage = 16;

size_t tiled_shared_bytes(int hd) {
  // Q [32][hd], K [32][hd + 1] (padded: lane j reads row j), V [32][hd], row n_kv / q_pos [32] x 2.
  return sizeof(float) *
             (static_cast<size_t>(kTile) * hd + kKeys * (hd + 1) + kKeys * static_cast<size_t>(hd)) +
         sizeof(int) * 2 * kTile;
}

template <class T, int D>  // D = head_dim / 32
__global__ void __launch_bounds__(kWarps * 32, 1)
    attention_tiled_kernel(AttnArgs a, const AttnTile* __restrict__ tiles) {
  extern __shared__ float smem[];
  constexpr int hd = D * 32;
  float* qs = smem;                                       // [kTile][hd]
  float* ks = qs + kTile * hd;                            // [kKeys][hd + 1]
  float* vs = ks + kKeys * (hd + 1);                      // [kKeys][hd]
  int* row_kv = reinterpret_cast<int*>(vs + kKeys * hd);  // [kTile] this segment's n_kv per row
  int* row_pos = row_kv + kTile;                          // [kTile] its q_pos per row

  const int head = blockIdx.x, tile_index = blockIdx.y;
  const int nq = a.n_heads / a.n_kv_heads, kvh = head / nq;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const AttnTile tile = tiles[tile_index];
  const AttnToken first = a.tokens[tile.first_token];
  const T* k_pool = static_cast<const T*>(a.k_pool);
  const T* v_pool = static_cast<const T*>(a.v_pool);
  const int half = a.n_rot / 2;
  const int row0 = warp * kRows;
  const bool warp_active = row0 < tile.n_tokens;

  float m[kRows], l[kRows], acc[kRows][D];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    m[r] = -FLT_MAX;
    l[r] = 0.0f;
#pragma unroll
    for (int d = 0; d < D; ++d) acc[r][d] = 0.0f;
  }

  for (int si = 0; si < first.n_segs; ++si) {
    __syncthreads();  // the previous segment's queries and keys are no longer read
    if (threadIdx.x < kTile) {
      const int r = threadIdx.x;
      if (r < tile.n_tokens) {
        const AttnSegment sg = a.segs[a.tokens[tile.first_token + r].first_seg + si];
        row_kv[r] = sg.n_kv;
        row_pos[r] = sg.q_pos;
      } else {
        row_kv[r] = 0;
        row_pos[r] = 0;
      }
    }
    __syncthreads();
    // Rotate every row's query by its own q_pos (as rope_cache + rope on the CPU).
    for (int idx = threadIdx.x; idx < kTile * hd; idx += blockDim.x) {
      const int r = idx / hd, i = idx % hd;
      const float* q_raw =
          a.q + (static_cast<int64_t>(tile.first_token + min(r, tile.n_tokens - 1)) * a.n_heads + head) * hd;
      if (i >= a.n_rot) {
        qs[r * hd + i] = q_raw[i];
        continue;
      }
      // Pair (ia, ib) is rotated by the thread that holds its first element.
      const int pair = a.neox ? (i < half ? i : -1) : (i % 2 == 0 ? i / 2 : -1);
      if (pair < 0) continue;
      float theta = static_cast<float>(row_pos[r]);
      for (int j = 0; j < pair; ++j) theta *= a.theta_scale;
      const float angle = a.freq_scale * theta;
      const float c = cosf(angle), s = sinf(angle);
      const int ia = a.neox ? pair : 2 * pair, ib = a.neox ? pair + half : 2 * pair + 1;
      const float x0 = q_raw[ia], x1 = q_raw[ib];
      qs[r * hd + ia] = fmaf(x0, c, -(x1 * s));
      qs[r * hd + ib] = fmaf(x0, s, x1 * c);
    }
    int n_kv = 0;
    for (int r = 0; r < tile.n_tokens; ++r) n_kv = max(n_kv, row_kv[r]);
    const AttnSegment seg0 = a.segs[first.first_seg + si];  // the tile's pages

    for (int k0 = 0; k0 < n_kv; k0 += kKeys) {
      __syncthreads();  // queries written; the previous keys no longer read
      for (int idx = threadIdx.x; idx < kKeys * hd; idx += blockDim.x) {
        const int j = idx / hd, d = idx % hd, pos = k0 + j;
        float kv = 0.0f, vv = 0.0f;
        if (pos < n_kv) {
          const int64_t page = a.page_ids[seg0.first_page + pos / kPage];
          const int64_t at = page * a.page_stride + static_cast<int64_t>(pos % kPage) * a.kv_stride +
                             static_cast<int64_t>(kvh) * hd + d;
          kv = load_f(k_pool + at);
          vv = load_f(v_pool + at);
        }
        ks[j * (hd + 1) + d] = kv;
        vs[j * hd + d] = vv;
      }
      __syncthreads();
      if (!warp_active) continue;
      const int pos = k0 + lane;  // this lane's key
      float p[kRows];
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const int row = row0 + r;
        float dot = 0.0f;
#pragma unroll 8
        for (int d = 0; d < hd; ++d) dot = fmaf(qs[row * hd + d], ks[lane * (hd + 1) + d], dot);
        const bool valid = row < tile.n_tokens && pos < row_kv[row];
        const float score = valid ? dot * a.scale : -FLT_MAX;
        const float m_new = fmaxf(m[r], warp_max(score));
        const float corr = expf(m[r] - m_new);
        p[r] = valid ? expf(score - m_new) : 0.0f;
        l[r] = l[r] * corr + warp_sum(p[r]);
#pragma unroll
        for (int d = 0; d < D; ++d) acc[r][d] *= corr;
        m[r] = m_new;
      }
      for (int j = 0; j < kKeys; ++j) {
        float v[D];
#pragma unroll
        for (int d = 0; d < D; ++d) v[d] = vs[j * hd + lane + 32 * d];
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          const float pj = __shfl_sync(0xffffffffu, p[r], j);
#pragma unroll
          for (int d = 0; d < D; ++d) acc[r][d] = fmaf(pj, v[d], acc[r][d]);
        }
      }
    }
  }

  if (!warp_active) return;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int row = row0 + r;
    if (row >= tile.n_tokens) break;
    float* out = a.out + (static_cast<int64_t>(tile.first_token + row) * a.n_heads + head) * hd;
#pragma unroll
    for (int d = 0; d < D; ++d) out[lane + 32 * d] = l[r] > 0.0f ? acc[r][d] / l[r] : 0.0f;
  }
}

template <class T, int D>
Status launch_one(const AttnArgs& a, const AttnTile* tiles, int n_tiles, cudaStream_t st) {
  const size_t shared = tiled_shared_bytes(D * 32);
  // Per launch (the attribute is per device; prefill steps only, never under graph capture).
  const cudaError_t attr = cudaFuncSetAttribute(
      attention_tiled_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared));
  if (attr != cudaSuccess)
    return make_error(Errc::internal,
                      std::string("cuda attention_tiled: cudaFuncSetAttribute: ") + cudaGetErrorString(attr));
  const dim3 grid(a.n_heads, n_tiles);
  attention_tiled_kernel<T, D><<<grid, kWarps * 32, shared, st>>>(a, tiles);
  return launch_status("attention_tiled");
}

template <class T>
Status launch(const AttnArgs& a, const AttnTile* tiles, int n_tiles, cudaStream_t st) {
  switch (a.head_dim / 32) {
    case 1: return launch_one<T, 1>(a, tiles, n_tiles, st);
    case 2: return launch_one<T, 2>(a, tiles, n_tiles, st);
    case 3: return launch_one<T, 3>(a, tiles, n_tiles, st);
    case 4: return launch_one<T, 4>(a, tiles, n_tiles, st);
    case 5: return launch_one<T, 5>(a, tiles, n_tiles, st);
    case 6: return launch_one<T, 6>(a, tiles, n_tiles, st);
    case 7: return launch_one<T, 7>(a, tiles, n_tiles, st);
    default: return launch_one<T, 8>(a, tiles, n_tiles, st);
  }
}

}  // namespace

Status attention_tiled(const AttnArgs& a, const AttnTile* tiles, int n_tiles, Stream s) {
  if (Status err = check_attention_args("attention_tiled", a); !err.ok()) return err;
  if (n_tiles < 0 || n_tiles > 65535)
    return shape_error("attention_tiled", "n_tiles " + std::to_string(n_tiles) + " (0..65535)");
  if (n_tiles > 0 && !tiles) return shape_error("attention_tiled", "a null pointer");
  if (n_tiles == 0 || a.n_tokens == 0) return {};
  return a.kv_bf16 ? launch<__nv_bfloat16>(a, tiles, n_tiles, stream_of(s))
                   : launch<float>(a, tiles, n_tiles, stream_of(s));
}

}  // namespace chorus::cuda
