// Integer matrix kernels for x86 (legacy 32-element formats Q4_0, Q4_1, Q8_0, in llama.cpp's
// order of operations) against int8 activations. Included by kernels_avx2.cpp and kernels_avx512.cpp inside
// an anonymous namespace; CHORUS_VNNI selects the dot-product instruction:
//   AVX2:        maddubs (u8 x s8 -> i16 pairs) + madd with ones (-> i32)
//   AVX512-VNNI: vpdpbusd (u8 x s8, four products summed into i32) on 256-bit registers
// Tiles: 2 weight rows x up to 4 tokens, so each weight block is unpacked once per 4 tokens
// and each activation block loaded once per 2 rows.
#pragma once

#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/dequant.h"
#include "kernels/cpu/ops_impl.h"

namespace {

inline float load_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

inline float hsum8(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v);
  const __m128 hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

// sum over groups of 4 of u8(w) * s8(x), as 8 x int32. Both instruction sequences give the
// same integers (the products of 4-bit or |8-bit| weights and 8-bit activations cannot
// saturate maddubs' 16-bit pairs), so every table's float arithmetic starts from equal values.
inline __m256i dot_u8s8(__m256i w, __m256i x) {
#if CHORUS_VNNI
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), w, x);
#else
  const __m256i p16 = _mm256_maddubs_epi16(w, x);
  return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
#endif
}

// 16 packed bytes of nibbles -> 32 u8: elements 0..15 are the low nibbles, 16..31 the high.
inline __m256i unpack_nibbles(const uint8_t* qs) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i mask = _mm_set1_epi8(0x0f);
  const __m128i lo = _mm_and_si128(b, mask);
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), mask);
  return _mm256_set_m128i(hi, lo);
}

// A weight block unpacked for the dot: u8 values (or |q| for signed formats with `sign` set to q),
// scale d, and the coefficient of the activation sum: w = d * (q - off) + m -> (m - off * d).
struct WBlock {
  __m256i u;
  __m256i sign;  // Q8_0 only: the signed quants, to move their sign onto the activations
  float d;
  float mo;
};

template <chorus::TensorType T>
inline WBlock unpack(const uint8_t* b) {
  WBlock w;
  if constexpr (T == chorus::TensorType::q4_0) {  // signed q - 8, as llama.cpp computes it
    w.sign = _mm256_sub_epi8(unpack_nibbles(b + 2), _mm256_set1_epi8(8));
    w.u = _mm256_abs_epi8(w.sign);
    w.d = load_f16(b);
    w.mo = 0.0f;
  } else if constexpr (T == chorus::TensorType::q4_1) {
    w.u = unpack_nibbles(b + 4);
    w.d = load_f16(b);
    w.mo = load_f16(b + 2);
  } else {  // q8_0
    w.sign = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2));
    w.u = _mm256_abs_epi8(w.sign);
    w.d = load_f16(b);
    w.mo = 0.0f;
  }
  return w;
}

// Formats whose quants are signed (the sign moves onto the activations so the dot stays u8 x s8).
template <chorus::TensorType T>
constexpr bool kSigned = T == chorus::TensorType::q8_0 || T == chorus::TensorType::q4_0;

// Bytes per 32-weight block.
template <chorus::TensorType T>
constexpr size_t kBlockBytes = T == chorus::TensorType::q4_0   ? 18
                               : T == chorus::TensorType::q4_1 ? 20
                                                               : 34;

template <chorus::TensorType T>
inline __m256i block_dot(const WBlock& w, __m256i x) {
  if constexpr (kSigned<T>)
    return dot_u8s8(w.u, _mm256_sign_epi8(x, w.sign));
  else
    return dot_u8s8(w.u, x);
}

