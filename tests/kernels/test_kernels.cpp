// Every CPU kernel on every kernel table this CPU can run, against the scalar reference table,
// and the reference itself against float64 mathematics. Bounds (normalized mean squared error,
// NMSE = sum (got - want)^2 / sum want^2):
//
// except for the matrix products, where one output can cancel to near zero, so each output's
// error is measured against its magnitude M = sum_i |w_i x_i|:
//
//   op                         variant vs scalar     scalar vs float64 math
//   gemm, integer formats      |e| <= 1e-5 M         |e| <= 1e-2 M (int8 activations: <= amax/254
//                              (summation order)     per value; fp16 block scales)
//   gemm, dequantized formats  |e| <= 1e-5 M         |e| <= 1e-5 M
//   rmsnorm, rope, swiglu,     0 (bit-identical: one  1e-10 (exp: 2 ulp; float rounding)
//   softmax, attention         source, written in
//                              llama.cpp's order)
//   quantize_q8                0 (bit-identical)      |x - d q| <= d / 2 per value
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "device/cpu_device.h"
#include "device/cpu_features.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/dequant.h"
#include "kernels/cpu/fp16.h"
#include "kernels/cpu/gdn.h"
#include "kernels/cpu/panel.h"

namespace chorus {
namespace {

double nmse(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return den > 0 ? num / den : num;
}

// The tables this CPU can run, other than the scalar reference.
std::vector<const CpuKernels*> variants() {
  std::vector<const CpuKernels*> v;
  const CpuFeatures& f = cpu_features();
  if (f.avx2 && f.fma && f.f16c && cpu_kernels_avx2()) v.push_back(cpu_kernels_avx2());
  if (f.avx512f && f.avx512bw && f.avx512vl && f.avx512vnni && cpu_kernels_avx512())
    v.push_back(cpu_kernels_avx512());
  return v;
}

std::vector<float> random_floats(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Random weight rows of `type` with finite, moderate scales.
std::vector<uint8_t> random_rows(TensorType type, int64_t rows, int64_t cols, std::mt19937& rng) {
  const auto& info = tensor_type_info(type);
  const size_t row_bytes = tensor_row_bytes(info, static_cast<uint64_t>(cols));
  std::vector<uint8_t> w(row_bytes * static_cast<size_t>(rows));
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : w) b = static_cast<uint8_t>(byte(rng));
  std::uniform_real_distribution<float> scale(0.001f, 0.05f);
  auto put16 = [&](uint8_t* p, float f) {
    const uint16_t h = f32_to_f16(f);
    std::memcpy(p, &h, 2);
  };
  const int64_t n_blocks = static_cast<int64_t>(w.size() / info.block_bytes);
  for (int64_t b = 0; b < n_blocks; ++b) {
    uint8_t* blk = w.data() + b * info.block_bytes;
    switch (type) {
      case TensorType::q4_0:
      case TensorType::q5_0:
      case TensorType::q8_0: put16(blk, scale(rng)); break;
      case TensorType::q4_1:
      case TensorType::q5_1:
      case TensorType::q4_k:
      case TensorType::q5_k:
        put16(blk, scale(rng));
        put16(blk + 2, -scale(rng));
        break;
      case TensorType::q6_k: put16(blk + 208, scale(rng)); break;
      case TensorType::q2_k:
        put16(blk + 80, scale(rng));
        put16(blk + 82, scale(rng));
        break;
      case TensorType::q3_k: put16(blk + 108, scale(rng)); break;
      case TensorType::iq4_nl:
      case TensorType::iq4_xs: put16(blk, scale(rng)); break;
      default: break;
    }
  }
  if (type == TensorType::f32 || type == TensorType::f16 || type == TensorType::bf16) {
    const auto f = random_floats(static_cast<size_t>(rows * cols), rng, 0.1f);
    for (size_t i = 0; i < f.size(); ++i) {
      if (type == TensorType::f32)
        std::memcpy(w.data() + 4 * i, &f[i], 4);
      else {
        const uint16_t h = type == TensorType::f16 ? f32_to_f16(f[i]) : f32_to_bf16(f[i]);
        std::memcpy(w.data() + 2 * i, &h, 2);
      }
    }
  }
  return w;
}

struct GemmCase {
  TensorType type;
  int64_t rows, cols, tokens;
};

// With `panels`, the rows are repacked (kernels/cpu/panel.h) and the table's panel kernel runs.
std::vector<float> run_gemm(const CpuKernels& k, const GemmCase& c, const std::vector<uint8_t>& w,
                            const std::vector<float>& x, bool panels = false, GemmFn fn = nullptr) {
  std::vector<BlockQ8> xq(static_cast<size_t>(c.tokens * c.cols / 32));
  for (int64_t t = 0; t < c.tokens; ++t)
    k.quantize_q8(x.data() + t * c.cols, xq.data() + t * (c.cols / 32), c.cols);
  std::vector<float> y(static_cast<size_t>(c.tokens * c.rows), NAN);
  const size_t row_bytes = w.size() / static_cast<size_t>(c.rows);
  GemmArgs a{c.type,   w.data(), row_bytes, c.cols, xq.data(), x.data(), c.tokens,
             y.data(), c.rows,   0,         c.rows, nullptr,   0};
  std::unique_ptr<uint8_t, decltype(&std::free)> packed(nullptr, &std::free);
  if (panels) {
    const PanelLayout l = panel_layout(c.type, c.rows, c.cols);
    packed.reset(static_cast<uint8_t*>(std::aligned_alloc(64, l.bytes())));
    std::memset(packed.get(), 0xcd, l.bytes());  // pack_panels must write every byte it reads
    pack_panels(l, w.data(), row_bytes, packed.get(), 0, l.n_panels);
    a.panels = packed.get();
    a.panel_bytes = l.panel_bytes;
  }
  (fn != nullptr ? fn : gemm_for(k, c.type, panels))(a);
  return y;
}

TEST(Kernels, GemmEveryTypeEveryVariant) {
  std::mt19937 rng(42);
  const TensorType types[] = {TensorType::q4_0, TensorType::q4_1,   TensorType::q5_0,  TensorType::q5_1,
                              TensorType::q8_0, TensorType::q4_k,   TensorType::q5_k,  TensorType::q6_k,
                              TensorType::f16,  TensorType::bf16,   TensorType::f32,   TensorType::q2_k,
                              TensorType::q3_k, TensorType::iq4_nl, TensorType::iq4_xs};
  for (TensorType type : types) {
    const bool integer = gemm_input(type) != GemmInput::f32;
    for (int64_t tokens : {1, 3, 4, 9, 15}) {
      for (int64_t rows : {1, 2, 5, 8, 17, 40}) {
        // Two k-quant super-blocks per row, or 16 legacy blocks; the tile edges: rows left over
        // after 4-row (decode) and 2-row tiles, and after whole panels of 16 (and their halves),
        // tokens after 8-, 4- and 2-token tiles.
        const GemmCase c{type, rows, 512, tokens};
        const auto w = random_rows(type, rows, c.cols, rng);
        const auto x = random_floats(static_cast<size_t>(tokens * c.cols), rng);
        const auto ref = run_gemm(cpu_kernels_scalar(), c, w, x);
        // The reference against float64: dequantized weights times the exact activations.
        std::vector<double> exact(ref.size()), magnitude(ref.size());
        std::vector<float> wrow(static_cast<size_t>(c.cols));
        for (int64_t r = 0; r < rows; ++r) {
          dequantize_row(type, w.data() + r * (w.size() / rows), wrow.data(), c.cols);
          for (int64_t t = 0; t < tokens; ++t) {
            double s = 0, m = 0;
            for (int64_t i = 0; i < c.cols; ++i) {
              s += static_cast<double>(wrow[i]) * x[t * c.cols + i];
              m += std::fabs(static_cast<double>(wrow[i]) * x[t * c.cols + i]);
            }
            exact[static_cast<size_t>(t * rows + r)] = s;
            magnitude[static_cast<size_t>(t * rows + r)] = m;
          }
        }
        const std::string what = std::string(tensor_type_name(type)) + " rows " + std::to_string(rows) +
                                 " tokens " + std::to_string(tokens);
        const double tol = integer ? 1e-2 : 1e-5;
        for (size_t i = 0; i < ref.size(); ++i)
          EXPECT_LE(std::fabs(ref[i] - exact[i]), tol * magnitude[i] + 1e-9) << "scalar vs float64, " << what;
        // The types llama.cpp's order exists for (Q4_0, Q4_1, Q8_0): the scalar table's kernel in
        // that order, against which the tables' row kernels (the same order) are checked.
        const GemmFn llama = cpu_kernels_scalar().gemm_llama[static_cast<int>(type)];
        const auto ref_llama = llama != nullptr ? run_gemm(cpu_kernels_scalar(), c, w, x, false, llama) : ref;
        if (llama != nullptr) {
          for (size_t i = 0; i < ref.size(); ++i)
            EXPECT_LE(std::fabs(ref_llama[i] - exact[i]), tol * magnitude[i] + 1e-9)
                << "scalar in llama.cpp's order vs float64, " << what;
        }
        for (const CpuKernels* v : variants()) {
          const GemmFn rows = gemm_for(*v, type, false);
          const bool in_llama_order = llama != nullptr && rows == v->gemm_llama[static_cast<int>(type)];
          const auto& want = in_llama_order ? ref_llama : ref;
          const auto got = run_gemm(*v, c, w, x);
          for (size_t i = 0; i < ref.size(); ++i)
            EXPECT_LE(std::fabs(got[i] - want[i]), 1e-5 * magnitude[i] + 1e-9)
                << v->isa << " vs scalar, " << what;
          if (!panel_type(type)) continue;
          // Panel kernels: the scalar reference's arithmetic, lane by lane, so the same bits.
          ASSERT_NE(v->gemm_panels[static_cast<int>(type)], nullptr) << v->isa << " " << what;
          const auto from_panels = run_gemm(*v, c, w, x, true);
          for (size_t i = 0; i < ref.size(); ++i)
            ASSERT_EQ(from_panels[i], ref[i]) << v->isa << " panels vs scalar, " << what << ", output " << i;
        }
      }
    }
  }
}

TEST(Kernels, QuantizeQ8IsIdenticalAndBounded) {
  std::mt19937 rng(1);
  auto x = random_floats(4096, rng, 3.0f);
  // Blocks the SIMD forms could get wrong: all zeros, a negative zero among zeros, ties at .5
  // (rounded to even), one value far above the others, the largest at the end.
  std::fill(x.begin(), x.begin() + 32, 0.0f);
  x[40] = -0.0f;
  std::fill(x.begin() + 32, x.begin() + 64, 0.0f);
  x[33] = -0.0f;
  x[64] = 127.0f;  // a scale of exactly 1: the others, at halves, are ties
  for (int i = 1; i < 32; ++i) x[64 + i] = static_cast<float>(i % 5) - 2.5f;
  x[96] = 1e6f;
  x[159] = -50.0f;
  std::vector<BlockQ8> ref(128);
  cpu_kernels_scalar().quantize_q8(x.data(), ref.data(), 4096);
  for (int b = 0; b < 128; ++b)
    for (int i = 0; i < 32; ++i) {
      const float v = x[b * 32 + i];
      // The scale is kept at fp16 precision (2^-11 relative), so reconstruction error is at most
      // half a step plus 127 * 2^-11 steps.
      EXPECT_LE(std::fabs(v - ref[b].d * ref[b].q[i]), ref[b].d * (0.5f + 127.0f / 2048.0f) + 1e-6f);
    }
  // The halves' sums, and the minimum terms' factors the panel kernels read: d times each.
  for (int b = 0; b < 128; ++b) {
    int h[2] = {0, 0};
    for (int i = 0; i < 32; ++i) h[i / 16] += ref[b].q[i];
    EXPECT_EQ(ref[b].qsum[0], h[0]);
    EXPECT_EQ(ref[b].qsum[1], h[1]);
    EXPECT_EQ(ref[b].dq[0], ref[b].d * static_cast<float>(h[0]));
    EXPECT_EQ(ref[b].dq[1], ref[b].d * static_cast<float>(h[1]));
    EXPECT_EQ(ref[b].dq[2], ref[b].d * static_cast<float>(h[0] + h[1]));
  }
  for (const CpuKernels* k : variants()) {
    std::vector<BlockQ8> got(128);
    k->quantize_q8(x.data(), got.data(), 4096);
    EXPECT_EQ(std::memcmp(got.data(), ref.data(), sizeof(BlockQ8) * 128), 0) << k->isa;
  }
}

TEST(Kernels, ElementwiseOpsMatchMathAndReference) {
  std::mt19937 rng(3);
  const int n = 1536;
  const auto x = random_floats(n, rng, 2.0f), w = random_floats(n, rng), g = random_floats(n, rng);
  std::vector<const CpuKernels*> all = variants();
  all.insert(all.begin(), &cpu_kernels_scalar());
  std::vector<float> ref_norm, ref_swiglu, ref_soft, ref_rope;
  for (const CpuKernels* k : all) {
    std::vector<float> y(n);
    k->rmsnorm(x.data(), w.data(), y.data(), n, 1e-5f);
    std::vector<double> want(n);
    double ss = 0;
    for (float v : x) ss += static_cast<double>(v) * v;
    for (int i = 0; i < n; ++i) want[i] = x[i] / std::sqrt(ss / n + 1e-5) * w[i];
    EXPECT_LT(nmse(y, want), 1e-10) << k->isa << " rmsnorm";
    if (ref_norm.empty()) ref_norm = y;
    EXPECT_EQ(y, ref_norm) << k->isa << " rmsnorm";

    std::vector<float> s(n);
    k->swiglu(x.data(), g.data(), s.data(), n);
    for (int i = 0; i < n; ++i) want[i] = x[i] / (1.0 + std::exp(-static_cast<double>(x[i]))) * g[i];
    EXPECT_LT(nmse(s, want), 1e-10) << k->isa << " swiglu";
    if (ref_swiglu.empty()) ref_swiglu = s;
    EXPECT_EQ(s, ref_swiglu) << k->isa << " swiglu";

    std::vector<float> sm(x.begin(), x.begin() + 300);
    k->softmax(sm.data(), 300);
    double mx = -1e300, tot = 0;
    for (int i = 0; i < 300; ++i) mx = std::max(mx, static_cast<double>(x[i]));
    std::vector<double> ws(300);
    for (int i = 0; i < 300; ++i) tot += ws[i] = std::exp(x[i] - mx);
    for (double& v : ws) v /= tot;
    EXPECT_LT(nmse(sm, ws), 1e-10) << k->isa << " softmax";
    if (ref_soft.empty()) ref_soft = sm;
    EXPECT_EQ(sm, ref_soft) << k->isa << " softmax";

    for (bool neox : {false, true}) {
      std::vector<float> cs(64), v(x.begin(), x.begin() + 64);
      const float theta_scale = std::pow(10000.0f, -2.0f / 64);
      k->rope_cache(cs.data(), 64, RopeParams{theta_scale, 1.0f}, 37.0f);
      k->rope(v.data(), 64, cs.data(), neox);
      std::vector<double> want_r(64);
      for (int i = 0; i < 32; ++i) {
        const double th = 37.0 * std::pow(10000.0, -2.0 * i / 64);
        const int a = neox ? i : 2 * i, b = neox ? i + 32 : 2 * i + 1;
        want_r[a] = x[a] * std::cos(th) - x[b] * std::sin(th);
        want_r[b] = x[a] * std::sin(th) + x[b] * std::cos(th);
      }
      EXPECT_LT(nmse(v, want_r), 1e-10) << k->isa << " rope neox=" << neox;
      if (!neox) {
        if (ref_rope.empty()) ref_rope = v;
        EXPECT_EQ(v, ref_rope) << k->isa << " rope";
      }
    }
  }
}

// Attention over a paged cache against softmax(q k^T / sqrt(d)) v in float64.
// Llama 3's frequency factors and YaRN's ramp, against their formulas in float64: pair i turns by
// theta = pos * base^(-2i/n) / ff_i, scaled by s where the ramp says, mixed in between; cos and
// sin times mscale.
TEST(Kernels, RopeAnglesWithFrequencyFactorsAndYarnAreTheirFormulas) {
  const int n = 64;
  std::vector<float> ff(n / 2);
  for (int i = 0; i < n / 2; ++i)
    ff[static_cast<size_t>(i)] = i < 8 ? 1.0f : i < 20 ? 1.0f + 0.5f * (i - 8) : 8.0f;
  const float theta_scale = std::pow(500000.0f, -2.0f / n);
  for (const bool yarn : {false, true}) {
    RopeParams p{theta_scale, yarn ? 0.25f : 1.0f, ff.data()};
    if (yarn) {
      p.ext_factor = 1.0f;
      p.corr_lo = 6.0f;
      p.corr_hi = 22.0f;
      p.mscale = 1.0f + 0.1f * std::log(4.0f);
    }
    for (const CpuKernels* k : {&cpu_kernels_scalar()}) {
      std::vector<float> cs(n);
      const double pos = 100.0;
      k->rope_cache(cs.data(), n, p, static_cast<float>(pos));
      double worst = 0;
      for (int i = 0; i < n / 2; ++i) {
        const double extrap = pos * std::pow(500000.0, -2.0 * i / n) / ff[static_cast<size_t>(i)];
        double t = p.freq_scale * extrap;
        if (yarn) {
          const double y = (i - 6.0) / (22.0 - 6.0), ramp = 1.0 - std::min(1.0, std::max(0.0, y));
          t = t * (1 - ramp) + extrap * ramp;
        }
        // Angles of ~100 radians, powers by repeated products in float: ~1e-4 of rounding.
        worst = std::max({worst, std::abs(cs[2 * i] - p.mscale * std::cos(t)),
                          std::abs(cs[2 * i + 1] - p.mscale * std::sin(t))});
      }
      EXPECT_LT(worst, 1e-3) << "yarn " << yarn;
    }
  }
}

TEST(Kernels, AttentionMatchesMathOnEveryVariant) {
  std::mt19937 rng(5);
  std::vector<const CpuKernels*> all = variants();
  all.insert(all.begin(), &cpu_kernels_scalar());
  for (int d : {32, 64, 80, 128, 256}) {
    for (int64_t n_kv : {1, 15, 16, 17, 100, 300}) {
      const int n_kv_heads = 2, kv_stride = n_kv_heads * d;
      const int64_t n_pages = (n_kv + 15) / 16;
      std::vector<std::vector<float>> kp(static_cast<size_t>(n_pages)), vp(static_cast<size_t>(n_pages));
      for (auto& p : kp) p = random_floats(static_cast<size_t>(16 * kv_stride), rng);
      for (auto& p : vp) p = random_floats(static_cast<size_t>(16 * kv_stride), rng);
      std::vector<const float*> kptr, vptr;
      for (auto& p : kp) kptr.push_back(p.data());
      for (auto& p : vp) vptr.push_back(p.data());
      // Three query heads share each KV head (grouped-query attention).
      constexpr int nq = 3;
      const auto q = random_floats(static_cast<size_t>(nq * d), rng, 0.5f);
      // A sliding window hides the positions before `begin`: none, some, whole pages, all but one.
      for (int64_t begin : {int64_t{0}, n_kv / 3, n_kv / 16 * 16, n_kv - 1})
        for (int head = 0; head < n_kv_heads; ++head) {
          // float64 reference per query over positions begin.. (keys are dimension-major in a page).
          std::vector<double> want(static_cast<size_t>(nq * d), 0.0);
          for (int g = 0; g < nq; ++g) {
            std::vector<double> sc(static_cast<size_t>(n_kv));
            double mx = -1e300, tot = 0;
            for (int64_t j = begin; j < n_kv; ++j) {
              double s = 0;
              for (int i = 0; i < d; ++i)
                s += q[g * d + i] * static_cast<double>(kp[j / 16][(head * d + i) * 16 + j % 16]);
              sc[j] = s / std::sqrt(static_cast<double>(d));
              mx = std::max(mx, sc[j]);
            }
            for (int64_t j = begin; j < n_kv; ++j) tot += sc[j] = std::exp(sc[j] - mx);
            for (int64_t j = begin; j < n_kv; ++j)
              for (int i = 0; i < d; ++i)
                want[g * d + i] += sc[j] / tot * vp[j / 16][(j % 16) * kv_stride + head * d + i];
          }
          std::vector<float> ref;
          for (const CpuKernels* k : all) {
            for (bool single : {false, true}) {
              std::vector<float> out(static_cast<size_t>(nq * d)),
                  scratch(static_cast<size_t>(attention_scratch_floats(nq, n_kv, d)));
              AttentionSegment seg{q.data(), kptr.data(), vptr.data(), n_kv, begin};
              AttentionArgs a{&seg,
                              1,
                              nq,
                              kv_stride,
                              static_cast<int64_t>(head) * d,
                              d,
                              1.0f / std::sqrt(static_cast<float>(d)),
                              out.data(),
                              scratch.data(),
                              single};
              k->attention(a);
              EXPECT_LT(nmse(out, want), 1e-10)
                  << k->isa << " d=" << d << " n_kv=" << n_kv << " begin=" << begin << " single=" << single;
              if (!single) {
                if (k == all.front()) ref = out;
                EXPECT_EQ(out, ref) << k->isa << " d=" << d << " n_kv=" << n_kv << " begin=" << begin;
              }
              // One query at a time gives the same bits as the group.
              std::vector<float> one(static_cast<size_t>(d));
              AttentionSegment seg1 = seg;
              seg1.q = q.data() + d;
              AttentionArgs a1 = a;
              a1.segs = &seg1;
              a1.n_q = 1;
              a1.out = one.data();
              k->attention(a1);
              EXPECT_TRUE(std::equal(one.begin(), one.end(), out.begin() + d))
                  << k->isa << " group vs single query";
            }
          }
        }
    }
  }
}

// An f16 KV cache: attention over binary16 pages is exactly attention over f32 pages holding the
// same values (widening is exact), so the two give the same bits on every table, for every
// shape (head sizes with and without a tail past 64, partial pages, a sliding window, a view of
// two segments, one query and a group of five, the single-token order).
TEST(Kernels, AttentionOverF16PagesIsF32AttentionOverTheRoundedValues) {
  std::mt19937 rng(29);
  std::vector<const CpuKernels*> all = variants();
  all.insert(all.begin(), &cpu_kernels_scalar());
  for (int d : {32, 64, 80, 128, 256}) {
    const int n_kv_heads = 2, kv_stride = n_kv_heads * d;
    struct Pages {
      std::vector<std::vector<float>> f32;  // values already rounded to binary16
      std::vector<std::vector<uint16_t>> f16;
      std::vector<const float*> kp32, vp32;
      std::vector<const uint16_t*> kp16, vp16;
    };
    auto make = [&](int64_t n_kv) {
      Pages p;
      const int64_t n_pages = (n_kv + 15) / 16;
      for (int64_t i = 0; i < 2 * n_pages; ++i) {  // K then V pages, interleaved
        auto x = random_floats(static_cast<size_t>(16 * kv_stride), rng, 2.0f);
        std::vector<uint16_t> h(x.size());
        for (size_t j = 0; j < x.size(); ++j) {
          h[j] = f32_to_f16(x[j]);
          x[j] = f16_to_f32(h[j]);
        }
        p.f32.push_back(std::move(x));
        p.f16.push_back(std::move(h));
      }
      for (int64_t i = 0; i < n_pages; ++i) {
        p.kp32.push_back(p.f32[2 * i].data());
        p.vp32.push_back(p.f32[2 * i + 1].data());
        p.kp16.push_back(p.f16[2 * i].data());
        p.vp16.push_back(p.f16[2 * i + 1].data());
      }
      return p;
    };
    // 250 + 23 positions cross the value sums' pass of 256 inside the second segment, which
    // starts off a page boundary; five queries are a group of four and one.
    for (int64_t n_kv : {1, 17, 100, 250}) {
      const Pages a = make(n_kv), b = make(23);
      constexpr int nq = 5;
      const auto q = random_floats(static_cast<size_t>(nq * d), rng, 0.5f);
      for (int64_t begin : {int64_t{0}, n_kv / 2})
        for (int n_segs : {1, 2})
          for (const CpuKernels* k : all)
            for (bool single : {false, true})
              for (int n_q : {1, nq}) {
                const int64_t total = n_kv + (n_segs == 2 ? 23 : 0);
                std::vector<float> scratch(static_cast<size_t>(attention_scratch_floats(n_q, total, d)));
                std::vector<float> out32(static_cast<size_t>(n_q * d)), out16(out32.size(), -1.0f);
                AttentionSegment s32[2] = {{q.data(), a.kp32.data(), a.vp32.data(), n_kv, begin},
                                           {q.data(), b.kp32.data(), b.vp32.data(), 23}};
                AttentionSegment s16[2] = {
                    {q.data(), nullptr, nullptr, n_kv, begin, a.kp16.data(), a.vp16.data()},
                    {q.data(), nullptr, nullptr, 23, 0, b.kp16.data(), b.vp16.data()}};
                const float scale = 1.0f / std::sqrt(static_cast<float>(d));
                AttentionArgs args{s32, n_segs, n_q,          kv_stride,      d,
                                   d,   scale,  out32.data(), scratch.data(), single};
                k->attention(args);
                args.segs = s16;
                args.out = out16.data();
                args.kv_f16 = true;
                k->attention(args);
                EXPECT_EQ(out16, out32) << k->isa << " d=" << d << " n_kv=" << n_kv << " begin=" << begin
                                        << " segments=" << n_segs << " single=" << single << " n_q=" << n_q;
              }
    }
  }
}

// GeGLU: gelu(gate) * up with GELU through llama.cpp's f16 table, against the tanh formula in
// float64 at the f16-rounded input, to f16 precision (2^-11 relative, plus the product's
// rounding); 0 at or below -10 and the identity at or above 10; every table the same bits.
TEST(Kernels, GegluIsTheTanhGeluToHalfPrecisionOnEveryVariant) {
  std::mt19937 rng(17);
  std::vector<const CpuKernels*> all = variants();
  all.insert(all.begin(), &cpu_kernels_scalar());
  auto gate = random_floats(4096, rng, 4.0f);
  gate.insert(gate.end(), {-12.0f, -10.0f, -9.99f, 0.0f, -0.0f, 9.99f, 10.0f, 25.0f, 1e-6f, -3.5f});
  const auto up = random_floats(gate.size(), rng);
  std::vector<float> ref;
  for (const CpuKernels* k : all) {
    std::vector<float> out(gate.size());
    k->geglu(gate.data(), up.data(), out.data(), static_cast<int64_t>(gate.size()));
    for (size_t i = 0; i < gate.size(); ++i) {
      const double x = f16_to_f32(f32_to_f16(gate[i]));
      const double gelu = 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * x * (1.0 + 0.044715 * x * x)));
      double want = gelu * up[i];
      if (gate[i] <= -10.0f) want = 0.0;
      if (gate[i] >= 10.0f) want = static_cast<double>(gate[i]) * up[i];
      EXPECT_NEAR(out[i], want, 1e-3 * std::fabs(want) + 1e-6) << k->isa << " gate " << gate[i];
    }
    if (ref.empty()) ref = out;
    EXPECT_EQ(out, ref) << k->isa;
  }
}

