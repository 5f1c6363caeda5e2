// The Gated DeltaNet ops on the device against the CPU's (kernels/cpu/gdn.h, the scalar kernel
// table) and float64 arithmetic: decode, runs and summaries, the affine algebra, the small
// per-token ops, a block's bookkeeping on slots (engine/forward/cuda/cuda_linear.h), and chain reads. Label:
// gpu.
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>
#include <utility>
#include <vector>

#ifdef CHORUS_HAVE_CUDA
#include "kernels/cpu/gdn.h"
#include "tests/support/cuda_ops_fixture.h"
#endif

namespace chorus {
namespace {

#ifdef CHORUS_HAVE_CUDA

using namespace cuda_ops_test;

TEST_F(CudaOps, GatedDeltaNetDecodeMatchesTheCpuStep) {
  for (const bool kh_mod : {true, false}) {
    const int n_seq = 2, hk = 2, hv = 4, dk = 128, dv = 96;  // dk != dv: a swap of the two shows
    std::vector<std::vector<float>> S(n_seq);
    for (int s = 0; s < n_seq; ++s) S[s] = random_floats(hv * dv * dk, 20 + s, -0.1f, 0.1f);
    auto q = random_floats(n_seq * hk * dk, 30), k = random_floats(n_seq * hk * dk, 31);
    for (auto* x : {&q, &k})  // L2-normalised rows, as the model feeds them
      for (int r = 0; r < n_seq * hk; ++r) {
        double n2 = 0;
        for (int i = 0; i < dk; ++i) n2 += double((*x)[r * dk + i]) * (*x)[r * dk + i];
        for (int i = 0; i < dk; ++i) (*x)[r * dk + i] /= static_cast<float>(std::sqrt(n2));
      }
    const auto v = random_floats(n_seq * hv * dv, 32), g = random_floats(n_seq * hv, 33, -2, -0.01f),
               beta = random_floats(n_seq * hv, 34, 0.05f, 0.95f);
    std::vector<std::vector<float>> want_S = S;
    std::vector<float> want_out(n_seq * hv * dv);
    for (int s = 0; s < n_seq; ++s)
      for (int h = 0; h < hv; ++h) {
        const int kh = kh_mod ? h % hk : h / (hv / hk);
        ref().gdn_step(want_S[s].data() + h * dv * dk, q.data() + (s * hk + kh) * dk,
                       k.data() + (s * hk + kh) * dk, v.data() + (s * hv + h) * dv, g[s * hv + h],
                       beta[s * hv + h], want_out.data() + (s * hv + h) * dv, dk, dv);
      }
    std::vector<float*> states;
    for (int s = 0; s < n_seq; ++s) states.push_back(put(S[s]));
    cuda::GdnDecodeArgs a{
        put(states), put(q), put(k), put(v), put(g), put(beta), room<float>(want_out.size()),
        n_seq,       hk,     hv,     dk,     dv,     kh_mod};
    ASSERT_EQ(cuda::gdn_decode(a, stream()).message(), "");
    expect_close(get(a.out, want_out.size()), want_out, 2e-6, "gdn out");
    for (int s = 0; s < n_seq; ++s) expect_close(get(states[s], S[s].size()), want_S[s], 2e-6, "gdn state");
  }
}

// Gated DeltaNet over runs (prefill, summaries) and the affine algebra on the device:
//  - a state through two runs (37 tokens: more than a shared-memory chunk; and 5) equals the
//    float64 recurrence (gdn::step) and the same tokens through gdn_decode one at a time;
//  - the runs' summaries [A; B] equal gdn::summary_append in float64;
//  - a state through a summary (S A + B, cuBLAS) equals the state run through the tokens;
//  - two composed summaries equal the summary of both runs in one.
// Head sizes 64 and 16 (half a warp's lanes: the tiny hybrid test model's).
TEST_F(CudaOps, GatedDeltaNetRunsSummariesAndComposition) {
  for (const auto& [kh_mod, dk] :
       {std::pair{true, 64}, std::pair{false, 64}, std::pair{true, 16}, std::pair{false, 16}}) {
    const int hk = 2, hv = 4, dv = dk * 3 / 4, n1 = 37, n2 = 5, n = n1 + n2;
    auto q = random_floats(n * hk * dk, 50), k = random_floats(n * hk * dk, 51);
    for (auto* x : {&q, &k})
      for (int r = 0; r < n * hk; ++r) {
        double s2 = 0;
        for (int i = 0; i < dk; ++i) s2 += double((*x)[r * dk + i]) * (*x)[r * dk + i];
        for (int i = 0; i < dk; ++i) (*x)[r * dk + i] /= static_cast<float>(std::sqrt(s2));
      }
    const auto v = random_floats(n * hv * dv, 52), g = random_floats(n * hv, 53, -1.0f, -0.01f),
               beta = random_floats(n * hv, 54, 0.05f, 0.95f);
    const auto S0 = random_floats(hv * dv * dk, 55, -0.1f, 0.1f);
    auto kh_of = [&](int h) { return kh_mod ? h % hk : h / (hv / hk); };
    // float64 references: the state through all n tokens (outputs too), and each run's summary.
    std::vector<double> S(S0.begin(), S0.end()), out_want(static_cast<size_t>(n) * hv * dv);
    std::vector<double> sumA(2 * hv * dk * dk), sumB(2 * hv * dv * dk);
    std::vector<double> qd(q.begin(), q.end()), kd(k.begin(), k.end()), vd(v.begin(), v.end());
    for (int h = 0; h < hv; ++h)
      for (int r = 0; r < 2; ++r)
        gdn::summary_identity(&sumA[(r * hv + h) * dk * dk], &sumB[(r * hv + h) * dv * dk], dk, dv);
    for (int t = 0; t < n; ++t)
      for (int h = 0; h < hv; ++h) {
        const int r = t < n1 ? 0 : 1, kh = kh_of(h);
        const double* kt = &kd[(t * hk + kh) * dk];
        gdn::step(&S[h * dv * dk], &qd[(t * hk + kh) * dk], kt, &vd[(t * hv + h) * dv], double(g[t * hv + h]),
                  double(beta[t * hv + h]), &out_want[(t * hv + h) * dv], dk, dv);
        gdn::summary_append(&sumA[(r * hv + h) * dk * dk], &sumB[(r * hv + h) * dv * dk], kt,
                            &vd[(t * hv + h) * dv], double(g[t * hv + h]), double(beta[t * hv + h]), dk, dv);
      }
    auto as_float = [](const std::vector<double>& x) { return std::vector<float>(x.begin(), x.end()); };
    const std::vector<int32_t> first = {0, n1, n};
    float* dq = put(q);
    float* dk_ = put(k);
    float* dv_ = put(v);
    float* dg = put(g);
    float* db = put(beta);
    // The state through both runs, one after the other (a run each call: one matrix).
    float* st = put(S0);
    float* out = room<float>(static_cast<size_t>(n) * hv * dv);
    for (int r = 0; r < 2; ++r) {
      cuda::GdnRunsArgs a{put(std::vector<float*>{st}),
                          put(std::vector<int32_t>{first[r], first[r + 1]}),
                          dq,
                          dk_,
                          dv_,
                          dg,
                          db,
                          out,
                          1,
                          hk,
                          hv,
                          dk,
                          dv,
                          0,
                          kh_mod};
      ASSERT_EQ(cuda::gdn_runs(a, stream()).message(), "");
    }
    const auto S_run = get(st, S0.size());
    expect_close(S_run, as_float(S), 2e-5, "gdn_runs state");
    expect_close(get(out, out_want.size()), as_float(out_want), 2e-5, "gdn_runs outputs");
    // The same tokens through gdn_decode (head sizes in whole warps), one token per call.
    float* st2 = put(S0);
    float* o2 = room<float>(static_cast<size_t>(hv) * dv);
    float* const* st2p = put(std::vector<float*>{st2});
    for (int t = 0; t < n && dk % 32 == 0; ++t) {
      cuda::GdnDecodeArgs a{st2p,
                            dq + t * hk * dk,
                            dk_ + t * hk * dk,
                            dv_ + t * hv * dv,
                            dg + t * hv,
                            db + t * hv,
                            o2,
                            1,
                            hk,
                            hv,
                            dk,
                            dv,
                            kh_mod};
      ASSERT_EQ(cuda::gdn_decode(a, stream()).message(), "");
    }
    if (dk % 32 == 0) expect_close(get(st2, S0.size()), S_run, 1e-6, "gdn_runs vs gdn_decode");
    // Both runs' summaries at once, [A; B] per head, from the identity.
    const int64_t per_head = int64_t{dk + dv} * dk;
    std::vector<float> ident(static_cast<size_t>(hv * per_head), 0.0f);
    for (int h = 0; h < hv; ++h)
      for (int i = 0; i < dk; ++i) ident[static_cast<size_t>(h * per_head + i * dk + i)] = 1.0f;
    float* m1 = put(ident);
    float* m2 = put(ident);
    cuda::GdnRunsArgs sa{put(std::vector<float*>{m1, m2}),
                         put(first),
                         nullptr,
                         dk_,
                         dv_,
                         dg,
                         db,
                         nullptr,
                         2,
                         hk,
                         hv,
                         dk,
                         dv,
                         dk,
                         kh_mod};
    ASSERT_EQ(cuda::gdn_runs(sa, stream()).message(), "");
    for (int r = 0; r < 2; ++r) {
      const auto got = get(r == 0 ? m1 : m2, ident.size());
      std::vector<float> gotA, gotB, wantA, wantB;
      for (int h = 0; h < hv; ++h) {
        gotA.insert(gotA.end(), got.begin() + h * per_head, got.begin() + h * per_head + dk * dk);
        gotB.insert(gotB.end(), got.begin() + h * per_head + dk * dk, got.begin() + (h + 1) * per_head);
        wantA.insert(wantA.end(), sumA.begin() + (r * hv + h) * dk * dk,
                     sumA.begin() + (r * hv + h + 1) * dk * dk);
        wantB.insert(wantB.end(), sumB.begin() + (r * hv + h) * dv * dk,
                     sumB.begin() + (r * hv + h + 1) * dv * dk);
      }
      expect_close(gotA, wantA, 2e-5, "summary A, run " + std::to_string(r));
      expect_close(gotB, wantB, 2e-5, "summary B, run " + std::to_string(r));
    }
    // S0 through summary 1 then summary 2 (S A + B per head) = S0 through the tokens.
    float* s1 = room<float>(S0.size());
    float* s2 = room<float>(S0.size());
    float* s0 = put(S0);
    for (auto [x, m, o] : {std::tuple{s0, m1, s1}, std::tuple{s1, m2, s2}})
      ASSERT_TRUE(cuda_affine_f32_batched(*dev_, x, m, m + dk * dk, o, dv, dk, dk, int64_t{dv} * dk, per_head,
                                          per_head, int64_t{dv} * dk, hv)
                      .ok());
    expect_close(get(s2, S0.size()), S_run, 1e-4, "state through summaries");
    // Composition: (A1 A2, B1 A2 + B2) = the summary of all n tokens in one run.
    float* c = room<float>(ident.size());
    ASSERT_TRUE(
        cuda_affine_f32_batched(*dev_, m1, m2, nullptr, c, dk, dk, dk, per_head, per_head, 0, per_head, hv)
            .ok());
    ASSERT_TRUE(cuda_affine_f32_batched(*dev_, m1 + dk * dk, m2, m2 + dk * dk, c + dk * dk, dv, dk, dk,
                                        per_head, per_head, per_head, per_head, hv)
                    .ok());
    float* whole = put(ident);
    cuda::GdnRunsArgs wa{put(std::vector<float*>{whole}),
                         put(std::vector<int32_t>{0, n}),
                         nullptr,
                         dk_,
                         dv_,
                         dg,
                         db,
                         nullptr,
                         1,
                         hk,
                         hv,
                         dk,
                         dv,
                         dk,
                         kh_mod};
    ASSERT_EQ(cuda::gdn_runs(wa, stream()).message(), "");
    expect_close(get(c, ident.size()), get(whole, ident.size()), 1e-4, "composed summaries");
  }
}

// Gated DeltaNet's small ops against the CPU's: the causal conv with carried inputs (the CPU
// kernel table's gdn_conv), the L2 norm (gdn::l2_normalize), the gates (the formula of
// engine/forward/cpu/cpu_runner_linear.cpp, in double), and the query scale.
TEST_F(CudaOps, GatedDeltaNetSmallOps) {
  const int n = 5, C = 192, K = 4;
  const auto prev = random_floats((K - 1) * C, 70), x = random_floats(n * C, 71),
             w = random_floats(K * C, 72);
  std::vector<float> want(n * C);
  ref().gdn_conv(prev.data(), x.data(), n, w.data(), C, K, want.data());
  float* y = room<float>(n * C);
  ASSERT_EQ(cuda::gdn_conv(put(prev), put(x), n, put(w), C, K, y, stream()).message(), "");
  expect_close(get(y, n * C), want, 1e-6, "gdn_conv");

  const int rows = 6, dk = 128;
  auto q = random_floats(rows * dk, 73);
  // An all-zero row: divided by eps, it stays zero (no NaN).
  std::fill(q.begin() + 5 * dk, q.begin() + 6 * dk, 0.0f);
  std::vector<float> wq = q;
  for (int r = 0; r < rows; ++r) gdn::l2_normalize(wq.data() + r * dk, dk, 1e-6f);
  float* dq = put(q);
  ASSERT_EQ(cuda::l2norm_rows(dq, rows, dk, 1e-6f, stream()).message(), "");
  expect_close(get(dq, rows * dk), wq, 1e-6, "l2norm_rows");

  const int T = 3, hv = 32;
  const auto alpha = random_floats(T * hv, 74, -30, 30), b = random_floats(T * hv, 75, -8, 8),
             dt_bias = random_floats(hv, 76), ssm_a = random_floats(hv, 77, -5, -0.1f);
  std::vector<float> wg(T * hv), wb(T * hv);
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < hv; ++h) {
      const double a = double(alpha[t * hv + h]) + dt_bias[h];
      wg[t * hv + h] = static_cast<float>(ssm_a[h] * (a > 20 ? a : std::log1p(std::exp(a))));
      wb[t * hv + h] = static_cast<float>(1.0 / (1.0 + std::exp(-double(b[t * hv + h]))));
    }
  float *g = room<float>(T * hv), *beta = room<float>(T * hv);
  ASSERT_EQ(cuda::gdn_gates(put(alpha), put(b), put(dt_bias), put(ssm_a), T, hv, g, beta, stream()).message(),
            "");
  expect_close(get(g, T * hv), wg, 1e-6, "gdn_gates g");
  expect_close(get(beta, T * hv), wb, 1e-6, "gdn_gates beta");

