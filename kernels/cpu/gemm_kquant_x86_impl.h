// Integer k-quant matrix kernels for x86: Q4_K, Q5_K, Q6_K weights against BlockQ8K activations
// (kernels/cpu/kquant.h has the layouts). Included by kernels_avx2.cpp and kernels_avx512.cpp
// inside an anonymous namespace, after gemm_x86_impl.h; CHORUS_VNNI selects the vector width:
//   AVX2:         one 32-weight group per 256-bit register; maddubs (u8 x s8 -> i16 pairs), then
//                 madd with the group's scale (-> i32) and an add
//   AVX512-VNNI:  two groups per 512-bit register; maddubs, then vpdpwssd (i16 x scale, summed
//                 into i32 in one instruction)
// Per super-block and (row, token) the integers are exactly the scalar reference's
// (gemm_kquant_scalar); a super-block's integer sum is converted to float once.
// Tiles: R weight rows x NT tokens, so a row's super-block header is decoded once per NT tokens
// and each activation block is loaded once per R rows.
#pragma once

#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/kquant.h"

namespace {  // each instruction set's translation unit gets its own copy
namespace kq {

using chorus::TensorType;

#if CHORUS_VNNI
constexpr int kChunk = 64;  // weights per vector: groups 2c and 2c + 1
using VI = __m512i;
inline VI load_x(const int8_t* p) { return _mm512_loadu_si512(p); }
inline VI madd_acc(VI acc, VI w, VI x, VI s) { return _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(w, x), s); }
inline __m256i fold(VI v) { return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1)); }
inline VI zero() { return _mm512_setzero_si512(); }
inline VI nibbles(VI v) { return _mm512_and_si512(v, _mm512_set1_epi8(0x0f)); }
// The upper 256 bits shifted right by `n` more bits (16-bit lanes) than the lower.
inline VI shift_upper(VI v, int n) { return _mm512_mask_srli_epi16(v, 0xffff0000u, v, static_cast<unsigned>(n)); }
inline VI both_halves(const uint8_t* p) { return _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
#else
constexpr int kChunk = 32;  // weights per vector: group c
using VI = __m256i;
inline VI load_x(const int8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline VI madd_acc(VI acc, VI w, VI x, VI s) {
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), s));
}
inline __m256i fold(VI v) { return v; }
inline VI zero() { return _mm256_setzero_si256(); }
inline VI nibbles(VI v) { return _mm256_and_si256(v, _mm256_set1_epi8(0x0f)); }
#endif
constexpr int kChunks = 256 / kChunk;

inline float f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// A row's super-block header, decoded once per tile.
struct Head {
  float d, dmin;  // dmin: Q4_K / Q5_K only
  __m128i sc;     // Q4_K / Q5_K: the 8 scales as i16. Q6_K: scales 0..7 as i16
  __m128i sc_hi;  // Q6_K: scales 8..15 as i16
  __m256i pair;   // Q4_K / Q5_K: the mins, each twice, as i16 (against bsums 2g, 2g + 1).
                  // Q6_K: all 16 scales as i16 (against bsums j)
};

template <TensorType T>
inline void head(const uint8_t* b, Head& h) {
  if constexpr (T == TensorType::q6_k) {
    const __m128i s8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192));
    h.pair = _mm256_cvtepi8_epi16(s8);
    h.sc = _mm256_castsi256_si128(h.pair);
    h.sc_hi = _mm256_extracti128_si256(h.pair, 1);
    h.d = f16(b + 208);
    h.dmin = 0.0f;
  } else {
    h.d = f16(b);
    h.dmin = f16(b + 2);
    uint32_t u[3];
    std::memcpy(u, b + 4, 12);  // kquant::scales_mins, four at a time
    const uint32_t sc_lo = u[0] & 0x3f3f3f3fu, m_lo = u[1] & 0x3f3f3f3fu;
    const uint32_t sc_hi = (u[2] & 0x0f0f0f0fu) | (((u[0] >> 6) & 0x03030303u) << 4);
    const uint32_t m_hi = ((u[2] >> 4) & 0x0f0f0f0fu) | (((u[1] >> 6) & 0x03030303u) << 4);
    h.sc = _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, static_cast<int>(sc_hi), static_cast<int>(sc_lo)));
    const __m128i m8 = _mm_set_epi32(0, 0, static_cast<int>(m_hi), static_cast<int>(m_lo));
    h.pair = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8));
    h.sc_hi = _mm_setzero_si128();
  }
}