template <chorus::TensorType T, int R, int NT>
void gemm_tile(const chorus::GemmArgs& a, int64_t r, int64_t t0) {
  constexpr size_t kBytes = kBlockBytes<T>;
  const int64_t nb = a.n_cols / 32;
  __m256 acc[R][NT];
  float extra[R][NT];
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < NT; ++t) {
      acc[i][t] = _mm256_setzero_ps();
      extra[i][t] = 0.0f;
    }
  const uint8_t* rows[R];
  for (int i = 0; i < R; ++i) rows[i] = a.w + (r + i) * a.w_row_bytes;
  const chorus::BlockQ8* xs[NT];
  for (int t = 0; t < NT; ++t) xs[t] = a.xq + (t0 + t) * nb;

  for (int64_t b = 0; b < nb; ++b) {
    {  // the rows 4 tiles ahead: rows are short and contiguous, so this runs well ahead of use
      for (int i = 0; i < R; ++i)
        _mm_prefetch(reinterpret_cast<const char*>(rows[i] + 4 * R * a.w_row_bytes + b * kBytes),
                     _MM_HINT_T0);
    }
    WBlock w[R];
    for (int i = 0; i < R; ++i) w[i] = unpack<T>(rows[i] + b * kBytes);
    for (int t = 0; t < NT; ++t) {
      const chorus::BlockQ8& xb = xs[t][b];
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.q));
      for (int i = 0; i < R; ++i) {
        const __m256 p = _mm256_cvtepi32_ps(block_dot<T>(w[i], x));
        acc[i][t] = _mm256_fmadd_ps(p, _mm256_set1_ps(w[i].d * xb.d), acc[i][t]);
        if constexpr (!kSigned<T>) extra[i][t] += w[i].mo * xb.s;
      }
    }
  }
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < NT; ++t) a.y[(t0 + t) * a.y_stride + r + i] = hsum8(acc[i][t]) + extra[i][t];
}

#if CHORUS_VNNI
// AVX-512: two tokens per 512-bit register, one 8-lane float chain each (the low and high
// halves), so per (row, token) the arithmetic is exactly that of gemm_tile — llama.cpp's order
// — at half the instructions. R rows x 2*NP tokens per tile.
template <chorus::TensorType T, int R, int NP>
void gemm_tile_pairs(const chorus::GemmArgs& a, int64_t r, int64_t t0) {
  constexpr size_t kBytes = kBlockBytes<T>;
  const int64_t nb = a.n_cols / 32;
  __m512 acc[R][NP], summ[R][NP];
  for (int i = 0; i < R; ++i)
    for (int p = 0; p < NP; ++p) acc[i][p] = summ[i][p] = _mm512_setzero_ps();
  const uint8_t* rows[R];
  for (int i = 0; i < R; ++i) rows[i] = a.w + (r + i) * a.w_row_bytes;
  const chorus::BlockQ8* xs[2 * NP];
  for (int t = 0; t < 2 * NP; ++t) xs[t] = a.xq + (t0 + t) * nb;
  for (int64_t b = 0; b < nb; ++b) {
    for (int i = 0; i < R; ++i)
      _mm_prefetch(reinterpret_cast<const char*>(rows[i] + 4 * R * a.w_row_bytes + b * kBytes), _MM_HINT_T0);
    __m512i wu[R];
    __mmask64 neg[R];
    float wd[R], wmo[R];
    for (int i = 0; i < R; ++i) {
      const WBlock w = unpack<T>(rows[i] + b * kBytes);
      wu[i] = _mm512_broadcast_i64x4(w.u);
      if constexpr (kSigned<T>) neg[i] = _mm512_movepi8_mask(_mm512_broadcast_i64x4(w.sign));
      wd[i] = w.d;
      wmo[i] = w.mo;
    }
    for (int p = 0; p < NP; ++p) {
      const chorus::BlockQ8& x0 = xs[2 * p][b];
      const chorus::BlockQ8& x1 = xs[2 * p + 1][b];
      const __m512i x = _mm512_inserti64x4(
          _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x0.q))),
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x1.q)), 1);
      const __m512 dx =
          _mm512_insertf32x8(_mm512_zextps256_ps512(_mm256_set1_ps(x0.d)), _mm256_set1_ps(x1.d), 1);
      __m512 sx;
      if constexpr (!kSigned<T>)
        sx = _mm512_insertf32x8(_mm512_zextps256_ps512(_mm256_set1_ps(x0.s)), _mm256_set1_ps(x1.s), 1);
      for (int i = 0; i < R; ++i) {
        __m512i xi = x;
        if constexpr (kSigned<T>) xi = _mm512_mask_sub_epi8(x, neg[i], _mm512_setzero_si512(), x);
        const __m512 prod = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), wu[i], xi));
        acc[i][p] = _mm512_fmadd_ps(prod, _mm512_mul_ps(_mm512_set1_ps(wd[i]), dx), acc[i][p]);
        if constexpr (!kSigned<T>)
          summ[i][p] = _mm512_add_ps(summ[i][p], _mm512_mul_ps(_mm512_set1_ps(wmo[i]), sx));
      }
    }
  }
  for (int i = 0; i < R; ++i)
    for (int p = 0; p < NP; ++p) {
      float lanes[16];
      _mm512_storeu_ps(lanes, summ[i][p]);
      a.y[(t0 + 2 * p) * a.y_stride + r + i] = hsum8(_mm512_castps512_ps256(acc[i][p])) + lanes[0];
      a.y[(t0 + 2 * p + 1) * a.y_stride + r + i] = hsum8(_mm512_extractf32x8_ps(acc[i][p], 1)) + lanes[8];
    }
}