// A recurrence step is the same bits on every table (ggml's AVX-512 order, which the golden
// hybrid models' llama.cpp states round in), whether the table keeps a state row in registers
// (head sizes 64, 128, 256 on AVX-512) or not: with and without a value and an output, over
// 64 steps so that differences would compound.
TEST(Kernels, GatedDeltaNetStepIsTheSameBitsOnEveryVariant) {
  std::mt19937 rng(43);
  const CpuKernels& ref = cpu_kernels_scalar();
  for (int dk : {16, 40, 64, 128, 256}) {
    const int dv = dk;
    const auto S0 = random_floats(static_cast<size_t>(dv) * dk, rng);
    std::vector<std::vector<float>> q, k, v;
    for (int t = 0; t < 64; ++t) {
      q.push_back(random_floats(static_cast<size_t>(dk), rng));
      k.push_back(random_floats(static_cast<size_t>(dk), rng));
      float n2 = 0;  // unit keys, as the models' L2-normalised ones: the state stays bounded
      for (float x : k.back()) n2 += x * x;
      for (float& x : k.back()) x /= std::sqrt(n2);
      v.push_back(random_floats(static_cast<size_t>(dv), rng));
    }
    for (const CpuKernels* K : variants()) {
      for (int form = 0; form < 3; ++form) {  // state + output; value, no output; neither
        std::vector<float> S1 = S0, S2 = S0, o1(static_cast<size_t>(dv)), o2(static_cast<size_t>(dv));
        for (int t = 0; t < 64; ++t) {
          const float* vt = form < 2 ? v[static_cast<size_t>(t)].data() : nullptr;
          const float g = -0.05f * static_cast<float>(t % 7), beta = 0.3f + 0.01f * static_cast<float>(t);
          K->gdn_step(S1.data(), q[static_cast<size_t>(t)].data(), k[static_cast<size_t>(t)].data(), vt, g,
                      beta, form == 0 ? o1.data() : nullptr, dk, dv);
          ref.gdn_step(S2.data(), q[static_cast<size_t>(t)].data(), k[static_cast<size_t>(t)].data(), vt, g,
                       beta, form == 0 ? o2.data() : nullptr, dk, dv);
          if (form == 0) {
            ASSERT_EQ(o1, o2) << K->isa << " output, dk " << dk << " step " << t;
          }
        }
        EXPECT_EQ(S1, S2) << K->isa << " state, dk " << dk << " form " << form;
      }
    }
  }
}

