// Generic implementations of the element-wise and attention ops. This header is included by
// each ISA's translation unit (kernels_scalar.cpp, kernels_avx2.cpp, kernels_avx512.cpp) inside
// an anonymous namespace, so each gets its own copy compiled for its instruction set (and the
// linker can never mix them up). Plain loops only: no STL templates, which would be shared.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/fp16.h"

// NOLINTBEGIN(google-build-namespaces)
namespace {

void op_rmsnorm(const float* x, const float* w, float* y, int64_t n, float eps) {
  double sum = 0.0;  // double accumulation, as llama.cpp
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  const float scale = 1.0f / std::sqrt(mean + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale * w[i];
}

// cos/sin of each rotation angle for one position: theta_i = freq_scale * pos * theta_scale^i,
// the power taken by repeated multiplication in float (llama.cpp's order, so angles agree).
void op_rope_cache(float* cs, int n_rot, float theta_scale, float freq_scale, float pos) {
  float theta = pos;
  for (int i = 0; i < n_rot / 2; ++i) {
    const float t = freq_scale * theta;
    cs[2 * i] = std::cos(t);
    cs[2 * i + 1] = std::sin(t);
    theta *= theta_scale;
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

float exp_approx(float x);
void op_swiglu(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + exp_approx(-gate[i])) * up[i];
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

// exp(x) as ggml's vectorized expf: Cody-Waite range reduction n = round(x / ln 2), a degree-5
// polynomial in the remainder b, scaled by 2^n. Within 1.5 ulp of expf. Inputs whose |n| > 192
// saturate to 0 or infinity.
float exp_approx(float x) {
  const float shift = 0x1.8p23f;
  const float z = std::fma(x, 0x1.715476p+0f, shift);
  const float n = z - shift;
  if (!(std::fabs(n) <= 192.0f)) return n > 0 ? INFINITY : 0.0f;  // also catches NaN / -inf
  const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
  const float u = b * b;
  const float j = std::fma(std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
                                    std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                           u, std::fma(0x1.ffffecp-1f, b, 1.0f));
  return std::ldexp(j, static_cast<int>(n));
}

// Sum of 16 lanes in the order of GCC's _mm512_reduce_add_ps: halves, quarters, then pairs.
inline float reduce16(const float* v) {
  float t8[8], t4[4];
  for (int i = 0; i < 8; ++i) t8[i] = v[8 + i] + v[i];
  for (int i = 0; i < 4; ++i) t4[i] = t8[4 + i] + t8[i];
  const float a = t4[0] + t4[2], b = t4[1] + t4[3];
  return a + b;
}

// Dot product in the order of ggml's f32 vec_dot on AVX-512: 4 accumulators of 16 lanes over
// steps of 64, folded pairwise, reduced, then the remaining elements one by one.
inline float dot_ordered(const float* x, const float* y, int n) {
  float acc[4][16] = {};
  const int np = n & ~63;
  for (int i = 0; i < np; i += 64)
    for (int j = 0; j < 4; ++j)
      for (int l = 0; l < 16; ++l) acc[j][l] = std::fma(x[i + 16 * j + l], y[i + 16 * j + l], acc[j][l]);
  for (int l = 0; l < 16; ++l) {
    acc[0][l] += acc[2][l];
    acc[1][l] += acc[3][l];
    acc[0][l] += acc[1][l];
  }
  float sum = reduce16(acc[0]);
  for (int i = np; i < n; ++i) sum = std::fma(x[i], y[i], sum);
  return sum;
}

// Softmax attention for one query over positions [0, n_kv) of a paged cache: scores, max,
// exponentials summed 16 at a time in double, probabilities normalized, then the values summed
// with fma per lane and reduced. No KV copy; scores live in a.scratch.
void op_attention(const chorus::AttentionArgs& a) {
  constexpr int kMaxHeadDim = 512;
  const int d = a.head_dim;
  const int64_t n = a.n_kv;
  float* p = a.scratch;  // [round_up(n_kv, 16)]
  auto key = [&](int64_t j) { return a.k_pages[j / a.page_size] + a.kv_offset + (j % a.page_size) * a.kv_stride; };
  auto val = [&](int64_t j) { return a.v_pages[j / a.page_size] + a.kv_offset + (j % a.page_size) * a.kv_stride; };
  float mx = -INFINITY;
  for (int64_t j = 0; j < n; ++j) {
    p[j] = dot_ordered(a.q, key(j), d) * a.scale;
    mx = p[j] > mx ? p[j] : mx;
  }
  const int64_t n16 = (n + 15) & ~int64_t{15};
  for (int64_t j = n; j < n16; ++j) p[j] = 0.0f;
  double sum = 0.0;
  for (int64_t c = 0; c < n16; c += 16) {
    for (int64_t j = c; j < c + 16 && j < n; ++j) p[j] = exp_approx(p[j] - mx);
    sum += static_cast<double>(reduce16(p + c));
  }
  const auto inv = static_cast<float>(1.0 / sum);
  for (int64_t j = 0; j < n; ++j) p[j] *= inv;
  // Values: out[i] = sum_j p[j] v_j[i]. With several tokens in the step llama.cpp runs this as a
  // tiled GEMM (one 16-lane chain over j); with one token, as ggml's dot product (4 x 16 lanes
  // over steps of 64, folded). Position j feeds lane j % 16 of chain (j / 16) % chains.
  const int chains = a.single_token_batch ? 4 : 1;
  float acc[4][16][kMaxHeadDim];  // [chain][lane][dim]: contiguous over dims, so it vectorizes
  for (int c = 0; c < chains; ++c)
    for (int l = 0; l < 16; ++l)
      for (int i = 0; i < d; ++i) acc[c][l][i] = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    const float* v = val(j);
    const float pj = p[j];
    float* row = acc[(j >> 4) & (chains - 1)][j & 15];
    for (int i = 0; i < d; ++i) row[i] = std::fma(v[i], pj, row[i]);
  }
  for (int i = 0; i < d; ++i) {
    float lanes[16];
    for (int l = 0; l < 16; ++l) {
      lanes[l] = acc[0][l][i];
      if (chains == 4) {
        const float a02 = acc[0][l][i] + acc[2][l][i];
        const float a13 = acc[1][l][i] + acc[3][l][i];
        lanes[l] = a02 + a13;
      }
    }
    a.out[i] = reduce16(lanes);
  }
}

// Matches llama.cpp's activation quantization (q8_0 / q8_1) bit for bit, so that logits agree:
// q = round-half-even(x * 127 / amax); the scale d = amax / 127 and s = d * sum(q) are kept
// at fp16 precision (llama.cpp stores them as fp16).
inline float round_to_f16(float f) { return chorus::f16_to_f32(chorus::f32_to_f16(f)); }

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
    int sum = 0;
    for (int i = 0; i < chorus::kQ8Block; ++i) {
      const int q = static_cast<int>(std::nearbyint(xb[i] * id));
      out[b].q[i] = static_cast<int8_t>(q);
      sum += q;
    }
    out[b].d = round_to_f16(d);
    out[b].s = round_to_f16(d * static_cast<float>(sum));
  }
}

void fill_common_ops(chorus::CpuKernels& k) {
  k.quantize_q8 = quantize_q8_generic;
  k.rmsnorm = op_rmsnorm;
  k.rope_cache = op_rope_cache;
  k.rope = op_rope;
  k.swiglu = op_swiglu;
  k.softmax = op_softmax;
  k.attention = op_attention;
  k.add = op_add;
}

}  // namespace
// NOLINTEND(google-build-namespaces)
