// Softmax attention over a view of paged KV blocks (op_attention, CpuKernels::attention), in
// the orders docs/engine.md describes. Part of ops_impl.h, which includes it after the arithmetic
// helpers it uses (exp_approx, reduce16); like it, compiled once per ISA's translation unit.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/fp16.h"

#if defined(__F16C__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

// NOLINTBEGIN(google-build-namespaces)
namespace {

// n_q queries' scores against one key page ([d][16], dimension-major), one query at a time, in
// ggml's dot-product order: lane[l][t] is lane l of position t's dot product, the sum over steps
// of 64 of (q k)[16j + l] for j = 0..3, folded as (j0 + j2) + (j1 + j3); the 16 lanes then
// reduced in _mm512_reduce_add_ps order, and the dimensions past the last full step of 64 added
// one by one.
#if defined(__AVX512F__)
// One lane of one query's scores: dimensions l, l + 16, l + 32, ... in 4 chains over the d64 / 64
// steps, folded.
inline __attribute__((always_inline)) __m512 lane_sum(const float* q, const float* kt, int d64, int l) {
  constexpr int P = chorus::kKvPageSize;
  __m512 acc[4];
  for (int j = 0; j < 4; ++j) acc[j] = _mm512_setzero_ps();
  for (int s0 = 0; s0 < d64; s0 += 64)
    for (int j = 0; j < 4; ++j)
      acc[j] = _mm512_fmadd_ps(_mm512_set1_ps(q[s0 + 16 * j + l]),
                               _mm512_loadu_ps(kt + (s0 + 16 * j + l) * P), acc[j]);
  return _mm512_add_ps(_mm512_add_ps(acc[0], acc[2]), _mm512_add_ps(acc[1], acc[3]));
}

// The lanes are made in the order the reduction tree consumes them, t8[i] = lane[8 + i] +
// lane[i] (Span 8) and t4[i] = t8[4 + i] + t8[i] (Span 4), so that only a few partial sums are
// live and they stay in registers (16 lanes of several queries at once spilled). Addition
// commutes, so the tree is the generic form's to the bit.
template <int Span>
inline __attribute__((always_inline)) __m512 tree_sum(const float* q, const float* kt, int d64, int i) {
  if constexpr (Span == 8)
    return _mm512_add_ps(lane_sum(q, kt, d64, 8 + i), lane_sum(q, kt, d64, i));
  else
    return _mm512_add_ps(tree_sum<2 * Span>(q, kt, d64, Span + i), tree_sum<2 * Span>(q, kt, d64, i));
}
#endif

inline void page_scores(const float* const* q, int n_q, const float* kt, int d,
                        float (*sc)[chorus::kKvPageSize]) {
  constexpr int P = chorus::kKvPageSize;
  const int d64 = d & ~63;
#if defined(__AVX512F__)
  // One query at a time: its keys come from L1 (a memory operand of the FMA either way).
  for (int g = 0; g < n_q; ++g) {
    const __m512 even = _mm512_add_ps(tree_sum<4>(q[g], kt, d64, 0), tree_sum<4>(q[g], kt, d64, 2));
    const __m512 odd = _mm512_add_ps(tree_sum<4>(q[g], kt, d64, 1), tree_sum<4>(q[g], kt, d64, 3));
    _mm512_storeu_ps(sc[g], _mm512_add_ps(even, odd));
  }
#else
  for (int g = 0; g < n_q; ++g) {
    float lane[16][P];
    for (int l = 0; l < 16; ++l) {
      float acc[4][P];
      for (int j = 0; j < 4; ++j)
        for (int t = 0; t < P; ++t) acc[j][t] = 0.0f;
      for (int s0 = 0; s0 < d64; s0 += 64)
        for (int j = 0; j < 4; ++j) {
          const float qv = q[g][s0 + 16 * j + l];
          const float* k = kt + (s0 + 16 * j + l) * P;
          for (int t = 0; t < P; ++t) acc[j][t] = std::fma(qv, k[t], acc[j][t]);
        }
      for (int t = 0; t < P; ++t) lane[l][t] = (acc[0][t] + acc[2][t]) + (acc[1][t] + acc[3][t]);
    }
    float t8[8][P], t4[4][P];
    for (int i = 0; i < 8; ++i)
      for (int t = 0; t < P; ++t) t8[i][t] = lane[8 + i][t] + lane[i][t];
    for (int i = 0; i < 4; ++i)
      for (int t = 0; t < P; ++t) t4[i][t] = t8[4 + i][t] + t8[i][t];
    for (int t = 0; t < P; ++t) sc[g][t] = (t4[0][t] + t4[2][t]) + (t4[1][t] + t4[3][t]);
  }
#endif
  for (int g = 0; g < n_q; ++g)
    for (int i = d64; i < d; ++i)
      for (int t = 0; t < P; ++t) sc[g][t] = std::fma(q[g][i], kt[i * P + t], sc[g][t]);
}

// n binary16 values widened to f32 (exact): F16C or AVX-512 conversions where the table has
// them, the reference conversion in the scalar table.
inline void widen_f16(const uint16_t* h, float* f, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(f + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h + i))));
#elif defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(f + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i))));
#endif
  for (; i < n; ++i) f[i] = chorus::f16_to_f32(h[i]);
}