// Activations of 8 tokens (4 pairs) laid out for gemm_tile_8: per block, each pair's 64 quant
// bytes, its two scales spread over the register halves, and the 8 tokens' activation sums.
struct PairBlock {
  __m512i x[4];  // pair p: [token 2p quants | token 2p+1 quants]
  __m512 dx[4];  // pair p: [d of 2p x8 | d of 2p+1 x8]
  __m512 s8;     // [s of tokens 0..7 | s of tokens 0..7]
};

inline void build_pair_blocks(const chorus::GemmArgs& a, int64_t t0, int64_t nb, PairBlock* out) {
  for (int64_t b = 0; b < nb; ++b) {
    PairBlock& pb = out[b];
    float s[16];
    for (int p = 0; p < 4; ++p) {
      const chorus::BlockQ8& x0 = a.xq[(t0 + 2 * p) * nb + b];
      const chorus::BlockQ8& x1 = a.xq[(t0 + 2 * p + 1) * nb + b];
      pb.x[p] = _mm512_inserti64x4(
          _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x0.q))),
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x1.q)), 1);
      pb.dx[p] = _mm512_insertf32x8(_mm512_zextps256_ps512(_mm256_set1_ps(x0.d)), _mm256_set1_ps(x1.d), 1);
      s[2 * p] = s[8 + 2 * p] = x0.s;
      s[2 * p + 1] = s[8 + 2 * p + 1] = x1.s;
    }
    pb.s8 = _mm512_loadu_ps(s);
  }
}

// 2 rows x 8 tokens from prepared activations: per (row, token) the same operations as
// gemm_tile (llama.cpp's order); the 16 activation-sum chains share one register, lane
// 8 * row + token.
template <chorus::TensorType T>
void gemm_tile_8(const chorus::GemmArgs& a, int64_t r, int64_t t0, const PairBlock* pbs) {
  constexpr int R = 2;
  constexpr size_t kBytes = kBlockBytes<T>;
  const int64_t nb = a.n_cols / 32;
  __m512 acc[R][4];
  for (int i = 0; i < R; ++i)
    for (int p = 0; p < 4; ++p) acc[i][p] = _mm512_setzero_ps();
  __m512 summ = _mm512_setzero_ps();
  const uint8_t* rows[R] = {a.w + r * a.w_row_bytes, a.w + (r + 1) * a.w_row_bytes};
  for (int64_t b = 0; b < nb; ++b) {
    for (int i = 0; i < R; ++i)
      _mm_prefetch(reinterpret_cast<const char*>(rows[i] + 4 * R * a.w_row_bytes + b * kBytes), _MM_HINT_T0);
    const PairBlock& pb = pbs[b];
    WBlock w[R];
    for (int i = 0; i < R; ++i) w[i] = unpack<T>(rows[i] + b * kBytes);
    if constexpr (!kSigned<T>) {
      const __m512 mo =
          _mm512_insertf32x8(_mm512_zextps256_ps512(_mm256_set1_ps(w[0].mo)), _mm256_set1_ps(w[1].mo), 1);
      summ = _mm512_add_ps(summ, _mm512_mul_ps(mo, pb.s8));
    }
    for (int i = 0; i < R; ++i) {
      const __m512i wu = _mm512_broadcast_i64x4(w[i].u);
      const __m512 wd = _mm512_set1_ps(w[i].d);
      __mmask64 neg = 0;
      if constexpr (kSigned<T>) neg = _mm512_movepi8_mask(_mm512_broadcast_i64x4(w[i].sign));
      for (int p = 0; p < 4; ++p) {
        __m512i x = pb.x[p];
        if constexpr (kSigned<T>) x = _mm512_mask_sub_epi8(x, neg, _mm512_setzero_si512(), x);
        const __m512 prod = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), wu, x));
        acc[i][p] = _mm512_fmadd_ps(prod, _mm512_mul_ps(wd, pb.dx[p]), acc[i][p]);
      }
    }
  }
  float sums[16];
  _mm512_storeu_ps(sums, summ);
  for (int i = 0; i < R; ++i)
    for (int p = 0; p < 4; ++p) {
      a.y[(t0 + 2 * p) * a.y_stride + r + i] = hsum8(_mm512_castps512_ps256(acc[i][p])) + sums[8 * i + 2 * p];
      a.y[(t0 + 2 * p + 1) * a.y_stride + r + i] =
          hsum8(_mm512_extractf32x8_ps(acc[i][p], 1)) + sums[8 * i + 2 * p + 1];
    }
}
#endif

