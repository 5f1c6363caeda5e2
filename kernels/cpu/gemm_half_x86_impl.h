// F16 and BF16 weight rows against f32 activations, for x86: the weights are widened to f32 in
// registers (F16C / AVX-512F conversions, a shift for BF16) and multiplied with FMA; nothing is
// dequantized to memory. Included by kernels_avx2.cpp and kernels_avx512.cpp after
// gemm_x86_impl.h; CHORUS_VNNI selects 512-bit registers. Tiles: R rows x NT tokens, so each
// weight vector is converted once per NT tokens.
#pragma once

#include <immintrin.h>

#include "kernels/cpu/cpu_kernels.h"

namespace {  // each instruction set's translation unit gets its own copy
namespace half {

using chorus::TensorType;

#if CHORUS_VNNI
constexpr int kLanes = 16;
using VF = __m512;
template <TensorType T>
inline VF load_w(const uint8_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  if constexpr (T == TensorType::f16)
    return _mm512_cvtph_ps(h);
  else
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
inline VF load_x(const float* p) {
  return _mm512_loadu_ps(p);
}
inline VF fma(VF a, VF b, VF c) {
  return _mm512_fmadd_ps(a, b, c);
}
inline VF zero() {
  return _mm512_setzero_ps();
}
inline float hsum(VF v) {
  return hsum8(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
}
#else
constexpr int kLanes = 8;
using VF = __m256;
template <TensorType T>
inline VF load_w(const uint8_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if constexpr (T == TensorType::f16)
    return _mm256_cvtph_ps(h);
  else
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline VF load_x(const float* p) {
  return _mm256_loadu_ps(p);
}
inline VF fma(VF a, VF b, VF c) {
  return _mm256_fmadd_ps(a, b, c);
}
inline VF zero() {
  return _mm256_setzero_ps();
}
inline float hsum(VF v) {
  return hsum8(v);
}
#endif

// R rows from r, NT tokens from t0. Columns past the last full vector one at a time.
template <TensorType T, int R, int NT>
void tile(const chorus::GemmArgs& a, int64_t r, int64_t t0) {
  const int64_t K = a.n_cols, kv = K / kLanes * kLanes;
  const uint8_t* rows[R];
  for (int i = 0; i < R; ++i) rows[i] = a.w + (r + i) * a.w_row_bytes;
  const float* xs[NT];
  for (int t = 0; t < NT; ++t) xs[t] = a.xf + (t0 + t) * K;
  VF acc[R][NT];
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < NT; ++t) acc[i][t] = zero();
  for (int64_t k = 0; k < kv; k += kLanes) {
    VF w[R];
    for (int i = 0; i < R; ++i) {
      _mm_prefetch(reinterpret_cast<const char*>(rows[i] + 4 * R * a.w_row_bytes + 2 * k), _MM_HINT_T0);
      w[i] = load_w<T>(rows[i] + 2 * k);
    }
    for (int t = 0; t < NT; ++t) {
      const VF x = load_x(xs[t] + k);
      for (int i = 0; i < R; ++i) acc[i][t] = fma(w[i], x, acc[i][t]);
    }
  }
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < NT; ++t) {
      float sum = hsum(acc[i][t]);
      for (int64_t k = kv; k < K; ++k) {
        uint16_t h;
        std::memcpy(&h, rows[i] + 2 * k, 2);
        const float wk = T == TensorType::f16 ? _cvtsh_ss(h) : chorus::bf16_to_f32(h);
        sum += wk * xs[t][k];
      }
      a.y[(t0 + t) * a.y_stride + r + i] = sum;
    }
}

// The tiles of this file, for sweep_tiles().
template <TensorType T>
struct Tiles {
  template <int R, int NT>
  static void run(const chorus::GemmArgs& a, int64_t r, int64_t t0) {
    tile<T, R, NT>(a, r, t0);
  }
};

}  // namespace half

inline void fill_half_gemms(chorus::CpuKernels& k) {
  using chorus::TensorType;
  k.gemm[static_cast<int>(TensorType::f16)] = sweep_tiles<half::Tiles<TensorType::f16>>;
  k.gemm[static_cast<int>(TensorType::bf16)] = sweep_tiles<half::Tiles<TensorType::bf16>>;
}

}  // namespace