// Where an f16 page's keys ([head_dim][16]) and then a pass's value rows are widened: after the
// scores and the value accumulators in the scratch (attention_scratch_floats).
inline float* widened_pages(const chorus::AttentionArgs& a, int64_t stride) {
  return a.scratch + a.n_q * stride + static_cast<int64_t>(a.n_q) * 4 * 16 * a.head_dim;
}

// Scores, one page at a time, written at view positions (segment offset + block position), and
// each query's largest. A page's keys are read from memory once for all queries of the group
// (GQA), then stay in L1 (an f16 page is widened once, then read as an f32 one).
inline void attention_scores(const chorus::AttentionArgs& a, int64_t stride, float* mx) {
  constexpr int P = chorus::kKvPageSize;
  float* kbuf = widened_pages(a, stride);
#if defined(__AVX512F__)
  __m512 mxv[8];
  for (int g = 0; g < a.n_q; ++g) mxv[g] = _mm512_set1_ps(-INFINITY);
#endif
  int64_t offset = 0;
  for (int sg = 0; sg < a.n_segs; ++sg) {
    const chorus::AttentionSegment& seg = a.segs[sg];
    const int64_t n_pages = (seg.n_kv + P - 1) / P;
    const float* qs[8];
    for (int g = 0; g < a.n_q; ++g) qs[g] = seg.q + g * a.head_dim;
    for (int64_t pg = 0; pg < n_pages; ++pg) {
      const float* kt = a.kv_f16 ? kbuf : seg.k_pages[pg] + a.kv_offset * P;  // [d][16]
      const int valid = static_cast<int>(seg.n_kv - pg * P < P ? seg.n_kv - pg * P : P);
      // Positions before the segment's begin are outside a sliding window: -inf, as a mask
      // makes them in llama.cpp (their exponentials are 0).
      const int hidden = static_cast<int>(std::clamp<int64_t>(seg.begin - pg * P, 0, P));
      if (hidden >= valid) {
        for (int g = 0; g < a.n_q; ++g)
          for (int t = 0; t < valid; ++t) a.scratch[g * stride + offset + pg * P + t] = -INFINITY;
        continue;
      }
      // Pages lie apart in the pool, where the hardware's prefetchers do not look: ask for the
      // next one's keys now.
      if (pg + 1 < n_pages) {
        const char* next = a.kv_f16 ? reinterpret_cast<const char*>(seg.k_pages_f16[pg + 1] + a.kv_offset * P)
                                    : reinterpret_cast<const char*>(seg.k_pages[pg + 1] + a.kv_offset * P);
        const int64_t bytes = static_cast<int64_t>(a.head_dim) * P * (a.kv_f16 ? 2 : 4);
        for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(next + b);
      }
      // And this page's value rows, read after all the scores: by then they are in L2.
      {
        const int64_t row_bytes = static_cast<int64_t>(a.head_dim) * (a.kv_f16 ? 2 : 4);
        for (int t = hidden; t < valid; ++t) {
          const int64_t at = a.kv_offset + t * a.kv_stride;
          const char* row = a.kv_f16 ? reinterpret_cast<const char*>(seg.v_pages_f16[pg] + at)
                                     : reinterpret_cast<const char*>(seg.v_pages[pg] + at);
          for (int64_t b = 0; b < row_bytes; b += 64) __builtin_prefetch(row + b, 0, 2);
        }
      }
      if (a.kv_f16) widen_f16(seg.k_pages_f16[pg] + a.kv_offset * P, kbuf, a.head_dim * P);
      float sc[8][P];
      page_scores(qs, a.n_q, kt, a.head_dim, sc);
      for (int g = 0; g < a.n_q; ++g) {
        float* p = a.scratch + g * stride + offset + pg * P;
#if defined(__AVX512F__)
        if (hidden == 0 && valid == P) {  // a whole page: scaled and its largest kept as vectors
          const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(sc[g]), _mm512_set1_ps(a.scale));
          _mm512_storeu_ps(p, v);
          mxv[g] = _mm512_max_ps(mxv[g], v);
          continue;
        }
#endif
        for (int t = 0; t < hidden; ++t) p[t] = -INFINITY;
        for (int t = hidden; t < valid; ++t) {
          p[t] = sc[g][t] * a.scale;
          mx[g] = p[t] > mx[g] ? p[t] : mx[g];
        }
      }
    }
    offset += seg.n_kv;
  }
