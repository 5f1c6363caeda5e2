// Gated DeltaNet kernels against mathematics, in float64: the chunk-parallel form equals the
// token-by-token recurrence, a run's affine summary (A, B) applied to any start state equals
// running its tokens, composition is associative and splitting a run anywhere and composing
// the halves gives the whole. Tolerance: 1e-10 relative to the largest magnitude compared.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "engine/forward/linear_state.h"
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
  Tokens r{n,
           dk,
           dv,
           Vec(static_cast<size_t>(n) * dk),
           Vec(static_cast<size_t>(n) * dk),
           Vec(static_cast<size_t>(n) * dv),
           Vec(static_cast<size_t>(n)),
           Vec(static_cast<size_t>(n))};
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
      gdn::summary_append_chunk(s.A.data(), s.B.data(), r.K(t0), r.V(t0), r.g.data() + t0, r.beta.data() + t0,
                                n, r.dk, r.dv, scratch.data());
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
              static_cast<float>(r.g[static_cast<size_t>(t)]),
              static_cast<float>(r.beta[static_cast<size_t>(t)]), of.data() + t * r.dv, r.dk, r.dv);
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
      for (int c = 0; c < C; ++c)
        prev[static_cast<size_t>(j) * C + c] = src >= 0 ? x[static_cast<size_t>(src) * C + c] : 0.0;
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