template <chorus::TensorType T, int R>
void gemm_rows(const chorus::GemmArgs& a, int64_t r) {
  int64_t t = 0;
#if CHORUS_VNNI
  for (; t + 4 <= a.n_tokens; t += 4) gemm_tile_pairs<T, R, 2>(a, r, t);
  if (t + 2 <= a.n_tokens) {
    gemm_tile_pairs<T, R, 1>(a, r, t);
    t += 2;
  }
#endif
  for (; t + 4 <= a.n_tokens; t += 4) gemm_tile<T, R, 4>(a, r, t);
  switch (a.n_tokens - t) {
    case 3: gemm_tile<T, R, 3>(a, r, t); break;
    case 2: gemm_tile<T, R, 2>(a, r, t); break;
    case 1: gemm_tile<T, R, 1>(a, r, t); break;
    default: break;
  }
}

template <chorus::TensorType T>
void gemm_x86(const chorus::GemmArgs& a) {
  int64_t r = a.r0;
  if (a.n_tokens == 1) {  // decode: more rows in flight keeps more loads outstanding
    for (; r + 4 <= a.r1; r += 4) gemm_tile<T, 4, 1>(a, r, 0);
  }
#if CHORUS_VNNI
  if (a.n_tokens > 1) {
    // Groups of 8 tokens: prepare their activations once, then sweep the rows 2 at a time.
    constexpr int64_t kMaxBlocks = 256;  // prepared activations stay under ~200 KB of stack
    const int64_t nb = a.n_cols / 32;
    int64_t t8 = 0;
    if (nb <= kMaxBlocks && a.r1 - r >= 2) {
      alignas(64) PairBlock pbs[kMaxBlocks];
      const int64_t r_end = a.r0 + ((a.r1 - a.r0) & ~int64_t{1});
      for (; t8 + 8 <= a.n_tokens; t8 += 8) {
        build_pair_blocks(a, t8, nb, pbs);
        for (int64_t rr = a.r0; rr < r_end; rr += 2) gemm_tile_8<T>(a, rr, t8, pbs);
      }
      if (t8 > 0 && r_end < a.r1) {  // an odd last row: the generic tiles below take it
        chorus::GemmArgs odd = a;
        odd.r0 = r_end;
        odd.n_tokens = t8;
        for (int64_t rr = r_end; rr < a.r1; ++rr) gemm_rows<T, 1>(odd, rr);
      }
    }
    if (t8 == a.n_tokens) return;
    // The remaining tokens (fewer than 8), every row.
    chorus::GemmArgs rest = a;
    rest.xq = a.xq + t8 * nb;
    rest.y = a.y + t8 * a.y_stride;
    rest.n_tokens = a.n_tokens - t8;
    for (r = a.r0; r + 4 <= a.r1; r += 4) gemm_rows<T, 4>(rest, r);
    for (; r + 2 <= a.r1; r += 2) gemm_rows<T, 2>(rest, r);
    if (r < a.r1) gemm_rows<T, 1>(rest, r);
    return;
  }
#endif
  for (; r + 2 <= a.r1; r += 2) gemm_rows<T, 2>(a, r);
  if (r < a.r1) gemm_rows<T, 1>(a, r);
}

// Every (row, token) of a product in tiles of R rows x NT tokens, K::run<R, NT>(a, r, t0): with
// one token 4 rows at a time (more rows in flight keeps more loads outstanding), otherwise
// 2 rows x 4 tokens, then what is left.
template <class K, int R>
void sweep_rows(const chorus::GemmArgs& a, int64_t r) {
  int64_t t = 0;
  for (; t + 4 <= a.n_tokens; t += 4) K::template run<R, 4>(a, r, t);
  switch (a.n_tokens - t) {
    case 3: K::template run<R, 3>(a, r, t); break;
    case 2: K::template run<R, 2>(a, r, t); break;
    case 1: K::template run<R, 1>(a, r, t); break;
    default: break;
  }
}