#if defined(__AVX512F__)
  // The largest of a set is the same whatever order it is looked for in.
  for (int g = 0; g < a.n_q; ++g) mx[g] = std::max(mx[g], _mm512_reduce_max_ps(mxv[g]));
#endif
}

// Exponentials summed 16 at a time in double, probabilities normalized (padding is -inf: 0).
inline void attention_softmax(const chorus::AttentionArgs& a, int64_t n, int64_t stride, const float* mx) {
  for (int g = 0; g < a.n_q; ++g) {
    float* p = a.scratch + g * stride;
    double sum = 0.0;
    for (int64_t c = 0; c < stride; c += 16) {
      for (int t = 0; t < 16; ++t) p[c + t] = exp_approx(p[c + t] - mx[g]);
      sum += static_cast<double>(reduce16(p + c));
    }
    const auto inv = static_cast<float>(1.0 / sum);
    for (int64_t j = 0; j < n; ++j) p[j] *= inv;
  }
}

// View positions per pass of the value sums: the value rows of a pass are looked up (an f16
// page's widened) once, then every lane's accumulators run over them in registers. A multiple
// of 64, so a pass starts on a chain boundary.
constexpr int64_t kValueChunk = 256;

// The value rows of view positions [j0, j0 + n) (n <= kValueChunk) as f32 pointers, nullptr
// where a sliding window hides the position (its p is 0: it adds nothing); an f16 page's rows
// are widened into buf ([kValueChunk][d]) first.
inline void value_rows(const chorus::AttentionArgs& a, int64_t j0, int64_t n, const float** rows,
                       float* buf) {
  constexpr int P = chorus::kKvPageSize;
  const int d = a.head_dim;
  int64_t offset = 0;
  for (int sg = 0; sg < a.n_segs; ++sg) {
    const chorus::AttentionSegment& seg = a.segs[sg];
    const int64_t lo = j0 > offset ? j0 : offset,
                  hi = j0 + n < offset + seg.n_kv ? j0 + n : offset + seg.n_kv;
    for (int64_t j = lo; j < hi; ++j) {
      const int64_t jl = j - offset, at = a.kv_offset + (jl % P) * a.kv_stride;
      const float*& row = rows[j - j0];
      if (jl < seg.begin) {
        row = nullptr;
      } else if (a.kv_f16) {
        float* f = buf + (j - j0) * d;
        widen_f16(seg.v_pages_f16[jl / P] + at, f, d);
        row = f;
      } else {
        row = seg.v_pages[jl / P] + at;
        // The lanes read a page's rows a page apart, where the hardware's prefetchers do not
        // look: ask for the pass's rows now (into L2; a pass of them fits there). The scores
        // asked for them too, but not all are still there: without this, chorus_attention_bench's
        // pages out of cache took 1.2x as long.
        for (int i = 0; i < d; i += 16) __builtin_prefetch(row + i, 0, 2);
      }
    }
    offset += seg.n_kv;
  }
}

