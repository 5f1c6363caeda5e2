// Generic implementations of the element-wise and attention ops (attention in
// attention_impl.h, included below). This header is included by each ISA's translation unit
// (kernels_scalar.cpp, kernels_avx2.cpp, kernels_avx512.cpp), and its code lies in an anonymous
// namespace, so each gets its own copy compiled for its instruction set (and the linker can
// never mix them up). Plain loops only: no STL templates, which would be shared.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/fp16.h"
#include "kernels/cpu/gelu.h"

#if defined(__F16C__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

// NOLINTBEGIN(google-build-namespaces)
namespace {

void op_rmsnorm(const float* x, const float* w, float* y, int64_t n, float eps) {
  double sum = 0.0;  // double accumulation, as llama.cpp
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  const float scale = 1.0f / std::sqrt(mean + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale * w[i];
}

// cos/sin of each rotation angle for one position (RopeParams), in float and in llama.cpp's
// order of operations, so that angles agree.
void op_rope_cache(float* cs, int n_rot, const chorus::RopeParams& p, float pos) {
  float theta = pos;
  for (int i = 0; i < n_rot / 2; ++i) {
    const float extrapolated = p.freq_factors ? theta / p.freq_factors[i] : theta;
    float t = p.freq_scale * extrapolated;
    if (p.ext_factor != 0.0f) {  // YaRN: the pair's place between the correction dimensions
      const float width = p.corr_hi - p.corr_lo > 0.001f ? p.corr_hi - p.corr_lo : 0.001f;
      float y = (static_cast<float>(i) - p.corr_lo) / width;
      y = y < 0.0f ? 0.0f : y > 1.0f ? 1.0f : y;
      const float ramp = (1.0f - y) * p.ext_factor;
      t = t * (1.0f - ramp) + extrapolated * ramp;
    }
    cs[2 * i] = std::cos(t) * p.mscale;
    cs[2 * i + 1] = std::sin(t) * p.mscale;
    theta *= p.theta_scale;
  }
}

void op_rope(float* x, int n_rot, const float* cs, bool neox) {
  const int half = n_rot / 2;
  for (int i = 0; i < half; ++i) {
    const float c = cs[2 * i], s = cs[2 * i + 1];
    const int a = neox ? i : 2 * i;
    const int b = neox ? i + half : 2 * i + 1;
    const float x0 = x[a], x1 = x[b];
    // The order of llama.cpp's rope (compiled with contraction): one product rounded, one fused.
    x[a] = std::fma(x0, c, -(x1 * s));
    x[b] = std::fma(x0, s, x1 * c);
  }
}

inline float exp_approx(float x);
void op_swiglu(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + exp_approx(-gate[i])) * up[i];
}

// out = gelu(gate) * up, gelu from llama.cpp's f16 table (kernels/cpu/gelu.h).
void op_geglu(const float* gate, const float* up, float* out, int64_t n) {
  const uint16_t* table = chorus::gelu_f16_table();
  for (int64_t i = 0; i < n; ++i) {
    const float x = gate[i];
    if (x <= -10.0f)
      out[i] = 0.0f;
    else if (x >= 10.0f)
      out[i] = x * up[i];
    else
      out[i] = chorus::f16_to_f32(table[chorus::f32_to_f16(x)]) * up[i];
  }
}

void op_softmax(float* x, int64_t n) {
  float mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = 1.0f / sum;
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void op_add(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

// --- Arithmetic order shared with llama.cpp's CPU backend ------------------------------------
// chorus computes attention and SwiGLU in the same order of float operations as llama.cpp's
// AVX-512 build (ggml-cpu), so that logits agree to the bit where the inputs do: int8
// activations amplify any last-bit difference into a different rounding, and from there into
// visibly different logits. The helpers below spell that order out in portable code (explicit
// fma, explicit lane arrays), so every kernel table computes identical values.

// 2^e as a float, for integer e in [-126, 127].
inline float pow2i(int e) {
  return std::bit_cast<float>(static_cast<uint32_t>(e + 127) << 23);
}

// exp(x) as ggml's vectorized expf: Cody-Waite range reduction n = round(x / ln 2), a degree-5
// polynomial in the remainder b, scaled by 2^n (exactly, one rounding, as vscalefps). Within
// 1.5 ulp of expf. Inputs whose |n| > 192 saturate to 0 or infinity. Branch-free, so loops
// over it vectorize.
inline __attribute__((always_inline)) float exp_approx(float x) {
  const float shift = 0x1.8p23f;
  const float z = std::fma(x, 0x1.715476p+0f, shift);
  float n = z - shift;
  const bool saturate = !(std::fabs(n) <= 192.0f);  // also NaN and -inf
  const float sat = n > 0 ? INFINITY : 0.0f;
  n = saturate ? 0.0f : n;
  const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
  const float u = b * b;
  const float j = std::fma(
      std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
      u, std::fma(0x1.ffffecp-1f, b, 1.0f));
  // j * 2^n with a single rounding: split the power so each factor is a normal float and
  // only the last product can round.
  const int ni = static_cast<int>(n);
  const int e1 = ni > 127 ? 127 : (ni < -126 ? ni + 100 : ni);
  const int e2 = ni > 127 ? ni - 127 : (ni < -126 ? -100 : 0);
  const float r = j * pow2i(e1) * pow2i(e2);
  return saturate ? sat : r;
}

// Sum of 16 lanes in the order of GCC's _mm512_reduce_add_ps: halves, quarters, then pairs.
inline float reduce16(const float* v) {
  float t8[8], t4[4];
  for (int i = 0; i < 8; ++i) t8[i] = v[8 + i] + v[i];
  for (int i = 0; i < 4; ++i) t4[i] = t8[4 + i] + t8[i];
  const float a = t4[0] + t4[2], b = t4[1] + t4[3];
  return a + b;
}

}  // namespace
// NOLINTEND(google-build-namespaces)

#include "kernels/cpu/attention_impl.h"

// NOLINTBEGIN(google-build-namespaces)
namespace {

// Matches llama.cpp's activation quantization (q8_0 / q8_1) bit for bit, so that logits agree:
// q = round-half-even(x * 127 / amax); the scale d = amax / 127 and s = d * sum(q) are kept
// at fp16 precision (llama.cpp stores them as fp16; chorus::finish_q8).
void quantize_q8_generic(const float* x, chorus::BlockQ8* out, int64_t n) {
  for (int64_t b = 0; b < n / chorus::kQ8Block; ++b) {
    const float* xb = x + b * chorus::kQ8Block;
    float amax = 0.0f;
    for (int i = 0; i < chorus::kQ8Block; ++i) {
      const float v = std::fabs(xb[i]);
      amax = v > amax ? v : amax;
    }
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    for (int i = 0; i < chorus::kQ8Block; ++i) out[b].q[i] = static_cast<int8_t>(std::nearbyint(xb[i] * id));
    int half[2] = {0, 0};
    for (int h = 0; h < 2; ++h)
      for (int i = 16 * h; i < 16 * h + 16; ++i) half[h] += out[b].q[i];
    chorus::finish_q8(out[b], d, half[0], half[1]);
  }
}

// --- Gated DeltaNet -----------------------------------------------------------------------------
// In the order of ggml's CPU backend (AVX-512 build), so that a hybrid model's recurrent state
// rounds as llama.cpp's does: dot products as ggml_vec_dot_f32 (4 chains of 16 lanes over steps
// of 64, folded (0+2)+(1+3), lanes reduced as _mm512_reduce_add_ps, the rest one fma at a
// time); the state decayed first, then S k, then the rank-1 update with fma.
inline float dot_ggml(const float* a, const float* b, int n) {
  const int np = n & ~63;
  float s = 0.0f;
  if (np > 0) {
    float acc[4][16] = {};
    for (int i = 0; i < np; i += 64)
      for (int r = 0; r < 4; ++r)
        for (int l = 0; l < 16; ++l) acc[r][l] = std::fma(a[i + 16 * r + l], b[i + 16 * r + l], acc[r][l]);
    for (int l = 0; l < 16; ++l) {
      acc[0][l] += acc[2][l];
      acc[1][l] += acc[3][l];
    }
    for (int l = 0; l < 16; ++l) acc[0][l] += acc[1][l];
    s = reduce16(acc[0]);
  }
  for (int i = np; i < n; ++i) s = std::fma(a[i], b[i], s);
  return s;
}

void op_gdn_step(float* S, const float* q, const float* k, const float* v, float g, float beta, float* out,
                 int dk, int dv) {
  const float alpha = std::exp(g);
  for (int i = 0; i < dv; ++i) {
    float* s = S + static_cast<size_t>(i) * dk;
    for (int j = 0; j < dk; ++j) s[j] *= alpha;
    const float delta = ((v ? v[i] : 0.0f) - dot_ggml(s, k, dk)) * beta;
    for (int j = 0; j < dk; ++j) s[j] = std::fma(k[j], delta, s[j]);
    if (out) out[i] = dot_ggml(s, q, dk);
  }
}

void op_gdn_mul_right(const float* X, const float* A, float* C, int m, int dk, bool accumulate) {
  for (int i = 0; i < m; ++i) {
    float* c = C + static_cast<size_t>(i) * dk;
    if (!accumulate)
      for (int j = 0; j < dk; ++j) c[j] = 0.0f;
    const float* x = X + static_cast<size_t>(i) * dk;
    for (int l = 0; l < dk; ++l) {
      const float xl = x[l];
      const float* a = A + static_cast<size_t>(l) * dk;
      for (int j = 0; j < dk; ++j) c[j] = std::fma(xl, a[j], c[j]);
    }
  }
}

void op_gdn_conv(const float* prev, const float* x, int n, const float* w, int C, int K, float* y) {
  for (int t = 0; t < n; ++t) {
    float* yt = y + static_cast<size_t>(t) * C;
    for (int c = 0; c < C; ++c) yt[c] = 0.0f;
    for (int j = 0; j < K; ++j) {
      const int z = t + j;  // index into prev ++ x
      const float* in =
          z < K - 1 ? prev + static_cast<size_t>(z) * C : x + static_cast<size_t>(z - (K - 1)) * C;
      const float* wj = w + static_cast<size_t>(j) * C;
      for (int c = 0; c < C; ++c) yt[c] = std::fma(wj[c], in[c], yt[c]);
    }
    for (int c = 0; c < C; ++c) yt[c] = yt[c] / (1.0f + exp_approx(-yt[c]));
  }
}

void op_gdn_query_dense(const float* A, const float* B, float* y, float* c, float* tmp, int dk) {
  for (int r = 0; r < dk; ++r) {
    if (A) tmp[r] = dot_ggml(A + static_cast<size_t>(r) * dk, y, dk);
    c[r] += dot_ggml(B + static_cast<size_t>(r) * dk, y, dk);
  }
  if (A)
    for (int r = 0; r < dk; ++r) y[r] = tmp[r];
}

void fill_common_ops(chorus::CpuKernels& k) {
  k.quantize_q8 = quantize_q8_generic;
  k.rmsnorm = op_rmsnorm;
  k.rope_cache = op_rope_cache;
  k.rope = op_rope;
  k.swiglu = op_swiglu;
  k.geglu = op_geglu;
  k.softmax = op_softmax;
  k.attention = op_attention;
  k.add = op_add;
  k.dot_f32 = dot_ggml;
  k.gdn_step = op_gdn_step;
  k.gdn_mul_right = op_gdn_mul_right;
  k.gdn_query_dense = op_gdn_query_dense;
  k.gdn_conv = op_gdn_conv;
}

}  // namespace
// NOLINTEND(google-build-namespaces)
