// The Gated DeltaNet layers of hybrid models (qwen35), per step:
//   1. projections of every token: raw [q | k | v] (before the convolution), the output gate z,
//      and the per-head decay g = ssm_a * softplus(alpha + dt_bias) and strength beta = sigmoid(b);
//   2. per written sequence, the state of its view: the cached one when the view is unchanged,
//      else composed from the blocks' summaries (GdnBlockOps::apply_block), for all sequences
//      before any of them writes (the same-step rule: context blocks as the step found them);
//   3. per written sequence, its tokens through the recurrence from that state, token by token,
//      then appended to its block's summary;
//   4. out = W_out (RMSNorm(o_h) * silu(z_h)) for every head h.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>

#include "device/cpu_device.h"
#include "engine/forward/cpu/cpu_runner.h"
#include "kernels/cpu/gdn.h"

namespace chorus {

using Clock = std::chrono::steady_clock;

void CpuRunner::linear_layer(int l, int64_t T, std::span<SequenceKv* const> seqs,
                             std::vector<LinearGroup>& groups) {
  const LayerWeights& L = w_.layers[static_cast<size_t>(l)];
  linear_projections(L, T);
  linear_view_states(l, seqs, groups);
  linear_factors(l, seqs, groups);
  linear_recurrence(l, seqs, groups);
  linear_output(L, T);
}

// 1. Projections of every token: [q | k | v], z, and each head's decay g and strength beta.
void CpuRunner::linear_projections(const LayerWeights& L, int64_t T) {
  const GdnConfig& d = c_.gdn;
  const int Hv = d.n_v_heads;
  if (L.w_ba.data != nullptr) {  // qwen3next: [beta x r | alpha x r] per key head, unpacked
    l_ba_.resize(static_cast<size_t>(T) * 2 * Hv);
    gemm({{&L.w_qkv, l_qkv_.data()}, {&L.w_z, l_z_.data()}, {&L.w_ba, l_ba_.data()}}, h_.data(), T);
    const int r = Hv / d.n_k_heads;
    for (int64_t t = 0; t < T; ++t)
      for (int g = 0; g < d.n_k_heads; ++g)
        for (int j = 0; j < r; ++j) {
          const float* ba = l_ba_.data() + t * 2 * Hv + g * 2 * r;
          l_beta_[static_cast<size_t>(t * Hv + g * r + j)] = ba[j];
          l_alpha_[static_cast<size_t>(t * Hv + g * r + j)] = ba[r + j];
        }
  } else {
    gemm({{&L.w_qkv, l_qkv_.data()},
          {&L.w_z, l_z_.data()},
          {&L.w_beta, l_beta_.data()},
          {&L.w_alpha, l_alpha_.data()}},
         h_.data(), T);
  }
  for (int64_t t = 0; t < T; ++t)
    for (int h = 0; h < Hv; ++h) {
      const float a = l_alpha_[static_cast<size_t>(t * Hv + h)] + L.dt_bias[h];
      const float softplus = a > 20.0f ? a : std::log1p(std::exp(a));
      l_gb_[static_cast<size_t>(t * Hv + h) * 2] = L.ssm_a[h] * softplus;
      l_gb_[static_cast<size_t>(t * Hv + h) * 2 + 1] =
          1.0f / (1.0f + std::exp(-l_beta_[static_cast<size_t>(t * Hv + h)]));
    }
}

void CpuRunner::linear_view_states(int l, std::span<SequenceKv* const> seqs,
                                   std::vector<LinearGroup>& groups) {
  const GdnConfig& d = c_.gdn;
  const LayerWeights& L = w_.layers[static_cast<size_t>(l)];
  const int C = d.conv_dim(), Hv = d.n_v_heads, dk = d.head_dim;
  const size_t state = static_cast<size_t>(dk) * dk;  // one head's state, dv == dk
  const size_t tail_floats = static_cast<size_t>(d.conv_kernel - 1) * C;
  using Mode = LinearGroup::Mode;
  auto layer_of = [&](int32_t blk) -> const LinearLayerState& {
    return seqs[static_cast<size_t>(blk)]->linear->layers[static_cast<size_t>(l)];
  };
  // 2. Each written sequence's view state, its tokens' factors and, when its view goes on after
  // it, their queries through the rest of the view. Reads other blocks' summaries as the step
  // found them; writes only the sequence's own cached state.
  const auto G = static_cast<int64_t>(groups.size());
  const auto t0 = Clock::now();
  for (const LinearGroup& g : groups) linear_stats_.compositions += g.compose;
  // Each distinct run of first blocks is composed once, its heads in parallel: 8 generates over
  // one context compose it once, not 8 times.
  std::vector<size_t> prefix_of(groups.size(), 0);
  std::vector<const LinearGroup*> reps;
  auto same = [](const LinearGroup& a, const LinearGroup& b) {
    return a.n_compose == b.n_compose &&
           std::equal(a.key.begin(), a.key.begin() + static_cast<long>(a.n_compose), b.key.begin());
  };
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const LinearGroup& g = groups[gi];
    if (!g.compose) continue;
    size_t p = 0;
    while (p < reps.size() && !same(*reps[p], g)) ++p;
    if (p == reps.size()) reps.push_back(&g);
    prefix_of[gi] = p;
  }
  if (prefix_S_.size() < reps.size()) prefix_S_.resize(reps.size());
  if (prefix_tails_.size() < reps.size()) prefix_tails_.resize(reps.size());
  for (size_t p = 0; p < reps.size(); ++p) {  // the tail before each block, and after the last
    prefix_S_[p].assign(state * Hv, 0.0f);
    auto& tails = prefix_tails_[p];
    tails.assign((reps[p]->n_compose + 1) * tail_floats, 0.0f);
    for (size_t b = 0; b < reps[p]->n_compose; ++b) {
      float* next = tails.data() + (b + 1) * tail_floats;
      std::copy_n(tails.data() + b * tail_floats, tail_floats, next);
      gdn_ops_[0]->advance_tail(layer_of(reps[p]->prefix[b].first), reps[p]->prefix[b].second, next);
    }
  }
  const int chunks = std::min(Hv, 2 * dev_.n_threads());
  dev_.pool().run(static_cast<int64_t>(reps.size()) * chunks, [&](int64_t i, int thread) {
    const auto p = static_cast<size_t>(i / chunks);
    const int c = static_cast<int>(i % chunks), h0 = c * Hv / chunks, h1 = (c + 1) * Hv / chunks;
    bool zero = true;
    for (size_t b = 0; b < reps[p]->n_compose; ++b)
      gdn_ops_[static_cast<size_t>(thread)]->apply_block(
          L.conv, layer_of(reps[p]->prefix[b].first), reps[p]->prefix[b].second, prefix_S_[p].data(),
          prefix_tails_[p].data() + b * tail_floats, &zero, h0, h1);
  });
  dev_.pool().run(G, [&](int64_t i, int thread) {
    LinearGroup& g = groups[static_cast<size_t>(i)];
    LinearLayerState& own = seqs[static_cast<size_t>(g.seq)]->linear->layers[static_cast<size_t>(l)];
    GdnBlockOps& ops = *gdn_ops_[static_cast<size_t>(thread)];
    if (g.mode == Mode::cached) return;
    const size_t p = prefix_of[static_cast<size_t>(i)];
    if (g.mode == Mode::recompose) {  // the prefix's state, then the writer's own tokens
      own.run_S = prefix_S_[p];
      own.run_tail.assign(prefix_tails_[p].end() - static_cast<long>(tail_floats), prefix_tails_[p].end());
      bool zero = g.prefix.empty();
      ops.apply_block(L.conv, own, g.start, own.run_S.data(), own.run_tail.data(), &zero);
    } else {  // chain: the base (when it changed), and the tail through the rest
      if (g.compose) {
        own.base_S = prefix_S_[p];
        own.base_tail.assign(prefix_tails_[p].end() - static_cast<long>(tail_floats), prefix_tails_[p].end());
      } else if (g.n_base == 0) {  // an empty base (the view starts at a changing block): the zero tail
        own.base_tail.assign(tail_floats, 0.0f);
      }
      own.run_tail = own.base_tail;
      for (size_t b = g.n_base; b < g.prefix.size(); ++b)
        ops.advance_tail(layer_of(g.prefix[b].first), g.prefix[b].second, own.run_tail.data());
    }
    ops.advance_tail(own, g.start, own.run_tail.data());
  });
  linear_stats_.compose_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
}