// Byte shuffles that spread i16 scales over a chunk's i16 lanes (two bytes per lane).
inline __m128i word_index(int w) { return _mm_set1_epi16(static_cast<short>((2 * w + 1) << 8 | 2 * w)); }

// The scale of every i16 lane (a pair of weights) of chunk c.
template <TensorType T>
inline VI scales(const Head& h, int c) {
#if CHORUS_VNNI
  if constexpr (T == TensorType::q6_k) {  // lanes of 128 bits hold sixteen-weight groups 4c .. 4c + 3
    const __m512i src = _mm512_broadcast_i32x4(c < 2 ? h.sc : h.sc_hi);
    const int w = (4 * c) % 8;
    const __m512i idx = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_set_m128i(word_index(w + 1), word_index(w))),
        _mm256_set_m128i(word_index(w + 3), word_index(w + 2)), 1);
    return _mm512_shuffle_epi8(src, idx);
  } else {  // lower half group 2c, upper half group 2c + 1
    const __m512i src = _mm512_broadcast_i32x4(h.sc);
    const __m512i idx = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_broadcastsi128_si256(word_index(2 * c))),
                                           _mm256_broadcastsi128_si256(word_index(2 * c + 1)), 1);
    return _mm512_shuffle_epi8(src, idx);
  }
#else
  if constexpr (T == TensorType::q6_k) {  // lower 128 bits group 2c of 16, upper 2c + 1
    const __m256i src = _mm256_broadcastsi128_si256(c < 4 ? h.sc : h.sc_hi);
    const int w = (2 * c) % 8;
    return _mm256_shuffle_epi8(src, _mm256_set_m128i(word_index(w + 1), word_index(w)));
  } else {
    return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(h.sc), _mm256_broadcastsi128_si256(word_index(c)));
  }
#endif
}

// The unsigned quants of chunk c of super-block b.
template <TensorType T>
inline VI weights(const uint8_t* b, int c) {
#if CHORUS_VNNI
  if constexpr (T == TensorType::q6_k) {
    const int h = c / 2, s = 4 * (c % 2);  // ql bytes 64h .. 64h + 63, low (c even) or high nibbles
    const __m512i lo = nibbles(_mm512_srli_epi16(_mm512_loadu_si512(b + 64 * h), static_cast<unsigned>(s)));
    const __m512i qh = shift_upper(_mm512_srli_epi16(both_halves(b + 128 + 32 * h), static_cast<unsigned>(s)), 2);
    return _mm512_or_si512(lo, _mm512_slli_epi16(_mm512_and_si512(qh, _mm512_set1_epi8(3)), 4));
  } else {
    const int qs = T == TensorType::q5_k ? 48 : 16;
    const __m512i q = nibbles(shift_upper(both_halves(b + qs + 32 * c), 4));
    if constexpr (T == TensorType::q4_k) return q;
    const __m512i qh = shift_upper(_mm512_srli_epi16(both_halves(b + 16), static_cast<unsigned>(2 * c)), 1);
    return _mm512_or_si512(q, _mm512_slli_epi16(_mm512_and_si512(qh, _mm512_set1_epi8(1)), 4));
  }
#else
  if constexpr (T == TensorType::q6_k) {
    const int h = c / 4, k = c % 4;
    const __m256i ql = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 64 * h + 32 * (k & 1)));
    const __m256i lo = nibbles(k < 2 ? ql : _mm256_srli_epi16(ql, 4));
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 128 + 32 * h));
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * k), _mm256_set1_epi8(3));
    return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
  } else {
    const int qs = T == TensorType::q5_k ? 48 : 16;
    const __m256i q8 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + qs + 32 * (c / 2)));
    const __m256i q = nibbles((c & 1) ? _mm256_srli_epi16(q8, 4) : q8);
    if constexpr (T == TensorType::q4_k) return q;
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16));
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qh, c), _mm256_set1_epi8(1));
    return _mm256_or_si256(q, _mm256_slli_epi16(hi, 4));
  }