// Queries g0 .. g0 + G, dimensions i0 .. i0 + W of every lane and chain, over the rows of one
// pass: the accumulators stay in registers across the pass, and each value row loaded serves
// the G queries.
template <int G, int W>
inline void value_sums(const chorus::AttentionArgs& a, int64_t stride, int chains, const float* const* rows,
                       int64_t j0, int64_t n, int g0, int i0, float* accs) {
  const int d = a.head_dim;
  const bool start = j0 == 0;  // the first pass starts the sums at 0
  for (int c = 0; c < chains; ++c)
    for (int l = 0; l < 16; ++l) {
      float* out[G];
      float acc[G][W];
      for (int g = 0; g < G; ++g) {
        out[g] = accs + ((static_cast<int64_t>(g0 + g) * 4 + c) * 16 + l) * d + i0;
        for (int w = 0; w < W; ++w) acc[g][w] = start ? 0.0f : out[g][w];
      }
      // Position j feeds lane j % 16 of chain (j / 16) % chains.
      const int64_t first = 16 * ((c - (j0 >> 4)) & (chains - 1)) + l;
      const int64_t step = 16 * chains;
      for (int64_t j = j0 + first; j < j0 + n; j += step) {
        const float* v = rows[j - j0];
        if (v == nullptr) continue;
        v += i0;
        for (int g = 0; g < G; ++g) {
          const float pj = a.scratch[(g0 + g) * stride + j];
          for (int w = 0; w < W; ++w) acc[g][w] = std::fma(v[w], pj, acc[g][w]);
        }
      }
      for (int g = 0; g < G; ++g)
        for (int w = 0; w < W; ++w) out[g][w] = acc[g][w];
    }
}

// Values: acc[g][chain][lane] += p[j] v_j, position j feeding lane j % 16 of chain (j / 16) %
// chains, in view order for every accumulator. `accs` is [query][4][16][d]. The sums run in
// passes of kValueChunk positions, queries in groups of up to 4 and dimensions in blocks of
// kValueWidth (then of 16, then one by one), so that each group's accumulators fit in registers.
#if defined(__AVX512F__)
constexpr int kValueWidth = 32;
#else
constexpr int kValueWidth = 16;
#endif
template <int G>
inline void value_sums_group(const chorus::AttentionArgs& a, int64_t stride, int chains,
                             const float* const* rows, int64_t j0, int64_t n, int g0, float* accs) {
  const int d = a.head_dim;
  int i0 = 0;
  for (; i0 + kValueWidth <= d; i0 += kValueWidth)
    value_sums<G, kValueWidth>(a, stride, chains, rows, j0, n, g0, i0, accs);
  for (; i0 + 16 <= d; i0 += 16) value_sums<G, 16>(a, stride, chains, rows, j0, n, g0, i0, accs);
  for (; i0 < d; ++i0) value_sums<G, 1>(a, stride, chains, rows, j0, n, g0, i0, accs);
}

inline void attention_values(const chorus::AttentionArgs& a, int64_t n_pos, int64_t stride, int chains,
                             float* accs) {
  float* vbuf = widened_pages(a, stride) + 16 * a.head_dim;
  const float* rows[kValueChunk];
  for (int64_t j0 = 0; j0 < n_pos; j0 += kValueChunk) {
    const int64_t n = n_pos - j0 < kValueChunk ? n_pos - j0 : kValueChunk;
    value_rows(a, j0, n, rows, vbuf);
    int g0 = 0;
    for (; g0 + 4 <= a.n_q; g0 += 4) value_sums_group<4>(a, stride, chains, rows, j0, n, g0, accs);
    switch (a.n_q - g0) {
      case 3: value_sums_group<3>(a, stride, chains, rows, j0, n, g0, accs); break;
      case 2: value_sums_group<2>(a, stride, chains, rows, j0, n, g0, accs); break;
      case 1: value_sums_group<1>(a, stride, chains, rows, j0, n, g0, accs); break;
      default: break;
    }
  }
}