// The tokens' factors (q, k, v after the convolution) and, where the view goes on after the
// writer, their queries through the rest of it; a chain's output at once.
void CpuRunner::linear_factors(int l, std::span<SequenceKv* const> seqs, std::vector<LinearGroup>& groups) {
  const GdnConfig& d = c_.gdn;
  const LayerWeights& L = w_.layers[static_cast<size_t>(l)];
  const CpuKernels& K = dev_.kernels();
  const int C = d.conv_dim(), Hv = d.n_v_heads, dk = d.head_dim, kd = d.key_dim(), vd = d.value_dim();
  const size_t state = static_cast<size_t>(dk) * dk;  // one head's state, dv == dk
  using Mode = LinearGroup::Mode;
  auto layer_of = [&](int32_t blk) -> const LinearLayerState& {
    return seqs[static_cast<size_t>(blk)]->linear->layers[static_cast<size_t>(l)];
  };
  const auto G = static_cast<int64_t>(groups.size());
  const auto t0 = Clock::now();
  dev_.pool().run(G, [&](int64_t i, int thread) {
    LinearGroup& g = groups[static_cast<size_t>(i)];
    LinearLayerState& own = seqs[static_cast<size_t>(g.seq)]->linear->layers[static_cast<size_t>(l)];
    GdnBlockOps& ops = *gdn_ops_[static_cast<size_t>(thread)];
    const auto N = g.tokens.size();
    g.x.resize(N * C);
    g.gb.resize(N * Hv * 2);
    for (size_t s = 0; s < N; ++s) {
      const auto t = static_cast<size_t>(g.tokens[s]);
      std::copy_n(l_qkv_.data() + t * C, C, g.x.data() + s * C);
      std::copy_n(l_gb_.data() + t * Hv * 2, Hv * 2, g.gb.data() + s * Hv * 2);
    }
    g.q.resize(N * kd);
    g.k.resize(N * kd);
    g.v.resize(N * vd);
    ops.factors(L.conv, own.run_tail.data(), g.x.data(), static_cast<int>(N), g.q.data(), g.k.data(),
                g.v.data());
    if (g.suffix.empty() && g.mode != Mode::chain) return;
    // Queries through the blocks after the writer (y, c per token: output = S y + c).
    std::vector<std::pair<const LinearLayerState*, int64_t>> blocks;
    for (const auto& [blk, n] : g.suffix) blocks.emplace_back(&layer_of(blk), n);
    g.y.resize(N * vd);
    g.c.resize(N * vd);
    std::vector<float> tail(own.run_tail);
    for (size_t s = 0; s < N; ++s) {
      float* y = g.y.data() + s * vd;
      float* c = g.c.data() + s * vd;
      for (int h = 0; h < Hv; ++h)
        std::copy_n(g.q.data() + s * kd + static_cast<size_t>(d.k_head_of(h)) * dk, dk,
                    y + static_cast<size_t>(h) * dk);
      std::fill_n(c, vd, 0.0f);
      ops.shift_tail(tail.data(), g.x.data() + s * C, 1);  // the writer's last inputs, token s included
      if (!blocks.empty()) ops.query_through(L.conv, blocks, tail.data(), y, c);
    }
    if (g.mode != Mode::chain) return;
    // Chain (one token): on through the token's own map, the writer's block and the blocks
    // before it back to the view's unchanging first blocks, whose composed state the query
    // reads last (none: the zero state). The output is c.
    float* y = g.y.data();
    float* c = g.c.data();
    for (int h = 0; h < Hv; ++h)
      token_map_on_query(g.k.data() + static_cast<size_t>(d.k_head_of(h)) * dk,
                         g.v.data() + static_cast<size_t>(h) * dk, g.gb[static_cast<size_t>(h) * 2],
                         g.gb[static_cast<size_t>(h) * 2 + 1], y + static_cast<size_t>(h) * dk,
                         c + static_cast<size_t>(h) * dk, dk);
    blocks.clear();
    for (size_t b = g.n_base; b < g.prefix.size(); ++b)
      blocks.emplace_back(&layer_of(g.prefix[b].first), g.prefix[b].second);
    blocks.emplace_back(&own, g.start);
    ops.query_through(L.conv, blocks, own.base_tail.data(), y, c);
    if (g.n_base > 0)  // the base's state read with what is left of the query: c += S_base y
      for (int h = 0; h < Hv; ++h)
        K.gdn_query_dense(nullptr, own.base_S.data() + h * state, y + static_cast<size_t>(h) * dk,
                          c + static_cast<size_t>(h) * dk, nullptr, dk);
    std::copy_n(c, vd, l_o_.data() + static_cast<size_t>(g.tokens[0]) * vd);
  });

  linear_stats_.factor_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
}