#endif
}

constexpr int block_bytes(TensorType T) {
  return T == TensorType::q4_k ? chorus::kquant::kQ4KBytes
                               : T == TensorType::q5_k ? chorus::kquant::kQ5KBytes : chorus::kquant::kQ6KBytes;
}

// R rows from r, NT tokens from t0.
template <TensorType T, int R, int NT>
void tile(const chorus::GemmArgs& a, int64_t r, int64_t t0) {
  constexpr int kBytes = block_bytes(T);
  const int64_t nsb = a.n_cols / chorus::kQ8KBlock;
  const uint8_t* rows[R];
  for (int i = 0; i < R; ++i) rows[i] = a.w + (r + i) * a.w_row_bytes;
  const chorus::BlockQ8K* xs[NT];
  for (int t = 0; t < NT; ++t) xs[t] = a.xk + (t0 + t) * nsb;
  __m256 acc[R][NT];
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < NT; ++t) acc[i][t] = _mm256_setzero_ps();

  for (int64_t sb = 0; sb < nsb; ++sb) {
    Head h[R];
    for (int i = 0; i < R; ++i) {
      const uint8_t* ahead = rows[i] + 4 * R * a.w_row_bytes + sb * kBytes;
      for (int line = 0; line < kBytes; line += 64) _mm_prefetch(reinterpret_cast<const char*>(ahead + line), _MM_HINT_T0);
      head<T>(rows[i] + sb * kBytes, h[i]);
    }
    VI isum[R][NT];
    for (int i = 0; i < R; ++i)
      for (int t = 0; t < NT; ++t) isum[i][t] = zero();
    for (int c = 0; c < kChunks; ++c) {
      VI w[R], s[R];
      for (int i = 0; i < R; ++i) {
        w[i] = weights<T>(rows[i] + sb * kBytes, c);
        s[i] = scales<T>(h[i], c);
      }
      for (int t = 0; t < NT; ++t) {
        const VI x = load_x(xs[t][sb].q + c * kChunk);
        for (int i = 0; i < R; ++i) isum[i][t] = madd_acc(isum[i][t], w[i], x, s[i]);
      }
    }
    for (int t = 0; t < NT; ++t) {
      const chorus::BlockQ8K& x = xs[t][sb];
      const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.bsums));
      for (int i = 0; i < R; ++i) {
        const __m256i other = _mm256_madd_epi16(h[i].pair, bsums);  // mins (Q4_K, Q5_K), offsets (Q6_K)
        __m256i sum = fold(isum[i][t]);
        if constexpr (T == TensorType::q6_k) sum = _mm256_sub_epi32(sum, _mm256_slli_epi32(other, 5));
        acc[i][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_set1_ps(h[i].d * x.d), acc[i][t]);
        if constexpr (T != TensorType::q6_k)
          acc[i][t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(other), _mm256_set1_ps(h[i].dmin * x.d), acc[i][t]);
      }
    }
  }
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < NT; ++t) a.y[(t0 + t) * a.y_stride + r + i] = hsum8(acc[i][t]);
}

// The tiles of this file, for sweep_tiles().
template <TensorType T>
struct Tiles {
  template <int R, int NT>
  static void run(const chorus::GemmArgs& a, int64_t r, int64_t t0) {
    tile<T, R, NT>(a, r, t0);
  }
};

}  // namespace kq

inline void fill_kquant_gemms(chorus::CpuKernels& k) {
  using chorus::TensorType;
  k.gemm[static_cast<int>(TensorType::q4_k)] = sweep_tiles<kq::Tiles<TensorType::q4_k>>;
  k.gemm[static_cast<int>(TensorType::q5_k)] = sweep_tiles<kq::Tiles<TensorType::q5_k>>;
  k.gemm[static_cast<int>(TensorType::q6_k)] = sweep_tiles<kq::Tiles<TensorType::q6_k>>;
}

}  // namespace
