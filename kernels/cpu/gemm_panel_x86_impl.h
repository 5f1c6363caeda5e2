// Matrix kernels on weight panels (kernels/cpu/panel.h has the layout) for x86: Q4_0, Q4_1, Q8_0, Q5_0, Q5_1,
// Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS against int8 activations (BlockQ8). One lane is one weight
// row:
//   AVX512-VNNI  a panel's 16 rows in one pass: vpdpbusd of a 64-byte step vector (4 weights of
//                each row) with 4 activations broadcast, 8 per k-block
//   AVX2         two passes of 8 rows: maddubs + madd (+ add) on the 32-byte half of each step
// Per lane, the arithmetic is exactly the scalar reference's (gemm_group_scalar): the same
// exact integer sums, then the same fmas in the same order, so every table's results are
// bit-identical. Tiles: a panel x NT tokens, so a k-block is unpacked once per NT tokens; no
// horizontal sums, one store per panel and token. Included by kernels_avx2.cpp and
// kernels_avx512.cpp after gemm_x86_impl.h; CHORUS_VNNI selects the width.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/panel.h"

namespace {  // each instruction set's translation unit gets its own copy
namespace pk {

using chorus::TensorType;

#if CHORUS_VNNI
constexpr int kLanes = 16;  // rows per pass
constexpr int kPasses = 1;
constexpr int kMaxTokens = 8;
using VI = __m512i;
using VF = __m512;
inline VI load_q(const uint8_t* p) {
  return _mm512_loadu_si512(p);
}
inline VI low_nibbles(VI v) {
  return _mm512_and_si512(v, _mm512_set1_epi8(0x0f));
}
inline VI high_nibbles(VI v) {
  return _mm512_and_si512(_mm512_srli_epi16(v, 4), _mm512_set1_epi8(0x0f));
}
// +16 where the step's fifth bits (one per byte, a u64 in the panel) are set.
inline VI add_fifth(VI v, const uint8_t* bits) {
  uint64_t m;
  std::memcpy(&m, bits, 8);
  return _mm512_mask_add_epi8(v, static_cast<__mmask64>(m), v, _mm512_set1_epi8(16));
}
inline VI shr16(VI v, int n) {
  return _mm512_srli_epi16(v, static_cast<unsigned>(n));
}
inline VI and8(VI v, int m) {
  return _mm512_and_si512(v, _mm512_set1_epi8(static_cast<char>(m)));
}
inline VI or_shl4(VI v, VI hi) {
  return _mm512_or_si512(v, _mm512_slli_epi16(hi, 4));
}
inline VI zero_i() {
  return _mm512_setzero_si512();
}
// acc += per lane, sum over 4 bytes of u8(w) * s8(x4), x4 the same 4 activations in every lane.
// The 4 activations come in through the instruction's embedded broadcast ({1to16}): GCC 12 emits
// a separate vpbroadcastd for _mm512_set1_epi32, which takes a vector port; without it the same
// dot steps retire about 1.5x as fast (tools/bench/isa_peak.cpp). The activations' block goes
// in as a base register and step j's offset 4 j as an immediate, not as an "m" operand: with
// one, GCC 12 stored every accumulator of a tile to the stack on each k-block (eight stores per
// 64 dot steps; a "memory" clobber was worse). The activations are written before a product
// starts and only read during it, so the asm needs no ordering against stores: products are
// called through a GemmFn pointer after the quantization. (Inlined beside the code that writes
// them, it would need the "m" operand back.)
template <int J>
inline VI dot4_at(VI acc, VI w, const int8_t* q) {
  __asm__("vpdpbusd %c3(%2)%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "r"(q), "i"(4 * J));
  return acc;
}
inline VI sub_i(VI v, int32_t c) {
  return _mm512_sub_epi32(v, _mm512_set1_epi32(c));
}
// IQ4: the 4-bit indices through the table, as u8 (kIq4 + 128): vpdpbusd takes unsigned
// weights, and the +128 comes off through the activations' sum (kIq4Off).
constexpr int kIq4Off = 128;
inline VI iq4_lookup(VI idx) {
  const __m128i t = _mm_setr_epi8(1, 24, 45, 63, 79, 93, 106, 118, (char)129, (char)141, (char)153, (char)166,
                                  (char)181, (char)197, (char)217, (char)241);
  return _mm512_shuffle_epi8(_mm512_broadcast_i32x4(t), idx);
}
// acc += sum over 4 of w * x4 for the IQ4 weights iq4_lookup gives (unsigned here).
template <int J>
inline VI dot4_iq4_at(VI acc, VI w, const int8_t* q) {
  return dot4_at<J>(acc, w, q);
}
// Q8_0: the stored u = q + 128 as they are (unsigned, for vpdpbusd); the 128 comes off through
// the activations' sum.
constexpr int kQ8Off = 128;
inline VI q8_weights(VI u) {
  return u;
}
inline VF cvt(VI v) {
  return _mm512_cvtepi32_ps(v);
}
inline VF f16s(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline VF u8s(const uint8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
inline VF i8s(const uint8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
inline VF mul(VF a, VF b) {
  return _mm512_mul_ps(a, b);
}
inline VF neg(VF a) {
  return _mm512_xor_ps(a, _mm512_set1_ps(-0.0f));
}
inline VF fma(VF a, VF b, VF c) {
  return _mm512_fmadd_ps(a, b, c);
}
inline VF set1(float f) {
  return _mm512_set1_ps(f);
}
inline VF zero_f() {
  return _mm512_setzero_ps();
}
inline void store(float* y, VF v, int n) {
  _mm512_mask_storeu_ps(y, static_cast<__mmask16>((1u << n) - 1), v);
}
#else
constexpr int kLanes = 8;
constexpr int kPasses = 2;  // rows 0..7, then 8..15: the lower, then the upper half of each record
constexpr int kMaxTokens = 4;
using VI = __m256i;
using VF = __m256;
inline VI load_q(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
inline VI low_nibbles(VI v) {
  return _mm256_and_si256(v, _mm256_set1_epi8(0x0f));
}
inline VI high_nibbles(VI v) {
  return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0f));
}
inline VI add_fifth(VI v, const uint8_t* bits) {  // 32 bits -> 32 bytes of 16 or 0
  uint32_t m;
  std::memcpy(&m, bits, 4);
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(m)),
      _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0x0000000000000000));
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
  return _mm256_add_epi8(v, _mm256_and_si256(set, _mm256_set1_epi8(16)));
}
inline VI shr16(VI v, int n) {
  return _mm256_srli_epi16(v, n);
}
inline VI and8(VI v, int m) {
  return _mm256_and_si256(v, _mm256_set1_epi8(static_cast<char>(m)));
}
inline VI or_shl4(VI v, VI hi) {
  return _mm256_or_si256(v, _mm256_slli_epi16(hi, 4));
}
inline VI zero_i() {
  return _mm256_setzero_si256();
}
template <int J>
inline VI dot4_at(VI acc, VI w, const int8_t* q) {  // u <= 63: maddubs' i16 pairs cannot saturate
  int32_t v;
  std::memcpy(&v, q + 4 * J, 4);
  const __m256i p = _mm256_maddubs_epi16(w, _mm256_set1_epi32(v));
  return _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
}
inline VI sub_i(VI v, int32_t c) {
  return _mm256_sub_epi32(v, _mm256_set1_epi32(c));
}
// IQ4: the 4-bit indices through the table as signed values, and a dot that moves their signs
// onto the activations (maddubs' i16 pairs cannot saturate: |w|, |x| <= 127), so no offset.
constexpr int kIq4Off = 0;
inline VI iq4_lookup(VI idx) {
  const __m128i t = _mm_setr_epi8(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);
  return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(t), idx);
}
template <int J>
inline VI dot4_iq4_at(VI acc, VI w, const int8_t* q) {
  int32_t v;
  std::memcpy(&v, q + 4 * J, 4);
  const __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(_mm256_set1_epi32(v), w));
  return _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
}
// Q8_0: the stored u = q + 128 back to the signed q, for dot4_iq4_at's sign trick (|q| <= 128:
// maddubs' i16 pairs reach at most 2 * 128 * 127, so they cannot saturate); no offset.
constexpr int kQ8Off = 0;
inline VI q8_weights(VI u) {
  return _mm256_xor_si256(u, _mm256_set1_epi8(static_cast<char>(0x80)));
}
inline VF cvt(VI v) {
  return _mm256_cvtepi32_ps(v);
}
inline VF f16s(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline VF u8s(const uint8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
inline VF i8s(const uint8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
inline VF mul(VF a, VF b) {
  return _mm256_mul_ps(a, b);
}
inline VF neg(VF a) {
  return _mm256_xor_ps(a, _mm256_set1_ps(-0.0f));
}
inline VF fma(VF a, VF b, VF c) {
  return _mm256_fmadd_ps(a, b, c);
}
inline VF set1(float f) {
  return _mm256_set1_ps(f);
}
inline VF zero_f() {
  return _mm256_setzero_ps();
}
inline void store(float* y, VF v, int n) {
  if (n == kLanes) {
    _mm256_storeu_ps(y, v);
    return;
  }
  float lanes[kLanes];
  _mm256_storeu_ps(lanes, v);
  std::memcpy(y, lanes, sizeof(float) * static_cast<size_t>(n));
}
#endif

// i += steps J0 .. J0 + sizeof...(J) - 1 of a k-block: 4 weights of each lane (v[j]) times
// activations 4 j .. 4 j + 3 of the block q, unsigned (dot4_at) or signed (dot4_iq4_at) weights.
template <bool Signed, int J0, int... J>
inline VI dot_steps(VI i, const VI* v, const int8_t* q, std::integer_sequence<int, J...>) {
  ((i = Signed ? dot4_iq4_at<J0 + J>(i, v[J0 + J], q) : dot4_at<J0 + J>(i, v[J0 + J], q)), ...);
  return i;
}

// How far ahead in a panel to prefetch: decode streams panels from memory, about 14 GB/s per
// core here, so a few KB must be in flight; 16 KB measured best of 1, 2, 4, 8 and 16 KB on a
// 1B-shaped Q4_K_M file (within the machine's noise, 5-10 %).
constexpr size_t kPrefetch = 16384;  // bytes

// Rows `pass * kLanes ..` of panel `panel`, tokens t0 .. t0 + NT: `rows` of them are real rows.
template <TensorType T, int NT>
void tile(const chorus::GemmArgs& a, int64_t panel, int pass, int64_t t0, int rows) {
  constexpr bool kq = chorus::panel_kquant(T);
  constexpr bool q6 = T == TensorType::q6_k, q3 = T == TensorType::q3_k, q2 = T == TensorType::q2_k;
  constexpr bool halves = q6 || q3 || q2;  // a scale (Q2_K: and a minimum) per 16 weights
  constexpr bool iq4 = T == TensorType::iq4_nl || T == TensorType::iq4_xs;
  constexpr bool q8 = T == TensorType::q8_0;
  constexpr bool signed_dot = iq4 || q8;  // dot4_iq4_at: unsigned weights on VNNI, signed on AVX2
  constexpr int bits = chorus::panel_quant_bits(T);
  constexpr bool min =
      T == TensorType::q4_1 || T == TensorType::q5_1 || T == TensorType::q4_k || T == TensorType::q5_k || q2;
  // The scalar reference's off for IQ4 is 128 (kernels/cpu/groups.h); the sums are the same
  // integers whether the offset comes off here (VNNI) or never went on (AVX2).
  constexpr int off = T == TensorType::q4_0   ? 8
                      : T == TensorType::q5_0 ? 16
                      : q6                    ? 32
                      : q3                    ? 4
                      : iq4                   ? kIq4Off
                      : q8                    ? kQ8Off
                                              : 0;
  constexpr size_t kScaleBytes = chorus::panel_scale_bytes(T), kQuantBytes = chorus::panel_quant_bytes(T);
  // This pass's share of each record: bytes of the 64-byte step vectors, f16 and u8 scale rows.
  const int qo = 64 / kPasses * pass, ho = 2 * kLanes * pass, bo = kLanes * pass;
  const int64_t nkb = a.n_cols / 32;
  const chorus::BlockQ8* xs[NT];
  for (int t = 0; t < NT; ++t) xs[t] = a.xq + (t0 + t) * nkb;
  VF acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = zero_f();
  const uint8_t* p = a.panels + static_cast<size_t>(panel) * a.panel_bytes;
  VF d = zero_f(), dmin = zero_f();
  const uint8_t* head = p;
  for (int64_t b = 0; b < nkb; ++b) {
    VF dw0, dw1 = zero_f(), mo = zero_f(), mo1 = zero_f();
    if constexpr (kq) {
      const int g = static_cast<int>(b % 8);
      if (g == 0) {
        head = p;
        d = f16s(head + ho);
        if constexpr (min) dmin = f16s(head + 32 + ho);
        p += kScaleBytes;
      }
      if constexpr (q6 || q3) {
        dw0 = mul(d, i8s(head + 32 + 16 * (2 * g) + bo));
        dw1 = mul(d, i8s(head + 32 + 16 * (2 * g + 1) + bo));
      } else if constexpr (q2) {
        dw0 = mul(d, u8s(head + 64 + 16 * (2 * g) + bo));
        dw1 = mul(d, u8s(head + 64 + 16 * (2 * g + 1) + bo));
        mo = neg(mul(dmin, u8s(head + 320 + 16 * (2 * g) + bo)));
        mo1 = neg(mul(dmin, u8s(head + 320 + 16 * (2 * g + 1) + bo)));
      } else if constexpr (iq4) {  // IQ4_XS: d times the group's signed scale
        dw0 = mul(d, i8s(head + 32 + 16 * g + bo));
      } else {
        dw0 = mul(d, u8s(head + 64 + 16 * g + bo));
        mo = neg(mul(dmin, u8s(head + 192 + 16 * g + bo)));
      }
    } else {
      dw0 = f16s(p + ho);
      if constexpr (min) mo = f16s(p + 32 + ho);
      p += kScaleBytes;
    }
    // Panels stream from memory in one pass per thread: ask for every line kPrefetch ahead.
    for (size_t line = 0; line < kQuantBytes; line += 64)
      _mm_prefetch(reinterpret_cast<const char*>(p + kPrefetch + line), _MM_HINT_T0);
    VI v[8];
    if constexpr (q8) {
      for (int j = 0; j < 8; ++j) v[j] = q8_weights(load_q(p + 64 * j + qo));
    } else {
      for (int m = 0; m < 4; ++m) {
        const VI n = load_q(p + 64 * m + qo);
        v[m] = low_nibbles(n);
        v[m + 4] = high_nibbles(n);
      }
    }
    if constexpr (bits == 5)
      for (int j = 0; j < 8; ++j) v[j] = add_fifth(v[j], p + 256 + 8 * j + 4 * pass);
    if constexpr (iq4)
      for (int j = 0; j < 8; ++j) v[j] = iq4_lookup(v[j]);
    if constexpr (bits == 6)
      for (int m = 0; m < 2; ++m) {
        const VI h = load_q(p + 256 + 64 * m + qo);
        for (int s = 0; s < 4; ++s) v[m + 2 * s] = or_shl4(v[m + 2 * s], and8(shr16(h, 2 * s), 3));
      }
    p += kQuantBytes;
    for (int t = 0; t < NT; ++t) {
      const chorus::BlockQ8& x = xs[t][b];
      const int32_t qsum = x.qsum[0] + x.qsum[1];
      if constexpr (halves) {
        VI i0 = zero_i(), i1 = zero_i();
        i0 = dot_steps<false, 0>(i0, v, x.q, std::make_integer_sequence<int, 4>{});
        i1 = dot_steps<false, 4>(i1, v, x.q, std::make_integer_sequence<int, 4>{});
        acc[t] = fma(cvt(sub_i(i0, off * x.qsum[0])), mul(dw0, set1(x.d)), acc[t]);
        if constexpr (q2) acc[t] = fma(mo, set1(x.dq[0]), acc[t]);
        acc[t] = fma(cvt(sub_i(i1, off * x.qsum[1])), mul(dw1, set1(x.d)), acc[t]);
        if constexpr (q2) acc[t] = fma(mo1, set1(x.dq[1]), acc[t]);
      } else {
        VI i = zero_i();
        i = dot_steps<signed_dot, 0>(i, v, x.q, std::make_integer_sequence<int, 8>{});
        if constexpr (off != 0) i = sub_i(i, off * qsum);
        acc[t] = fma(cvt(i), mul(dw0, set1(x.d)), acc[t]);
        if constexpr (min) acc[t] = fma(mo, set1(x.dq[2]), acc[t]);
      }
    }
  }
  const int64_t r = panel * chorus::kPanelRows + pass * kLanes;
  for (int t = 0; t < NT; ++t) store(a.y + (t0 + t) * a.y_stride + r, acc[t], rows);
}

template <TensorType T>
void gemm(const chorus::GemmArgs& a) {
  const int64_t p0 = a.r0 / chorus::kPanelRows, p1 = (a.r1 + chorus::kPanelRows - 1) / chorus::kPanelRows;
  for (int64_t panel = p0; panel < p1; ++panel)
    for (int pass = 0; pass < kPasses; ++pass) {
      const int64_t first = panel * chorus::kPanelRows + pass * kLanes;
      const int rows = static_cast<int>(std::min<int64_t>(kLanes, a.r1 - first));
      if (rows <= 0) break;
      int64_t t = 0;
      for (; t + kMaxTokens <= a.n_tokens; t += kMaxTokens) tile<T, kMaxTokens>(a, panel, pass, t, rows);
      if (kMaxTokens > 4 && t + 4 <= a.n_tokens) {
        tile<T, 4>(a, panel, pass, t, rows);
        t += 4;
      }
      if (t + 2 <= a.n_tokens) {
        tile<T, 2>(a, panel, pass, t, rows);
        t += 2;
      }
      if (t < a.n_tokens) tile<T, 1>(a, panel, pass, t, rows);
    }
}

}  // namespace pk

inline void fill_panel_gemms(chorus::CpuKernels& k) {
  using chorus::TensorType;
  k.gemm_panels[static_cast<int>(TensorType::q4_0)] = pk::gemm<TensorType::q4_0>;
  k.gemm_panels[static_cast<int>(TensorType::q4_1)] = pk::gemm<TensorType::q4_1>;
  k.gemm_panels[static_cast<int>(TensorType::q8_0)] = pk::gemm<TensorType::q8_0>;
  k.gemm_panels[static_cast<int>(TensorType::q5_0)] = pk::gemm<TensorType::q5_0>;
  k.gemm_panels[static_cast<int>(TensorType::q5_1)] = pk::gemm<TensorType::q5_1>;
  k.gemm_panels[static_cast<int>(TensorType::q4_k)] = pk::gemm<TensorType::q4_k>;
  k.gemm_panels[static_cast<int>(TensorType::q5_k)] = pk::gemm<TensorType::q5_k>;
  k.gemm_panels[static_cast<int>(TensorType::q6_k)] = pk::gemm<TensorType::q6_k>;
  k.gemm_panels[static_cast<int>(TensorType::q2_k)] = pk::gemm<TensorType::q2_k>;
  k.gemm_panels[static_cast<int>(TensorType::q3_k)] = pk::gemm<TensorType::q3_k>;
  k.gemm_panels[static_cast<int>(TensorType::iq4_nl)] = pk::gemm<TensorType::iq4_nl>;
  k.gemm_panels[static_cast<int>(TensorType::iq4_xs)] = pk::gemm<TensorType::iq4_xs>;
}

}  // namespace
