// The mixture-of-experts ops on the device (kernels/cuda/ops.h rows_dot_f32 .. moe_combine) and
// qwen3next's packed gates, against float64 arithmetic and the CPU's routing rules
// (engine/forward/cpu/cpu_runner_moe.cpp, restated here as the oracle). Label: gpu.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <vector>

#ifdef CHORUS_HAVE_CUDA
#include "tests/support/cuda_ops_fixture.h"
#endif

namespace chorus {
namespace {

#ifdef CHORUS_HAVE_CUDA

using namespace cuda_ops_test;

// The CPU's routing of one token (cpu_runner_moe.cpp): softmax (sum in double), the n_used
// most probable (ties: the lower id), renormalised with the sum clamped at 2^-14, then scaled.
void route(const float* logits, int NE, int NU, float scale, std::vector<int>* experts,
           std::vector<float>* weights) {
  std::vector<float> p(logits, logits + NE);
  const float mx = *std::max_element(p.begin(), p.end());
  double sum = 0;
  for (float& v : p) sum += v = std::exp(v - mx);
  const auto inv = static_cast<float>(1.0 / sum);
  for (float& v : p) v *= inv;
  std::vector<int> order(static_cast<size_t>(NE));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + NU, order.end(),
                    [&](int a, int b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
  float wsum = 0;
  for (int s = 0; s < NU; ++s) wsum += p[order[s]];
  wsum = std::max(wsum, 6.103515625e-5f);
  for (int s = 0; s < NU; ++s) {
    experts->push_back(order[s]);
    weights->push_back(p[order[s]] / wsum * (scale != 0.0f && scale != 1.0f ? scale : 1.0f));
  }
}

// Routing: random logits spaced well apart (so expf and std::exp cannot reorder them), exact
// ties (the lower id wins), the limits (16 of 1024 experts), a scale; then all-NaN logits,
// which must still name experts in range (a NaN hidden state gives garbage, not a bad write).
TEST_F(CudaOps, MoeRoutingIsTheCpus) {
  struct Case {
    int NE, NU;
    float scale;
    bool ties;
  };
  for (const Case& cs : {Case{4, 2, 0.0f, false}, Case{64, 8, 2.5f, false}, Case{1024, 16, 1.0f, false},
                         Case{16, 4, 0.0f, true}}) {
    const int T = 5;
    std::vector<float> logits(static_cast<size_t>(T * cs.NE));
    std::mt19937 rng(static_cast<uint32_t>(cs.NE));
    for (int t = 0; t < T; ++t) {
      std::vector<int> perm(static_cast<size_t>(cs.NE));
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
      for (int e = 0; e < cs.NE; ++e)
        logits[static_cast<size_t>(t * cs.NE + e)] =
            cs.ties ? static_cast<float>(e % 3) : 0.01f * static_cast<float>(perm[e]);
    }
    std::vector<int> want_e;
    std::vector<float> want_w;
    for (int t = 0; t < T; ++t) route(logits.data() + t * cs.NE, cs.NE, cs.NU, cs.scale, &want_e, &want_w);
    int32_t* de = room<int32_t>(want_e.size());
    float* dw = room<float>(want_w.size());
    ASSERT_EQ(cuda::moe_route(put(logits), T, cs.NE, cs.NU, cs.scale, de, dw, stream()).message(), "");
    const auto got_e = get(de, want_e.size());
    for (size_t i = 0; i < want_e.size(); ++i)
      ASSERT_EQ(got_e[i], want_e[i]) << cs.NE << " experts, slot " << i;
    expect_close(get(dw, want_w.size()), want_w, 1e-6,
                 "moe_route weights, " + std::to_string(cs.NU) + " of " + std::to_string(cs.NE));
  }
  const std::vector<float> nan(3 * 8, std::nanf(""));
  int32_t* de = room<int32_t>(3 * 2);
  ASSERT_EQ(cuda::moe_route(put(nan), 3, 8, 2, 0.0f, de, room<float>(6), stream()).message(), "");
  for (int32_t e : get(de, 6)) EXPECT_TRUE(e >= 0 && e < 8) << e;
  EXPECT_NE(cuda::moe_route(nullptr, 1, 8, 17, 0.0f, de, nullptr, nullptr).message().find("17 of 8"),
            std::string::npos);
}

// A whole MoE feed-forward from given routes: rows_dot_f32 for the shared gate, moe_sort, the
// expert passes and moe_combine, against float64 over the same bf16 weights; the sort's lists too.
TEST_F(CudaOps, MoeExpertsAndCombineMatchFloat64) {
  const int NE = 5, NU = 2, E = 64, FE = 48, T = 3, S = T * NU;
  auto bf16_exact = [](std::vector<float> v) {
    for (float& x : v) x = bf16_to_f32(f32_to_bf16(x));
    return v;
  };
  const auto wg = bf16_exact(random_floats(static_cast<size_t>(NE * FE * E), 1, -0.2f, 0.2f));
  const auto wu = bf16_exact(random_floats(wg.size(), 2, -0.2f, 0.2f));
  const auto wd = bf16_exact(random_floats(static_cast<size_t>(NE * E * FE), 3, -0.2f, 0.2f));
  const auto h = random_floats(static_cast<size_t>(T * E), 4),
             x0 = random_floats(static_cast<size_t>(T * E), 5);
  const auto shared = random_floats(static_cast<size_t>(T * E), 6),
             sh_router = random_floats(static_cast<size_t>(E), 7);
  const std::vector<int32_t> experts = {3, 0, 3, 4, 1, 3};  // expert 2 unchosen, 3 by every token
  const std::vector<float> weights = {0.7f, 0.3f, 0.55f, 0.45f, 0.9f, 0.1f};
  auto to_bf16 = [](const std::vector<float>& v) {
    std::vector<bf16_bits> b(v.size());
    for (size_t i = 0; i < v.size(); ++i) b[i] = f32_to_bf16(v[i]);
    return b;
  };
  // float64: per slot the expert's FFN, weighted; per token the slots in order plus the gated shared expert.
  std::vector<float> want(x0);
  for (int t = 0; t < T; ++t) {
    double g = 0;
    for (int i = 0; i < E; ++i)
      g += double(sh_router[static_cast<size_t>(i)]) * h[static_cast<size_t>(t * E + i)];
    g = 1 / (1 + std::exp(-g));
    for (int c = 0; c < E; ++c) {
      double acc = 0;
      for (int s = 0; s < NU; ++s) {
        const int slot = t * NU + s, e = experts[static_cast<size_t>(slot)];
        double y = 0;
        for (int r = 0; r < FE; ++r) {
          double a = 0, b = 0;
          for (int i = 0; i < E; ++i) {
            a += double(wg[static_cast<size_t>((e * FE + r) * E + i)]) * h[static_cast<size_t>(t * E + i)];
            b += double(wu[static_cast<size_t>((e * FE + r) * E + i)]) * h[static_cast<size_t>(t * E + i)];
          }
          y += double(wd[static_cast<size_t>((e * E + c) * FE + r)]) * (a / (1 + std::exp(-a)) * b);
        }
        acc += weights[static_cast<size_t>(slot)] * y;
      }
      want[static_cast<size_t>(t * E + c)] +=
          static_cast<float>(acc + g * shared[static_cast<size_t>(t * E + c)]);
    }
  }
  float* dh = put(h);
  int32_t *first = room<int32_t>(NE + 1), *slots = room<int32_t>(S), *active = room<int32_t>(NE + 1);
  int32_t* de = put(experts);
  ASSERT_EQ(cuda::moe_sort(de, S, NE, first, slots, active, stream()).message(), "");
  const auto f = get(first, NE + 1), sl = get(slots, S), ac = get(active, NE + 1);
  EXPECT_EQ(f, (std::vector<int32_t>{0, 1, 2, 2, 5, 6}));
  EXPECT_EQ(std::vector<int32_t>(ac.begin(), ac.begin() + 5), (std::vector<int32_t>{4, 0, 1, 3, 4}));
  for (int e = 0; e < NE; ++e) {
    std::set<int32_t> got(sl.begin() + f[static_cast<size_t>(e)], sl.begin() + f[static_cast<size_t>(e) + 1]),
        want_s;
    for (int s = 0; s < S; ++s)
      if (experts[static_cast<size_t>(s)] == e) want_s.insert(s);
    EXPECT_EQ(got, want_s) << "expert " << e;
  }
  float *act = room<float>(static_cast<size_t>(S * FE)), *out = room<float>(static_cast<size_t>(S * E));
  float* logit = room<float>(T);
  ASSERT_EQ(cuda::moe_experts({put(to_bf16(wg)), put(to_bf16(wu)), dh, false, nullptr, first, slots, active,
                               NE, NU, S, FE, E, act},
                              stream())
                .message(),
            "");
  ASSERT_EQ(cuda::moe_experts({put(to_bf16(wd)), nullptr, act, true, put(weights), first, slots, active, NE,
                               NU, S, E, FE, out},
                              stream())
                .message(),
            "");
  ASSERT_EQ(cuda::rows_dot_f32(put(sh_router), 1, E, dh, T, logit, stream()).message(), "");
  float* x = put(x0);
  ASSERT_EQ(cuda::moe_combine(out, T, NU, E, put(shared), logit, x, stream()).message(), "");
  expect_close(get(x, want.size()), want, 1e-5, "moe feed-forward vs float64");
}

// qwen3next's packed rows [b x r | alpha x r] per key head give the gates of separate rows.
TEST_F(CudaOps, PackedGatesEqualSeparateOnes) {
  const int T = 3, Hk = 2, Hv = 6, r = Hv / Hk;
  const auto ba = random_floats(static_cast<size_t>(T * 2 * Hv), 8, -3.0f, 3.0f);
  const auto dt = random_floats(Hv, 9), a = random_floats(Hv, 10, -2.0f, -0.1f);
  std::vector<float> b(static_cast<size_t>(T * Hv)), alpha(b.size());
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < Hv; ++h) {
      b[static_cast<size_t>(t * Hv + h)] = ba[static_cast<size_t>(t * 2 * Hv + (h / r) * 2 * r + h % r)];
      alpha[static_cast<size_t>(t * Hv + h)] =
          ba[static_cast<size_t>(t * 2 * Hv + (h / r) * 2 * r + r + h % r)];
    }
  float *g1 = room<float>(b.size()), *b1 = room<float>(b.size()), *g2 = room<float>(b.size()),
        *b2 = room<float>(b.size());
  ASSERT_EQ(cuda::gdn_gates(put(alpha), put(b), put(dt), put(a), T, Hv, g1, b1, stream()).message(), "");
  ASSERT_EQ(cuda::gdn_gates_packed(put(ba), put(dt), put(a), T, Hv, Hk, g2, b2, stream()).message(), "");
  expect_close(get(g2, b.size()), get(g1, b.size()), 0, "packed gates: g");
  expect_close(get(b2, b.size()), get(b1, b.size()), 0, "packed gates: beta");
}

#endif  // CHORUS_HAVE_CUDA

}  // namespace
}  // namespace chorus