template <class K>
void sweep_tiles(const chorus::GemmArgs& a) {
  int64_t r = a.r0;
  if (a.n_tokens == 1)
    for (; r + 4 <= a.r1; r += 4) K::template run<4, 1>(a, r, 0);
  for (; r + 2 <= a.r1; r += 2) sweep_rows<K, 2>(a, r);
  if (r < a.r1) sweep_rows<K, 1>(a, r);
}

// Dequantize-and-dot for any dequantizable type: each weight row to f32 (on the stack), then
// 8-lane FMA dot products with up to 4 tokens at a time.
void gemm_f32_x86(const chorus::GemmArgs& a) {
  constexpr int64_t kMaxCols = 16384;
  if (a.n_cols > kMaxCols) {
    chorus::gemm_dequantized(a);
    return;
  }
  alignas(64) float wrow[kMaxCols];
  for (int64_t r = a.r0; r < a.r1; ++r) {
    chorus::dequantize_row(a.type, a.w + r * a.w_row_bytes, wrow, a.n_cols);
    for (int64_t t = 0; t < a.n_tokens; ++t) {
      const float* x = a.xf + t * a.n_cols;
      __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
      int64_t k = 0;
      for (; k + 16 <= a.n_cols; k += 16) {
        acc0 = _mm256_fmadd_ps(_mm256_load_ps(wrow + k), _mm256_loadu_ps(x + k), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_load_ps(wrow + k + 8), _mm256_loadu_ps(x + k + 8), acc1);
      }
      float sum = hsum8(_mm256_add_ps(acc0, acc1));
      for (; k < a.n_cols; ++k) sum += wrow[k] * x[k];
      a.y[t * a.y_stride + r] = sum;
    }
  }
}

}  // namespace

#include "kernels/cpu/gemm_half_x86_impl.h"
#include "kernels/cpu/gemm_panel_x86_impl.h"

namespace {

// The x86 table of this translation unit's instruction set: the scalar table for formats
// without an x86 kernel, this unit's element-wise ops, and the integer GEMMs above.
// Activations to int8 blocks, as quantize_q8_generic does them (bit-identical: the same max of
// magnitudes, the same one multiply per value, rounded to nearest-even by the conversion as by
// nearbyint under the default rounding mode, the same f16 roundings of the scales), with the
// loops the compiler left scalar (nearbyint) in vector registers: a block is two 16-float halves,
// and each half's integer sum is its qsum.
#if CHORUS_VNNI
inline void quantize_q8_x86(const float* x, chorus::BlockQ8* out, int64_t n) {
  const __m512 sign = _mm512_set1_ps(-0.0f);
  for (int64_t b = 0; b < n / chorus::kQ8Block; ++b) {
    const float* xb = x + b * chorus::kQ8Block;
    const __m512 lo = _mm512_loadu_ps(xb), hi = _mm512_loadu_ps(xb + 16);
    const float amax =
        _mm512_reduce_max_ps(_mm512_max_ps(_mm512_andnot_ps(sign, lo), _mm512_andnot_ps(sign, hi)));
    const float d = amax / 127.0f;
    const __m512 id = _mm512_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
    const __m512i qlo = _mm512_cvtps_epi32(_mm512_mul_ps(lo, id)),
                  qhi = _mm512_cvtps_epi32(_mm512_mul_ps(hi, id));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out[b].q), _mm512_cvtepi32_epi8(qlo));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out[b].q + 16), _mm512_cvtepi32_epi8(qhi));
    const int h0 = _mm512_reduce_add_epi32(qlo), h1 = _mm512_reduce_add_epi32(qhi);
    chorus::finish_q8(out[b], d, h0, h1);
  }
}
#else
inline int hsum8(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  return _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1)));
}
inline void quantize_q8_x86(const float* x, chorus::BlockQ8* out, int64_t n) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < n / chorus::kQ8Block; ++b) {
    const float* xb = x + b * chorus::kQ8Block;
    __m256 v[4];
    for (int i = 0; i < 4; ++i) v[i] = _mm256_loadu_ps(xb + 8 * i);
    __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
                             _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    const float amax = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
    const float d = amax / 127.0f;
    const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
    __m256i q[4];
    for (int i = 0; i < 4; ++i) q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], id));
    // |q| <= 127: the saturating packs are exact; they interleave 128-bit lanes, put back in order.
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[b].q),
                        _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    const int h0 = hsum8(_mm256_add_epi32(q[0], q[1])), h1 = hsum8(_mm256_add_epi32(q[2], q[3]));
    chorus::finish_q8(out[b], d, h0, h1);
  }
}
#endif