// The Gated DeltaNet ops of every table against the float64 reference (kernels/cpu/gdn.h),
// with head sizes that are and are not multiples of the 16 lanes.
TEST(Kernels, GatedDeltaNetOpsMatchTheFloat64ReferenceOnEveryVariant) {
  std::mt19937 rng(41);
  std::vector<const CpuKernels*> all = variants();
  all.push_back(&cpu_kernels_scalar());
  auto to_d = [](const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); };
  auto rel = [](const std::vector<float>& got, const std::vector<double>& want) {
    double mx = 0, md = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      mx = std::max(mx, std::fabs(want[i]));
      md = std::max(md, std::fabs(got[i] - want[i]));
    }
    return md / mx;
  };
  for (int dk : {16, 40, 64, 128, 256}) {
    const int dv = dk;
    auto S = random_floats(static_cast<size_t>(dv) * dk, rng),
         q = random_floats(static_cast<size_t>(dk), rng), k = random_floats(static_cast<size_t>(dk), rng),
         v = random_floats(static_cast<size_t>(dv), rng);
    auto A = random_floats(static_cast<size_t>(dk) * dk, rng, 0.1f),
         B = random_floats(static_cast<size_t>(dv) * dk, rng);
    std::vector<double> Sd = to_d(S), kd = to_d(k);
    gdn::l2_normalize(kd.data(), dk, 1e-6);
    for (int i = 0; i < dk; ++i) k[static_cast<size_t>(i)] = static_cast<float>(kd[static_cast<size_t>(i)]);
    kd = to_d(k);
    std::vector<double> od(static_cast<size_t>(dv));
    gdn::step<double>(Sd.data(), to_d(q).data(), kd.data(), to_d(v).data(), -0.3, 0.6, od.data(), dk, dv);
    std::vector<double> Cd(static_cast<size_t>(dv) * dk), Bd = to_d(B);  // S A + B
    {
      std::vector<double> Ad = to_d(A), Sd0 = to_d(S), Id(static_cast<size_t>(dk) * dk), Z(Cd.size(), 0.0);
      gdn::summary_identity<double>(Id.data(), Z.data(), dk, dv);
      std::vector<double> unusedA(Id.size());
      gdn::summary_compose<double>(Id.data(), Sd0.data(), Ad.data(), Bd.data(), unusedA.data(), Cd.data(), dk,
                                   dv);
    }
    std::vector<double> yd(static_cast<size_t>(dk)), cd(static_cast<size_t>(dk));  // y = A q, c = B q
    for (int r = 0; r < dk; ++r)
      for (int j = 0; j < dk; ++j) {
        yd[static_cast<size_t>(r)] +=
            static_cast<double>(A[static_cast<size_t>(r * dk + j)]) * q[static_cast<size_t>(j)];
        cd[static_cast<size_t>(r)] +=
            static_cast<double>(B[static_cast<size_t>(r * dk + j)]) * q[static_cast<size_t>(j)];
      }
    for (const CpuKernels* K : all) {
      std::vector<float> S1 = S, o(static_cast<size_t>(dv));
      K->gdn_step(S1.data(), q.data(), k.data(), v.data(), -0.3f, 0.6f, o.data(), dk, dv);
      EXPECT_LE(rel(S1, Sd), 2e-6) << K->isa << " step state, dk " << dk;
      EXPECT_LE(rel(o, od), 2e-5) << K->isa << " step output, dk " << dk;
      std::vector<float> C = B;
      K->gdn_mul_right(S.data(), A.data(), C.data(), dv, dk, true);
      EXPECT_LE(rel(C, Cd), 2e-5) << K->isa << " S A + B, dk " << dk;
      std::vector<float> y = q, c(static_cast<size_t>(dk), 0.0f), tmp(static_cast<size_t>(dk));
      K->gdn_query_dense(A.data(), B.data(), y.data(), c.data(), tmp.data(), dk);
      EXPECT_LE(rel(y, yd), 2e-5) << K->isa << " A q, dk " << dk;
      EXPECT_LE(rel(c, cd), 2e-5) << K->isa << " B q, dk " << dk;
    }
  }
  // Convolution + SiLU: taps [K][C] against the reference's [C][K].
  const int C = 72, Kw = 4, n = 5;
  const auto prev = random_floats(static_cast<size_t>((Kw - 1) * C), rng),
             x = random_floats(static_cast<size_t>(n * C), rng),
             w = random_floats(static_cast<size_t>(Kw * C), rng);
  std::vector<double> w_ck(static_cast<size_t>(C * Kw)), want(static_cast<size_t>(n * C));
  for (int c = 0; c < C; ++c)
    for (int j = 0; j < Kw; ++j) w_ck[static_cast<size_t>(c * Kw + j)] = w[static_cast<size_t>(j * C + c)];
  gdn::conv_causal<double>(to_d(prev).data(), to_d(x).data(), n, w_ck.data(), C, Kw, true, want.data());
  for (const CpuKernels* K : all) {
    std::vector<float> y(static_cast<size_t>(n * C));
    K->gdn_conv(prev.data(), x.data(), n, w.data(), C, Kw, y.data());
    EXPECT_LE(rel(y, want), 2e-6) << K->isa << " conv";
  }
}