// ---------------------------------------------------------------------------------------------
// Block states of a linear layer (engine/forward/linear_state.h), float: composing blocks explicitly
// equals running their tokens contiguously, and the query-side evaluation through the blocks
// after a writer (S y + c) equals forming that state explicitly.
namespace chorus {
namespace {

struct BlockFixture {
  GdnConfig d{4, 8, 2, 4, true};  // K 4, dk = dv 8, Hk 2, Hv 4
  std::mt19937 rng{31};
  std::vector<float> conv_w;
  BlockFixture() {
    std::normal_distribution<float> nd(0.0f, 0.5f);
    conv_w.resize(static_cast<size_t>(d.conv_dim()) * d.conv_kernel);
    for (auto& w : conv_w) w = nd(rng);
  }
  // n random raw inputs and (g, beta).
  void tokens(int n, std::vector<float>* x, std::vector<float>* gb) {
    std::normal_distribution<float> nd;
    std::uniform_real_distribution<float> ug(-0.8f, -0.01f), ub(0.1f, 0.9f);
    x->resize(static_cast<size_t>(n) * d.conv_dim());
    gb->resize(static_cast<size_t>(n) * d.n_v_heads * 2);
    for (auto& e : *x) e = nd(rng);
    for (size_t i = 0; i < gb->size(); i += 2) {
      (*gb)[i] = ug(rng);
      (*gb)[i + 1] = ub(rng);
    }
  }
};

// Writes a block of raw inputs after `tail` (its factors computed with that tail, as a writer
// would) into a fresh layer state.
LinearLayerState write_block(GdnBlockOps& ops, const BlockFixture& f, const std::vector<float>& tail,
                             const std::vector<float>& x, const std::vector<float>& gb) {
  const int n = static_cast<int>(gb.size() / (2 * f.d.n_v_heads));
  std::vector<float> q(static_cast<size_t>(n) * f.d.key_dim()), k(q.size()),
      v(static_cast<size_t>(n) * f.d.value_dim());
  LinearLayerState b;
  if (n == 0) return b;
  ops.factors(f.conv_w.data(), tail.data(), x.data(), n, q.data(), k.data(), v.data());
  ops.append(b, 0, x.data(), k.data(), v.data(), gb.data(), n);
  return b;
}

TEST(GdnBlocks, QueryThroughTheBlocksAfterTheWriterEqualsTheExplicitState) {
  BlockFixture f;
  GdnBlockOps ops(f.d, 1e-6f, cpu_kernels_scalar());
  const int dk = f.d.head_dim, Hv = f.d.n_v_heads, C = f.d.conv_dim(), keep = f.d.conv_kernel - 1;
  const size_t state = static_cast<size_t>(dk) * dk;
  // Suffix block shapes: short (1, 2 tokens: no body), compact body, dense body (>= dk).
  for (const std::vector<int>& lengths : std::vector<std::vector<int>>{{1}, {2, 5}, {13}, {30, 1, 9}}) {
    std::vector<LinearLayerState> blocks;
    std::vector<float> zeros(static_cast<size_t>(keep) * C, 0.0f), x, gb;
    for (int n : lengths) {
      f.tokens(n, &x, &gb);
      blocks.push_back(write_block(ops, f, zeros, x, gb));
    }
    std::vector<std::pair<const LinearLayerState*, int64_t>> suffix;
    for (size_t i = 0; i < blocks.size(); ++i) suffix.emplace_back(&blocks[i], lengths[i]);
    // A writer's state and tail, and a query.
    std::normal_distribution<float> nd;
    std::vector<float> S(state * Hv), tail(static_cast<size_t>(keep) * C),
        q(static_cast<size_t>(f.d.key_dim()));
    for (auto& e : S) e = nd(f.rng);
    for (auto& e : tail) e = nd(f.rng);
    for (auto& e : q) e = nd(f.rng);
    // Explicit: S' = S then every suffix block, then o = S' q.
    std::vector<float> S2(S), tail2(tail);
    bool zero = false;
    for (const auto& [b, n] : suffix) {
      ops.apply_block(f.conv_w.data(), *b, n, S2.data(), tail2.data(), &zero);
      ops.advance_tail(*b, n, tail2.data());
    }
    std::vector<float> y(static_cast<size_t>(Hv) * dk), c(y.size(), 0.0f);
    for (int h = 0; h < Hv; ++h)
      std::copy_n(q.data() + static_cast<size_t>(f.d.k_head_of(h)) * dk, dk,
                  y.data() + static_cast<size_t>(h) * dk);
    ops.query_through(f.conv_w.data(), suffix, tail.data(), y.data(), c.data());
    float max_o = 0, max_d = 0;
    for (int h = 0; h < Hv; ++h)
      for (int r = 0; r < dk; ++r) {
        float want = 0, got = c[static_cast<size_t>(h) * dk + r];
        for (int j = 0; j < dk; ++j) {
          want += S2[h * state + static_cast<size_t>(r) * dk + j] *
                  q[static_cast<size_t>(f.d.k_head_of(h)) * dk + j];
          got += S[h * state + static_cast<size_t>(r) * dk + j] * y[static_cast<size_t>(h) * dk + j];
        }
        max_o = std::max(max_o, std::fabs(want));
        max_d = std::max(max_d, std::fabs(got - want));
      }
    EXPECT_LE(max_d, 1e-5f * max_o) << "suffix of " << lengths.size() << " blocks, first " << lengths[0];
  }
}

// Blocks composed (each written after the ones before it) give the state of one contiguous run,
// whatever the split: heads convolved across boundaries, compact and dense bodies.
TEST(GdnBlocks, ComposedBlocksEqualOneContiguousRun) {
  BlockFixture f;
  GdnBlockOps ops(f.d, 1e-6f, cpu_kernels_scalar());
  const int dk = f.d.head_dim, Hv = f.d.n_v_heads, C = f.d.conv_dim(), keep = f.d.conv_kernel - 1;
  const size_t state = static_cast<size_t>(dk) * dk;
  std::vector<float> x, gb;
  f.tokens(40, &x, &gb);
  auto run = [&](const std::vector<int>& cuts) {
    std::vector<float> S(state * Hv, 0.0f), tail(static_cast<size_t>(keep) * C, 0.0f);
    bool zero = true;
    int at = 0;
    for (int n : cuts) {
      const std::vector<float> bx(x.begin() + static_cast<long>(at) * C,
                                  x.begin() + static_cast<long>(at + n) * C);
      const std::vector<float> bgb(gb.begin() + static_cast<long>(at) * Hv * 2,
                                   gb.begin() + static_cast<long>(at + n) * Hv * 2);
      const LinearLayerState b = write_block(ops, f, tail, bx, bgb);
      ops.apply_block(f.conv_w.data(), b, n, S.data(), tail.data(), &zero);
      ops.advance_tail(b, n, tail.data());
      at += n;
    }
    return S;
  };
  const auto whole = run({40});
  for (const std::vector<int>& cuts :
       std::vector<std::vector<int>>{{1, 39}, {2, 1, 37}, {20, 20}, {3, 3, 3, 31}}) {
    const auto got = run(cuts);
    float mx = 0, md = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      mx = std::max(mx, std::fabs(whole[i]));
      md = std::max(md, std::fabs(got[i] - whole[i]));
    }
    EXPECT_LE(md, 1e-5f * mx) << "first cut " << cuts[0];
  }
}

}  // namespace
}  // namespace chorus