#if defined(__AVX512F__)
// op_gdn_step with a state row held in registers (dk = 16 NV): the decay, S k, the rank-1
// update and S q on the registers, the row loaded and stored once. The bits are op_gdn_step's:
// the same multiplies and fmas, dot products in dot_ggml's order (chain j % 4 takes 16 lanes
// j, steps of 64 in order, folded (0+2)+(1+3), then reduce16's order), which needs dk % 64 == 0.
[[gnu::always_inline]] inline float reduce16_zmm(__m512 v) {
  const __m256 t8 = _mm256_add_ps(_mm512_extractf32x8_ps(v, 1), _mm512_castps512_ps256(v));
  const __m128 t4 = _mm_add_ps(_mm256_extractf128_ps(t8, 1), _mm256_castps256_ps128(t8));
  const __m128 ab = _mm_add_ps(t4, _mm_movehl_ps(t4, t4));  // (t4[0] + t4[2], t4[1] + t4[3])
  return _mm_cvtss_f32(_mm_add_ss(ab, _mm_shuffle_ps(ab, ab, 1)));
}

template <int NV>
[[gnu::always_inline]] inline float dot_rows_ggml(const __m512 (&r)[NV], const float* b) {
  static_assert(NV % 4 == 0);
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  for (int j = 0; j < NV; ++j) acc[j % 4] = _mm512_fmadd_ps(r[j], _mm512_loadu_ps(b + 16 * j), acc[j % 4]);
  return reduce16_zmm(_mm512_add_ps(_mm512_add_ps(acc[0], acc[2]), _mm512_add_ps(acc[1], acc[3])));
}

template <int NV>
void gdn_step_rows(float* S, const float* q, const float* k, const float* v, float g, float beta, float* out,
                   int dv) {
  constexpr int dk = 16 * NV;
  const __m512 alpha = _mm512_set1_ps(std::exp(g));
  for (int i = 0; i < dv; ++i) {
    float* s = S + static_cast<size_t>(i) * dk;
    __m512 r[NV];
    for (int j = 0; j < NV; ++j) r[j] = _mm512_mul_ps(_mm512_loadu_ps(s + 16 * j), alpha);
    const __m512 delta = _mm512_set1_ps(((v ? v[i] : 0.0f) - dot_rows_ggml<NV>(r, k)) * beta);
    for (int j = 0; j < NV; ++j) r[j] = _mm512_fmadd_ps(_mm512_loadu_ps(k + 16 * j), delta, r[j]);
    if (out) out[i] = dot_rows_ggml<NV>(r, q);
    for (int j = 0; j < NV; ++j) _mm512_storeu_ps(s + 16 * j, r[j]);
  }
}

void op_gdn_step_avx512(float* S, const float* q, const float* k, const float* v, float g, float beta,
                        float* out, int dk, int dv) {
  switch (dk) {
    case 64: return gdn_step_rows<4>(S, q, k, v, g, beta, out, dv);
    case 128: return gdn_step_rows<8>(S, q, k, v, g, beta, out, dv);
    case 256: return gdn_step_rows<16>(S, q, k, v, g, beta, out, dv);
    default: return op_gdn_step(S, q, k, v, g, beta, out, dk, dv);
  }
}
#endif

inline chorus::CpuKernels make_x86_table(const char* isa) {
  using chorus::TensorType;
  chorus::CpuKernels k = chorus::cpu_kernels_scalar();
  k.isa = isa;
  fill_common_ops(k);
  k.quantize_q8 = quantize_q8_x86;
  k.gemm_f32 = gemm_f32_x86;
  k.gemm[static_cast<int>(TensorType::q4_0)] = gemm_x86<TensorType::q4_0>;
  k.gemm[static_cast<int>(TensorType::q4_1)] = gemm_x86<TensorType::q4_1>;
  k.gemm[static_cast<int>(TensorType::q8_0)] = gemm_x86<TensorType::q8_0>;
  k.gemm_llama[static_cast<int>(TensorType::q4_0)] = gemm_x86<TensorType::q4_0>;
  k.gemm_llama[static_cast<int>(TensorType::q4_1)] = gemm_x86<TensorType::q4_1>;
  k.gemm_llama[static_cast<int>(TensorType::q8_0)] = gemm_x86<TensorType::q8_0>;
  fill_panel_gemms(k);
  fill_half_gemms(k);
#if defined(__AVX512F__)
  k.gdn_step = op_gdn_step_avx512;
#endif
  return k;
}

}  // namespace