TEST(Kernels, DeviceSelectsTheBestTableAndHonoursOverrides) {
  CpuDeviceOptions scalar;
  scalar.n_threads = 1;
  scalar.isa = "scalar";
  auto d = CpuDevice::create(scalar);
  ASSERT_TRUE(d.ok()) << d.error().to_string();
  EXPECT_STREQ((*d)->kernels().isa, "scalar");
  CpuDeviceOptions neon;
  neon.isa = "neon";
  auto bad = CpuDevice::create(neon);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("unknown ISA 'neon'"), std::string::npos);
  CpuDeviceOptions two;
  two.n_threads = 2;
  auto best = CpuDevice::create(two);
  ASSERT_TRUE(best.ok());
  EXPECT_STREQ((*best)->kernels().isa, best_cpu_kernels().isa);
}

TEST(ThreadPool, RunsEveryTaskOnceAcrossThreads) {
  ThreadPool pool(2);
  for (int64_t n : {0, 1, 2, 7, 1000}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    pool.run(n, [&](int64_t t, int thread) {
      EXPECT_GE(thread, 0);
      EXPECT_LT(thread, 2);
      hits[static_cast<size_t>(t)].fetch_add(1);
    });
    for (auto& h : hits) EXPECT_EQ(h.load(), 1);
  }
}

}  // namespace
}  // namespace chorus