void CpuRunner::linear_recurrence(int l, std::span<SequenceKv* const> seqs,
                                  std::vector<LinearGroup>& groups) {
  const GdnConfig& d = c_.gdn;
  const CpuKernels& K = dev_.kernels();
  const int Hv = d.n_v_heads, dk = d.head_dim, kd = d.key_dim(), vd = d.value_dim();
  const size_t state = static_cast<size_t>(dk) * dk;  // one head's state, dv == dk
  using Mode = LinearGroup::Mode;
  const auto G = static_cast<int64_t>(groups.size());
  // 3. The new tokens of each sequence, in order, from its view state; then into its block's
  // summary. The block's inputs and compact body first, one task a sequence; then the heads,
  // which are independent, one task a (sequence, head): a single long prefill uses every thread.
  folds_.resize(groups.size());
  dev_.pool().run(G, [&](int64_t i, int thread) {
    LinearGroup& g = groups[static_cast<size_t>(i)];
    LinearLayerState& own = seqs[static_cast<size_t>(g.seq)]->linear->layers[static_cast<size_t>(l)];
    GdnBlockOps& ops = *gdn_ops_[static_cast<size_t>(thread)];
    const int n = static_cast<int>(g.tokens.size());
    folds_[static_cast<size_t>(i)] =
        ops.begin_append(own, g.start, g.x.data(), g.k.data(), g.v.data(), g.gb.data(), n);
    ops.shift_tail(own.run_tail.data(), g.x.data(), n);
  });
  dev_.pool().run(G * Hv, [&](int64_t i, int thread) {
    LinearGroup& g = groups[static_cast<size_t>(i / Hv)];
    const int h = static_cast<int>(i % Hv);
    LinearLayerState& own = seqs[static_cast<size_t>(g.seq)]->linear->layers[static_cast<size_t>(l)];
    const GdnBlockOps::Fold& fold = folds_[static_cast<size_t>(i / Hv)];
    if (fold.active()) gdn_ops_[static_cast<size_t>(thread)]->fold_head(own, fold, h);
    if (g.mode == Mode::chain) return;
    const auto N = g.tokens.size();
    const bool suffix = !g.suffix.empty();
    float* S = own.run_S.data() + h * state;
    const size_t kh = static_cast<size_t>(d.k_head_of(h)) * dk, vh = static_cast<size_t>(h) * dk;
    // The query each token's output reads the state with: its own, or its query through the
    // rest of the view (then + c).
    auto query = [&](size_t s) { return suffix ? g.y.data() + s * vd + vh : g.q.data() + s * kd + kh; };
    auto out = [&](size_t s) { return l_o_.data() + static_cast<size_t>(g.tokens[s]) * vd + vh; };
    // Token by token: the recurrence gives the same bits however a block's tokens were cut
    // into steps (a dropped block rebuilt in other chunks equals the original exactly).
    for (size_t s = 0; s < N; ++s)
      K.gdn_step(S, query(s), g.k.data() + s * kd + kh, g.v.data() + s * vd + vh, g.gb[(s * Hv + h) * 2],
                 g.gb[(s * Hv + h) * 2 + 1], out(s), dk, dk);
    if (suffix)
      for (size_t s = 0; s < N; ++s) K.add(out(s), g.c.data() + s * vd + vh, dk);
  });
  for (size_t i = 0; i < groups.size(); ++i) {
    const LinearGroup& g = groups[i];
    GdnBlockOps::end_append(seqs[static_cast<size_t>(g.seq)]->linear->layers[static_cast<size_t>(l)],
                            folds_[i]);
    folds_[i] = {};  // a compact body's tokens, moved in when it turned dense, go with it
  }
}

void CpuRunner::linear_output(const LayerWeights& L, int64_t T) {
  const GdnConfig& d = c_.gdn;
  const CpuKernels& K = dev_.kernels();
  const int Hv = d.n_v_heads, dk = d.head_dim, vd = d.value_dim();
  // 4. The 1/sqrt(dk) query scale, gated norm per head, then the output projection into h_.
  const float scale = 1.0f / std::sqrt(static_cast<float>(dk));
  dev_.pool().run(T, [&](int64_t t, int) {
    for (int h = 0; h < Hv; ++h) {
      float* o = l_o_.data() + t * vd + h * dk;
      for (int i = 0; i < dk; ++i) o[i] *= scale;
      const float* z = l_z_.data() + t * vd + h * dk;
      K.rmsnorm(o, L.ssm_norm, o, dk, c_.norm_eps);
      K.swiglu(z, o, o, dk);  // o * silu(z), with ggml's silu
    }
  });
  gemm({{&L.w_ssm_out, h_.data()}}, l_o_.data(), T);
}

}  // namespace chorus