  auto v = random_floats(100, 78);
  float* dv = put(v);
  ASSERT_EQ(cuda::scale(dv, 100, 0.125f, stream()).message(), "");
  for (float& e : v) e *= 0.125f;
  expect_close(get(dv, 100), v, 0, "scale");
}

// A block's bookkeeping ops (engine/forward/cuda/cuda_linear.h), against their definitions: the input
// window moved on by fewer and by more rows than it keeps, and in place; summaries reset to the
// identity map; a convolution's rows cut into q, k and v (q dropped too).
TEST_F(CudaOps, GatedDeltaNetBlockOps) {
  const int keep = 3, C = 300;
  for (const int n : {1, 2, 3, 7}) {
    const auto tail = random_floats(keep * C, 80 + n), x = random_floats(n * C, 90 + n);
    std::vector<float> all(tail);
    all.insert(all.end(), x.begin(), x.end());
    const std::vector<float> want(all.end() - keep * C, all.end());
    float* dt = put(tail);
    ASSERT_EQ(cuda::shift_rows(dt, keep, put(x), n, C, stream()).message(), "");
    expect_close(get(dt, keep * C), want, 0, "shift_rows by " + std::to_string(n));
  }
  const int heads = 3, dk = 16, dv = 16;
  float* m = put(random_floats(heads * (dk + dv) * dk, 99));
  ASSERT_EQ(cuda::gdn_summary_reset(m, heads, dk, dv, stream()).message(), "");
  std::vector<float> ident(static_cast<size_t>(heads * (dk + dv) * dk), 0.0f);
  for (int h = 0; h < heads; ++h)
    for (int i = 0; i < dk; ++i) ident[static_cast<size_t>(h * (dk + dv) * dk + i * dk + i)] = 1.0f;
  expect_close(get(m, ident.size()), ident, 0, "gdn_summary_reset");
  const int rows = 5, kd = 32, vd = 64, width = 2 * kd + vd;
  const auto y = random_floats(rows * width, 100);
  std::vector<float> wq, wk, wv;
  for (int r = 0; r < rows; ++r) {
    wq.insert(wq.end(), y.begin() + r * width, y.begin() + r * width + kd);
    wk.insert(wk.end(), y.begin() + r * width + kd, y.begin() + r * width + 2 * kd);
    wv.insert(wv.end(), y.begin() + r * width + 2 * kd, y.begin() + (r + 1) * width);
  }
  float *q = room<float>(wq.size()), *k = room<float>(wk.size()), *v = room<float>(wv.size());
  float* dy = put(y);
  ASSERT_EQ(cuda::split_qkv(dy, rows, kd, vd, q, k, v, stream()).message(), "");
  expect_close(get(q, wq.size()), wq, 0, "split_qkv q");
  expect_close(get(k, wk.size()), wk, 0, "split_qkv k");
  expect_close(get(v, wv.size()), wv, 0, "split_qkv v");
  float* k2 = room<float>(wk.size());
  ASSERT_EQ(cuda::split_qkv(dy, rows, kd, vd, nullptr, k2, v, stream()).message(), "");
  expect_close(get(k2, wk.size()), wk, 0, "split_qkv without q");

  // The per-sequence ops of a step on slots: three sequences of 4, 1 and 2 rows in slots 2, 0
  // and 1 (slots of 1000 floats, the tail part at 100), against the CPU's conv per sequence and
  // the shift above; then rows copied into slots.
  const int K = keep + 1, n_rows = 7;
  const std::vector<int32_t> first = {0, 4, 5, 7}, slot = {2, 0, 1}, row_seq = {0, 0, 0, 0, 1, 2, 2};
  const int64_t slot_floats = 100 + keep * C + 50, tail_at = 100;
  auto slots = random_floats(static_cast<int>(3 * slot_floats), 110);
  const auto xs = random_floats(n_rows * C, 111), w = random_floats(K * C, 112);
  std::vector<float> want_y(n_rows * C), want_slots = slots;
  for (int r = 0; r < 3; ++r) {
    const float* prev = slots.data() + slot[r] * slot_floats + tail_at;
    const int n = first[r + 1] - first[r];
    ref().gdn_conv(prev, xs.data() + first[r] * C, n, w.data(), C, K, want_y.data() + first[r] * C);
    std::vector<float> all(prev, prev + keep * C);
    all.insert(all.end(), xs.begin() + first[r] * C, xs.begin() + first[r + 1] * C);
    std::copy(all.end() - keep * C, all.end(), want_slots.begin() + slot[r] * slot_floats + tail_at);
  }
  float* dslots = put(slots);
  float* dx = put(xs);
  float* dyc = room<float>(n_rows * C);
  ASSERT_EQ(cuda::gdn_conv_slots(dx, n_rows, put(row_seq), put(first), put(slot), dslots, slot_floats,
                                 tail_at, put(w), C, K, dyc, stream())
                .message(),
            "");
  expect_close(get(dyc, n_rows * C), want_y, 1e-6, "gdn_conv_slots");
  ASSERT_EQ(
      cuda::shift_rows_slots(dslots, slot_floats, tail_at, put(slot), put(first), 3, keep, dx, C, stream())
          .message(),
      "");
  expect_close(get(dslots, want_slots.size()), want_slots, 0, "shift_rows_slots");
  const std::vector<cuda::SlotRow> moves = {{6, 1, 0}, {0, 2, 3}, {4, 0, 1}};
  const int at = 10, row_width = 20;
  for (const cuda::SlotRow& mv : moves)
    std::copy_n(xs.begin() + mv.src_row * row_width, row_width,
                want_slots.begin() + mv.slot * slot_floats + at + mv.dst_row * row_width);
  ASSERT_EQ(cuda::rows_to_slots(dx, row_width, put(moves), 3, dslots, slot_floats, at, stream()).message(),
            "");
  expect_close(get(dslots, want_slots.size()), want_slots, 0, "rows_to_slots");
}

// Chain reads (ops.h gdn_chain_inputs, gdn_chain_read) against mathematics: three writers' tokens,
// each reading a view kept as the device keeps blocks (raw head and tail rows, a summary [A; B]
// of the first body tokens, the rest buffered, a base's state and tail), must give S q of the
// float64 recurrence run through every token of the view from the zero state, with every
// token's factors from the view's own convolution. The views: a 7-token base, then blocks of 1,
// 24 (16 summarised, 5 buffered) and 2 tokens; no base, then 5 tokens (2 buffered) and an empty
// own block; a 2-token base (its tail partly zero), then 2 and 40 tokens (32 summarised). Rows a
// block or base does not hold are NaN, so reading one shows. Both key-head mappings.
TEST_F(CudaOps, GatedDeltaNetChainReadEqualsTheRecurrenceThroughTheView) {
  constexpr int dk = 32, Hk = 2, Hv = 4, kd = Hk * dk, vd = Hv * dk, C = 2 * kd + vd, keep = 3;
  constexpr float kEps = 1e-6f;
  const float nan = std::nanf("");
  cuda::GdnSlotParts parts{};
  int64_t slot_floats = 0;
  for (auto [dst, n] : {std::pair{&parts.S, Hv * dk * dk}, std::pair{&parts.tail, keep * C},
                        std::pair{&parts.base_tail, keep * C}, std::pair{&parts.run_tail, keep * C},
                        std::pair{&parts.head_x, keep * C}, std::pair{&parts.head_g, keep * Hv},
                        std::pair{&parts.head_b, keep * Hv}, std::pair{&parts.AB, Hv * 2 * dk * dk},
                        std::pair{&parts.ck, dk * kd}, std::pair{&parts.cv, dk * vd},
                        std::pair{&parts.cg, dk * Hv}, std::pair{&parts.cb, dk * Hv}}) {
    *dst = slot_floats;
    slot_floats += n;
  }
  struct Blk {
    int n, dense;
  };
  struct Case {
    int base;
    std::vector<Blk> blocks;  // the last is the writer's own
  };
  const std::vector<Case> cases = {
      {7, {{1, 0}, {24, 16}, {2, 0}}}, {0, {{5, 0}, {0, 0}}}, {2, {{2, 0}, {40, 32}}}};
  for (const bool kh_mod : {false, true}) {
    auto kh_of = [&](int h) { return kh_mod ? h % Hk : h / (Hv / Hk); };
    const auto w = random_floats(static_cast<size_t>((keep + 1) * C), 120, -0.5f, 0.5f);
    std::vector<float> slots(static_cast<size_t>(16 * slot_floats), nan);
    std::vector<cuda::GdnChainRead> reads;
    std::vector<cuda::GdnChainBlock> blocks;
    std::vector<cuda::GdnChainHead> heads;
    std::vector<float> q(3 * kd), k(3 * kd), v(3 * vd), g(3 * Hv), beta(3 * Hv);
    std::vector<float> want_out, want_tails, want_head_k;
    int32_t next_slot = 0;
    for (size_t ci = 0; ci < cases.size(); ++ci) {
      const Case& cs = cases[ci];
      // The view's tokens: raw inputs, gates; then each token's factors from the view's convolution.
      int n_all = cs.base + 1;
      for (const Blk& b : cs.blocks) n_all += b.n;
      const auto x = random_floats(static_cast<size_t>(n_all * C), 130 + static_cast<uint32_t>(ci));
      const auto lg =
          random_floats(static_cast<size_t>(n_all * Hv), 140 + static_cast<uint32_t>(ci), -0.4f, 0.0f);
      const auto bt =
          random_floats(static_cast<size_t>(n_all * Hv), 150 + static_cast<uint32_t>(ci), 0.0f, 1.0f);
      std::vector<double> fq(static_cast<size_t>(n_all * kd)), fk(fq.size()),
          fv(static_cast<size_t>(n_all * vd));
      for (int t = 0; t < n_all; ++t) {
        std::vector<double> y(C);
        for (int c = 0; c < C; ++c) {
          double acc = 0;
          for (int j = 0; j <= keep; ++j)
            if (t - keep + j >= 0)
              acc +=
                  double(w[static_cast<size_t>(j * C + c)]) * x[static_cast<size_t>((t - keep + j) * C + c)];
          y[static_cast<size_t>(c)] = acc / (1 + std::exp(-acc));
        }
        for (int hh = 0; hh < Hk; ++hh)
          for (auto [dst, off] : {std::pair{&fq, 0}, std::pair{&fk, kd}}) {
            double norm = 0;
            for (int i = 0; i < dk; ++i)
              norm += y[static_cast<size_t>(off + hh * dk + i)] * y[static_cast<size_t>(off + hh * dk + i)];
            norm = std::max(std::sqrt(norm), double(kEps));
            for (int i = 0; i < dk; ++i)
              (*dst)[static_cast<size_t>(t * kd + hh * dk + i)] =
                  y[static_cast<size_t>(off + hh * dk + i)] / norm;
          }
        for (int i = 0; i < vd; ++i) fv[static_cast<size_t>(t * vd + i)] = y[static_cast<size_t>(2 * kd + i)];
      }
      // One token's map on a [rows][dk] matrix per value head: M <- e^g M (I - beta k k^T) + beta v k^T
      // (v zero for the rows of A).
      auto step = [&](std::vector<double>& M, int rows, bool with_v, int t, int h) {
        const double* kk = &fk[static_cast<size_t>(t * kd + kh_of(h) * dk)];
        const double e = std::exp(double(lg[static_cast<size_t>(t * Hv + h)])),
                     b = bt[static_cast<size_t>(t * Hv + h)];
        for (int r = 0; r < rows; ++r) {
          double* row = &M[static_cast<size_t>(r * dk)];
          double sk = 0;
          for (int i = 0; i < dk; ++i) sk += e * row[i] * kk[i];
          const double vi = with_v ? fv[static_cast<size_t>(t * vd + h * dk + r % dk)] : 0.0;
          for (int i = 0; i < dk; ++i) row[i] = e * row[i] + b * (vi - sk) * kk[i];
        }
      };
      // The oracle: the recurrence through every token; the base's state on the way.
      std::vector<std::vector<double>> S(Hv, std::vector<double>(dk * dk, 0.0)), base_S;
      for (int t = 0; t < n_all; ++t) {
        if (t == cs.base) base_S = S;
        for (int h = 0; h < Hv; ++h) step(S[static_cast<size_t>(h)], dk, true, t, h);
      }
      const int row = static_cast<int>(ci);
      for (int h = 0; h < Hv; ++h)
        for (int i = 0; i < dk; ++i) {
          double o = 0;
          for (int j = 0; j < dk; ++j)
            o += S[static_cast<size_t>(h)][static_cast<size_t>(i * dk + j)] *
                 fq[static_cast<size_t>((n_all - 1) * kd + kh_of(h) * dk + j)];
          want_out.push_back(static_cast<float>(o));
        }
      for (int j = 0; j < keep; ++j)  // the run tail: the raw inputs before the token
        for (int c = 0; c < C; ++c) {
          const int t = n_all - 1 - keep + j;
          want_tails.push_back(t >= 0 ? x[static_cast<size_t>(t * C + c)] : 0.0f);
        }
      // The writer's token row.
      const int tw = n_all - 1;
      for (int i = 0; i < kd; ++i) {
        q[static_cast<size_t>(row * kd + i)] = static_cast<float>(fq[static_cast<size_t>(tw * kd + i)]);
        k[static_cast<size_t>(row * kd + i)] = static_cast<float>(fk[static_cast<size_t>(tw * kd + i)]);
      }
      for (int i = 0; i < vd; ++i)
        v[static_cast<size_t>(row * vd + i)] = static_cast<float>(fv[static_cast<size_t>(tw * vd + i)]);
      for (int h = 0; h < Hv; ++h) {
        g[static_cast<size_t>(row * Hv + h)] = lg[static_cast<size_t>(tw * Hv + h)];
        beta[static_cast<size_t>(row * Hv + h)] = bt[static_cast<size_t>(tw * Hv + h)];
      }
      // The blocks as the device keeps them; the reader's slot is its own block's.
      const int32_t reader = next_slot + static_cast<int32_t>(cs.blocks.size()) - 1;
      float* rs = slots.data() + reader * slot_floats;
      reads.push_back({row, reader, static_cast<int32_t>(blocks.size()),
                       static_cast<int32_t>(cs.blocks.size()), cs.base > 0});
      if (cs.base > 0) {
        for (int h = 0; h < Hv; ++h)
          for (int i = 0; i < dk * dk; ++i)
            rs[parts.S + h * dk * dk + i] =
                static_cast<float>(base_S[static_cast<size_t>(h)][static_cast<size_t>(i)]);
        for (int j = 0; j < keep; ++j)
          for (int c = 0; c < C; ++c) {
            const int t = cs.base - keep + j;
            rs[parts.base_tail + j * C + c] = t >= 0 ? x[static_cast<size_t>(t * C + c)] : 0.0f;
          }
      }
      int at = cs.base;  // the block's first token in the view
      for (const Blk& b : cs.blocks) {
        const int32_t slot = next_slot++;
        float* p = slots.data() + slot * slot_floats;
        const int n_head = std::min(b.n, keep), n_buf = b.n - n_head - b.dense;
        blocks.push_back({slot, b.n, b.dense, static_cast<int32_t>(heads.size())});
        for (int j = 0; j < n_head; ++j) {
          heads.push_back(
              {static_cast<int32_t>(reads.size() - 1), static_cast<int32_t>(blocks.size() - 1), j});
          for (int i = 0; i < kd; ++i)
            want_head_k.push_back(static_cast<float>(fk[static_cast<size_t>((at + j) * kd + i)]));
          std::copy_n(x.begin() + (at + j) * C, C, p + parts.head_x + j * C);
          for (int h = 0; h < Hv; ++h) {
            p[parts.head_g + j * Hv + h] = lg[static_cast<size_t>((at + j) * Hv + h)];
            p[parts.head_b + j * Hv + h] = bt[static_cast<size_t>((at + j) * Hv + h)];
          }
        }
        for (int j = keep - n_head; j < keep; ++j)  // the last min(n, keep) inputs, right-aligned
          std::copy_n(x.begin() + (at + b.n - keep + j) * C, C, p + parts.tail + j * C);
        if (b.dense > 0)
          for (int h = 0; h < Hv; ++h) {
            std::vector<double> AB(2 * dk * dk, 0.0);
            for (int i = 0; i < dk; ++i) AB[static_cast<size_t>(i * dk + i)] = 1.0;
            std::vector<double> A(AB.begin(), AB.begin() + dk * dk), B(AB.begin() + dk * dk, AB.end());
            for (int t = at + n_head; t < at + n_head + b.dense; ++t) {
              step(A, dk, false, t, h);
              step(B, dk, true, t, h);
            }
            for (int i = 0; i < dk * dk; ++i) {
              p[parts.AB + h * 2 * dk * dk + i] = static_cast<float>(A[static_cast<size_t>(i)]);
              p[parts.AB + h * 2 * dk * dk + dk * dk + i] = static_cast<float>(B[static_cast<size_t>(i)]);
            }
          }
        for (int j = 0; j < n_buf; ++j) {
          const int t = at + n_head + b.dense + j;
          for (int i = 0; i < kd; ++i)
            p[parts.ck + j * kd + i] = static_cast<float>(fk[static_cast<size_t>(t * kd + i)]);
          for (int i = 0; i < vd; ++i)
            p[parts.cv + j * vd + i] = static_cast<float>(fv[static_cast<size_t>(t * vd + i)]);
          for (int h = 0; h < Hv; ++h) {
            p[parts.cg + j * Hv + h] = lg[static_cast<size_t>(t * Hv + h)];
            p[parts.cb + j * Hv + h] = bt[static_cast<size_t>(t * Hv + h)];
          }
        }
        at += b.n;
      }
    }
    const int n_heads = static_cast<int>(heads.size()), n_reads = static_cast<int>(reads.size());
    float* dslots = put(slots);
    float *hy = room<float>(static_cast<size_t>(n_heads * C)),
          *hk = room<float>(static_cast<size_t>(n_heads * kd)),
          *hv = room<float>(static_cast<size_t>(n_heads * vd)), *out = room<float>(3 * vd);
    cuda::GdnChainArgs a{put(reads), n_reads, put(blocks), put(heads), n_heads, dslots,    slot_floats,
                         0,          parts,   put(w),      C,          keep,    hy,        hk,
                         hv,         put(q),  put(k),      put(v),     put(g),  put(beta), out,
                         Hk,         Hv,      dk,          kh_mod};
    ASSERT_EQ(cuda::gdn_chain_inputs(a, stream()).message(), "");
    ASSERT_EQ(cuda::split_qkv(hy, n_heads, kd, vd, nullptr, hk, hv, stream()).message(), "");
    ASSERT_EQ(cuda::l2norm_rows(hk, n_heads * Hk, dk, kEps, stream()).message(), "");
    ASSERT_EQ(cuda::gdn_chain_read(a, stream()).message(), "");
    const std::string how = kh_mod ? " (kh = h mod Hk)" : " (kh = h / (Hv/Hk))";
    expect_close(get(hk, want_head_k.size()), want_head_k, 1e-5, "gdn_chain_inputs: head keys" + how);
    const auto got_slots = get(dslots, slots.size());
    std::vector<float> got_tails;
    for (const cuda::GdnChainRead& r : reads)
      got_tails.insert(got_tails.end(), got_slots.begin() + r.slot * slot_floats + parts.run_tail,
                       got_slots.begin() + r.slot * slot_floats + parts.run_tail + keep * C);
    expect_close(got_tails, want_tails, 0, "gdn_chain_inputs: run tails" + how);
    expect_close(get(out, 3 * vd), want_out, 2e-4, "gdn_chain_read vs the float64 recurrence" + how);
  }
  cuda::GdnChainArgs bad{};
  bad.dk = 48;
  EXPECT_NE(cuda::gdn_chain_read(bad, nullptr).message().find("dk 48"), std::string::npos);
}

#endif  // CHORUS_HAVE_CUDA

}  // namespace
}  // namespace chorus
