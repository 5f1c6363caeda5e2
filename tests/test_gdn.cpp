// Gated DeltaNet kernels against mathematics, in float64: the chunk-parallel form equals the
// token-by-token recurrence, a run's affine summary (A, B) applied to any start state equals
// running its tokens, composition is associative and splitting a run anywhere and composing
// the halves gives the whole. Tolerance: 1e-10 relative to the largest magnitude compared.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/gdn.h"

namespace chorus {
namespace {

using Vec = std::vector<double>;

// n tokens of one head: L2-normalised keys and queries, values, log-decays and write strengths.
struct Tokens {
  int n, dk, dv;
  Vec q, k, v, g, beta;
  // Rows [a, b) as pointers.
  const double* Q(int t) const { return q.data() + static_cast<size_t>(t) * dk; }
  const double* K(int t) const { return k.data() + static_cast<size_t>(t) * dk; }
  const double* V(int t) const { return v.data() + static_cast<size_t>(t) * dv; }
};

Tokens random_run(std::mt19937& rng, int n, int dk, int dv, double g_min = -0.6) {
  std::normal_distribution<double> nd;
  std::uniform_real_distribution<double> ug(g_min, 0.0), ub(0.05, 0.95);
  Tokens r{n, dk, dv, Vec(static_cast<size_t>(n) * dk), Vec(static_cast<size_t>(n) * dk),
        Vec(static_cast<size_t>(n) * dv), Vec(static_cast<size_t>(n)), Vec(static_cast<size_t>(n))};
  for (auto& x : r.q) x = nd(rng);
  for (auto& x : r.k) x = nd(rng);
  for (auto& x : r.v) x = nd(rng);
  for (int t = 0; t < n; ++t) {
    gdn::l2_normalize(r.q.data() + static_cast<size_t>(t) * dk, dk, 1e-6);
    gdn::l2_normalize(r.k.data() + static_cast<size_t>(t) * dk, dk, 1e-6);
    r.g[static_cast<size_t>(t)] = ug(rng);
    r.beta[static_cast<size_t>(t)] = ub(rng);
  }
  return r;
}

Vec random_state(std::mt19937& rng, int dv, int dk) {
  std::normal_distribution<double> nd;
  Vec s(static_cast<size_t>(dv) * dk);
  for (auto& x : s) x = nd(rng);
  return s;
}

double rel_diff(const Vec& a, const Vec& b) {
  double mx = 0, md = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    mx = std::max(mx, std::fabs(b[i]));
    md = std::max(md, std::fabs(a[i] - b[i]));
  }
  return md / mx;
}

// Token-by-token recurrence over tokens [a, b): the oracle.
void recur(const Tokens& r, Vec& S, int a, int b, Vec* out) {
  for (int t = a; t < b; ++t)
    gdn::step(S.data(), r.Q(t), r.K(t), r.V(t), r.g[static_cast<size_t>(t)], r.beta[static_cast<size_t>(t)],
              out ? out->data() + static_cast<size_t>(t) * r.dv : nullptr, r.dk, r.dv);
}

struct Summary {
  Vec A, B;
};

Summary summarize(const Tokens& r, int a, int b) {
  Summary s{Vec(static_cast<size_t>(r.dk) * r.dk), Vec(static_cast<size_t>(r.dv) * r.dk)};
  gdn::summary_identity(s.A.data(), s.B.data(), r.dk, r.dv);
  for (int t = a; t < b; ++t)
    gdn::summary_append(s.A.data(), s.B.data(), r.K(t), r.V(t), r.g[static_cast<size_t>(t)],
                        r.beta[static_cast<size_t>(t)], r.dk, r.dv);
  return s;
}

Summary compose(const Summary& L, const Summary& R, int dk, int dv) {
  Summary s{Vec(L.A.size()), Vec(L.B.size())};
  gdn::summary_compose(L.A.data(), L.B.data(), R.A.data(), R.B.data(), s.A.data(), s.B.data(), dk, dv);
  return s;
}

constexpr double kTol = 1e-10;

TEST(Gdn, ChunkedFormEqualsRecurrence) {
  std::mt19937 rng(7);
  for (double g_min : {-0.6, -6.0}) {  // mild and strong decay
    const Tokens r = random_run(rng, 53, 16, 24, g_min);
    const Vec S0 = random_state(rng, r.dv, r.dk);
    Vec want_S = S0, want_o(static_cast<size_t>(r.n) * r.dv);
    recur(r, want_S, 0, r.n, &want_o);
    for (int c : {1, 2, 7, 16, 53, 64}) {
      Vec S = S0, o(want_o.size());
      Vec scratch(gdn::chunk_scratch(c, r.dv));
      for (int t0 = 0; t0 < r.n; t0 += c) {
        const int n = std::min(c, r.n - t0);
        gdn::chunk(S.data(), r.Q(t0), r.K(t0), r.V(t0), r.g.data() + t0, r.beta.data() + t0, n,
                   o.data() + static_cast<size_t>(t0) * r.dv, r.dk, r.dv, scratch.data());
      }
      EXPECT_LE(rel_diff(o, want_o), kTol) << "outputs, chunk " << c << ", g_min " << g_min;
      EXPECT_LE(rel_diff(S, want_S), kTol) << "state, chunk " << c << ", g_min " << g_min;
    }
  }
}

TEST(Gdn, SummaryAppliedToAnyStateEqualsRunningTheTokens) {
  std::mt19937 rng(11);
  const Tokens r = random_run(rng, 40, 12, 20);
  const Summary s = summarize(r, 0, r.n);
  for (int trial = 0; trial < 3; ++trial) {
    const Vec S0 = trial == 0 ? Vec(static_cast<size_t>(r.dv) * r.dk, 0.0) : random_state(rng, r.dv, r.dk);
    Vec want = S0;
    recur(r, want, 0, r.n, nullptr);
    Vec got = S0, tmp(got.size());
    gdn::summary_apply(got.data(), s.A.data(), s.B.data(), r.dk, r.dv, tmp.data());
    EXPECT_LE(rel_diff(got, want), kTol) << "trial " << trial;
  }
  // B alone is the state the run leaves from zero.
  Vec zero(static_cast<size_t>(r.dv) * r.dk, 0.0);
  recur(r, zero, 0, r.n, nullptr);
  EXPECT_LE(rel_diff(s.B, zero), kTol);
}

TEST(Gdn, SplitAnywhereAndComposeEqualsTheWhole) {
  std::mt19937 rng(13);
  const Tokens r = random_run(rng, 30, 8, 10);
  const Summary whole = summarize(r, 0, r.n);
  for (int p = 0; p <= r.n; ++p) {
    const Summary c = compose(summarize(r, 0, p), summarize(r, p, r.n), r.dk, r.dv);
    EXPECT_LE(rel_diff(c.A, whole.A), kTol) << "split at " << p;
    EXPECT_LE(rel_diff(c.B, whole.B), kTol) << "split at " << p;
  }
}

TEST(Gdn, CompositionIsAssociativeButNotCommutative) {
  std::mt19937 rng(17);
  const Tokens r = random_run(rng, 36, 8, 12);
  const Summary a = summarize(r, 0, 5), b = summarize(r, 5, 6), c = summarize(r, 6, r.n);
  const Summary left = compose(compose(a, b, r.dk, r.dv), c, r.dk, r.dv);
  const Summary right = compose(a, compose(b, c, r.dk, r.dv), r.dk, r.dv);
  EXPECT_LE(rel_diff(left.A, right.A), kTol);
  EXPECT_LE(rel_diff(left.B, right.B), kTol);
  // The order of blocks matters: a view [c, a] is not the view [a, c]. (Guards against a
  // composition that ignores order and would pass the tests above on symmetric data.)
  const Summary ac = compose(a, c, r.dk, r.dv), ca = compose(c, a, r.dk, r.dv);
  EXPECT_GT(rel_diff(ac.B, ca.B), 1e-3);
}

TEST(Gdn, ChunkedSummaryAppendEqualsTokenByToken) {
  std::mt19937 rng(19);
  const Tokens r = random_run(rng, 45, 16, 8);
  const Summary want = summarize(r, 0, r.n);
  for (int c : {3, 16, 45}) {
    Summary s{Vec(want.A.size()), Vec(want.B.size())};
    gdn::summary_identity(s.A.data(), s.B.data(), r.dk, r.dv);
    Vec scratch(gdn::chunk_scratch(c, std::max(r.dk, r.dv)));
    for (int t0 = 0; t0 < r.n; t0 += c) {
      const int n = std::min(c, r.n - t0);
      gdn::summary_append_chunk(s.A.data(), s.B.data(), r.K(t0), r.V(t0), r.g.data() + t0, r.beta.data() + t0, n,
                                r.dk, r.dv, scratch.data());
    }
    EXPECT_LE(rel_diff(s.A, want.A), kTol) << "chunk " << c;
    EXPECT_LE(rel_diff(s.B, want.B), kTol) << "chunk " << c;
  }
}

// The float instantiation (the engine's) tracks the float64 reference to float rounding.
TEST(Gdn, FloatRecurrenceTracksDouble) {
  std::mt19937 rng(23);
  const Tokens r = random_run(rng, 64, 32, 32);
  Vec S(static_cast<size_t>(r.dv) * r.dk, 0.0), o(static_cast<size_t>(r.n) * r.dv);
  recur(r, S, 0, r.n, &o);
  std::vector<float> Sf(S.size(), 0.0f), of(o.size());
  auto f = [](const Vec& v) { return std::vector<float>(v.begin(), v.end()); };
  const auto q = f(r.q), k = f(r.k), v = f(r.v);
  for (int t = 0; t < r.n; ++t)
    gdn::step(Sf.data(), q.data() + t * r.dk, k.data() + t * r.dk, v.data() + t * r.dv,
              static_cast<float>(r.g[static_cast<size_t>(t)]), static_cast<float>(r.beta[static_cast<size_t>(t)]),
              of.data() + t * r.dv, r.dk, r.dv);
  EXPECT_LE(rel_diff(Vec(of.begin(), of.end()), o), 1e-5);
}

// Causal convolution: a sequence cut anywhere, the second part given the first part's last K-1
// inputs, equals the uncut sequence; the first K-1 outputs see zeros before the start.
TEST(Gdn, ConvolutionWithCarriedInputsEqualsUncut) {
  std::mt19937 rng(29);
  std::normal_distribution<double> nd;
  const int C = 6, K = 4, n = 11;
  Vec x(static_cast<size_t>(n) * C), w(static_cast<size_t>(C) * K);
  for (auto& e : x) e = nd(rng);
  for (auto& e : w) e = nd(rng);
  const Vec zeros(static_cast<size_t>(K - 1) * C, 0.0);
  Vec whole(x.size());
  gdn::conv_causal(zeros.data(), x.data(), n, w.data(), C, K, true, whole.data());
  // Direct formula at t = 1, c = 2: inputs x[-2], x[-1] are zero.
  double acc = w[2 * K + 2] * x[0 * C + 2] + w[2 * K + 3] * x[1 * C + 2];
  EXPECT_NEAR(whole[1 * C + 2], acc / (1 + std::exp(-acc)), 1e-15);
  for (int cut = 0; cut <= n; ++cut) {
    Vec prev(zeros);
    for (int j = 0; j < K - 1; ++j) {  // the K-1 inputs before the cut (zeros before the start)
      const int src = cut - (K - 1) + j;
      for (int c = 0; c < C; ++c) prev[static_cast<size_t>(j) * C + c] = src >= 0 ? x[static_cast<size_t>(src) * C + c] : 0.0;
    }
    Vec got(x.size());
    gdn::conv_causal(zeros.data(), x.data(), cut, w.data(), C, K, true, got.data());
    gdn::conv_causal(prev.data(), x.data() + static_cast<size_t>(cut) * C, n - cut, w.data(), C, K, true,
                     got.data() + static_cast<size_t>(cut) * C);
    EXPECT_EQ(got, whole) << "cut at " << cut;
  }
}

}  // namespace
}  // namespace chorus