namespace chorus {
namespace {

// The position trick (AsyncLLM): keys stored rotated at block-local positions, the query rotated
// by (view position - block offset) for each block, gives the same attention as one contiguous
// cache with keys at view positions — for every order of the blocks, both rope layouts, GQA,
// empty and one-token blocks and blocks over several pages. No block is re-encoded.
TEST(Kernels, ViewAttentionEqualsContiguousAttention) {
  std::mt19937 rng(11);
  const CpuKernels& k = best_cpu_kernels();
  constexpr int d = 64, n_kv_heads = 1, kv_stride = n_kv_heads * d, nq = 3;
  const float theta_scale = std::pow(10000.0f, -2.0f / d);
  // {7, 250, 40}: views past the value sums' pass of 256, with blocks starting off page boundaries.
  const std::vector<std::vector<int64_t>> length_sets = {{5, 17, 40}, {0, 1, 16}, {33, 0, 2}, {7, 250, 40}};
  for (bool neox : {false, true}) {
    for (const auto& lengths : length_sets) {
      // Raw (unrotated) keys and values for each block's positions.
      std::vector<std::vector<float>> kraw(3), vraw(3);
      for (int b = 0; b < 3; ++b) {
        kraw[b] = random_floats(static_cast<size_t>(lengths[b] * d), rng);
        vraw[b] = random_floats(static_cast<size_t>(lengths[b] * d), rng);
      }
      const auto qraw = random_floats(static_cast<size_t>(nq * d), rng, 0.5f);
      std::vector<float> cs(d);
      auto rotated = [&](const float* x, float pos) {
        std::vector<float> r(x, x + d);
        k.rope_cache(cs.data(), d, RopeParams{theta_scale, 1.0f}, pos);
        k.rope(r.data(), d, cs.data(), neox);
        return r;
      };
      // Pages of a block whose position j holds key rot(kraw, base + j) and value vraw.
      struct Pages {
        std::vector<std::vector<float>> k, v;
        std::vector<const float*> kp, vp;
      };
      auto make_pages = [&](const std::vector<std::pair<int, int64_t>>& items, int64_t base) {
        Pages p;  // items: (block, position in block) in order
        const int64_t n = static_cast<int64_t>(items.size());
        for (int64_t pg = 0; pg * 16 < std::max<int64_t>(n, 1); ++pg) {
          p.k.emplace_back(16 * kv_stride, 0.0f);
          p.v.emplace_back(16 * kv_stride, 0.0f);
        }
        for (int64_t j = 0; j < n; ++j) {
          const auto [b, jl] = items[static_cast<size_t>(j)];
          const auto kr = rotated(kraw[b].data() + jl * d, static_cast<float>(base + j));
          for (int i = 0; i < d; ++i) {
            p.k[j / 16][i * 16 + j % 16] = kr[i];
            p.v[j / 16][(j % 16) * kv_stride + i] = vraw[b][jl * d + i];
          }
        }
        for (auto& x : p.k) p.kp.push_back(x.data());
        for (auto& x : p.v) p.vp.push_back(x.data());
        return p;
      };
      std::vector<int> order = {0, 1, 2};
      do {
        const int64_t total = lengths[0] + lengths[1] + lengths[2];
        if (total == 0) continue;
        const auto i_query = static_cast<float>(total - 1);  // the view's last position
        // View: each block encoded once at local positions, queries rotated per block.
        std::vector<Pages> blocks(3);
        for (int b = 0; b < 3; ++b) {
          std::vector<std::pair<int, int64_t>> items;
          for (int64_t j = 0; j < lengths[b]; ++j) items.emplace_back(b, j);
          blocks[b] = make_pages(items, 0);
        }
        std::vector<AttentionSegment> segs;
        std::vector<std::vector<float>> qs;
        int64_t offset = 0;
        for (int b : order) {
          std::vector<float> q;
          for (int g = 0; g < nq; ++g) {
            const auto r = rotated(qraw.data() + g * d, i_query - static_cast<float>(offset));
            q.insert(q.end(), r.begin(), r.end());
          }
          qs.push_back(std::move(q));
          segs.push_back({qs.back().data(), blocks[b].kp.data(), blocks[b].vp.data(), lengths[b]});
          offset += lengths[b];
        }
        for (size_t sgi = 0; sgi < segs.size(); ++sgi) segs[sgi].q = qs[sgi].data();
        // Contiguous: one block with every position at its view position.
        std::vector<std::pair<int, int64_t>> items;
        for (int b : order)
          for (int64_t j = 0; j < lengths[b]; ++j) items.emplace_back(b, j);
        const Pages contiguous = make_pages(items, 0);
        std::vector<float> qc;
        for (int g = 0; g < nq; ++g) {
          const auto r = rotated(qraw.data() + g * d, i_query);
          qc.insert(qc.end(), r.begin(), r.end());
        }
        const AttentionSegment one{qc.data(), contiguous.kp.data(), contiguous.vp.data(), total};
        for (bool single : {false, true}) {
          std::vector<float> out_view(nq * d), out_cont(nq * d),
              scratch(static_cast<size_t>(attention_scratch_floats(nq, total, d)));
          const float scale = 1.0f / std::sqrt(static_cast<float>(d));
          AttentionArgs av{segs.data(),    3,     nq, kv_stride, 0, d, scale, out_view.data(),
                           scratch.data(), single};
          k.attention(av);
          AttentionArgs ac{&one, 1, nq, kv_stride, 0, d, scale, out_cont.data(), scratch.data(), single};
          k.attention(ac);
          std::vector<double> want(out_cont.begin(), out_cont.end());
          EXPECT_LT(nmse(out_view, want), 1e-10)
              << "order " << order[0] << order[1] << order[2] << " lengths " << lengths[0] << ","
              << lengths[1] << "," << lengths[2] << " neox " << neox << " single " << single;
        }
      } while (std::next_permutation(order.begin(), order.end()));
    }
  }
}

}  // namespace
}  // namespace chorus