// Fold the chains and reduce the 16 lanes of each dimension, 16 dimensions at a time (as vectors
// over dimensions), in the order of reduce16().
inline void attention_reduce(const chorus::AttentionArgs& a, int chains, const float* accs) {
  const int d = a.head_dim;
  auto acc_row = [&](int g, int c, int l) { return accs + ((static_cast<int64_t>(g) * 4 + c) * 16 + l) * d; };
  for (int g = 0; g < a.n_q; ++g)
    for (int i0 = 0; i0 < d; i0 += 16) {
      const int w = d - i0 < 16 ? d - i0 : 16;
      float ln[16][16];
      if (w == 16 && chains == 1) {  // whole rows of 16: copied as they are (the same sums)
        for (int l = 0; l < 16; ++l) std::copy_n(acc_row(g, 0, l) + i0, 16, ln[l]);
      } else {
        for (int l = 0; l < 16; ++l)
          for (int ii = 0; ii < 16; ++ii) {
            const int i = i0 + (ii < w ? ii : 0);
            ln[l][ii] = chains == 4 ? (acc_row(g, 0, l)[i] + acc_row(g, 2, l)[i]) +
                                          (acc_row(g, 1, l)[i] + acc_row(g, 3, l)[i])
                                    : acc_row(g, 0, l)[i];
          }
      }
      float t8[8][16], t4[4][16];
      for (int k = 0; k < 8; ++k)
        for (int ii = 0; ii < 16; ++ii) t8[k][ii] = ln[8 + k][ii] + ln[k][ii];
      for (int k = 0; k < 4; ++k)
        for (int ii = 0; ii < 16; ++ii) t4[k][ii] = t8[4 + k][ii] + t8[k][ii];
      for (int ii = 0; ii < w; ++ii)
        a.out[g * d + i0 + ii] = (t4[0][ii] + t4[2][ii]) + (t4[1][ii] + t4[3][ii]);
    }
}

// Softmax attention for the queries of one KV head (1..8 of them under GQA) over a view: an
// ordered list of blocks (segments), each with its own pages and its own rotation of the queries.
// Positions are numbered through the view; key pages are dimension-major ([dims][16 positions]),
// so scores come out 16 positions at a time, all as vectors over positions (page_scores). Then
// exponentials, and the values summed with fma per lane and reduced: with several tokens in the
// step llama.cpp runs this as a tiled GEMM (one 16-lane chain over positions); with one token, as
// ggml's dot product (4 x 16 lanes over steps of 64, folded) — the order single_token_batch asks
// for, which the runner sets only in llama.cpp's order (else every batch gets the one chain). No KV copy;
// scores and accumulators live in a.scratch.
void op_attention(const chorus::AttentionArgs& a) {
  constexpr int P = chorus::kKvPageSize;
  static_assert(P == 16, "the reduction order below is written for 16-position pages");
  int64_t n = 0;  // view positions
  for (int s = 0; s < a.n_segs; ++s) n += a.segs[s].n_kv;
  const int64_t stride = (n + P - 1) / P * P;  // scratch floats per query
  float mx[8];
  for (int g = 0; g < a.n_q; ++g) {
    mx[g] = -INFINITY;
    for (int64_t j = n; j < stride; ++j) a.scratch[g * stride + j] = -INFINITY;
  }
  attention_scores(a, stride, mx);
  attention_softmax(a, n, stride, mx);
  const int chains = a.single_token_batch ? 4 : 1;
  float* accs = a.scratch + a.n_q * stride;  // after the scores: [query][chain][lane][d]
  attention_values(a, n, stride, chains, accs);
  attention_reduce(a, chains, accs);
}

}  // namespace
// NOLINTEND(google-build-namespaces)
