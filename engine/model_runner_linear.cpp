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
#include <cmath>
#include <map>

#include "engine/model_runner.h"
#include "gpu/cpu_device.h"
#include "kernels/cpu/gdn.h"

namespace chorus {

Status ModelRunner::plan_linear(std::span<const BatchToken> batch, std::span<SequenceKv* const> seqs,
                                std::span<const View> views, std::vector<LinearGroup>* groups) {
  std::map<int32_t, size_t> index;
  std::vector<int32_t> group_view;
  for (int64_t t = 0; t < static_cast<int64_t>(batch.size()); ++t) {
    const BatchToken& b = batch[static_cast<size_t>(t)];
    auto [it, fresh] = index.emplace(b.seq, groups->size());
    if (fresh) {
      LinearGroup g;
      g.seq = b.seq;
      g.start = seqs[static_cast<size_t>(b.seq)]->n_tokens;
      groups->push_back(std::move(g));
      group_view.push_back(b.view);
    }
    LinearGroup& g = (*groups)[it->second];
    if (group_view[it->second] != b.view)
      return make_error(Errc::invalid_argument, "sequence " + std::to_string(b.seq) +
                                                    ": its tokens in one step use different views (a hybrid "
                                                    "model's linear layers run a sequence's tokens in one order)");
    const int64_t want = g.start + static_cast<int64_t>(g.tokens.size());
    if (b.pos != want)
      return make_error(Errc::invalid_argument, "sequence " + std::to_string(b.seq) + ": position " +
                                                    std::to_string(b.pos) + " written where " + std::to_string(want) +
                                                    " comes next (a hybrid model's linear layers only append)");
    g.tokens.push_back(t);
  }
  // Own states first (created, or copied when shared), so that the keys below name them.
  for (LinearGroup& g : *groups) {
    SequenceKv& s = *seqs[static_cast<size_t>(g.seq)];
    if (!s.linear) {
      if (g.start > 0)
        return make_error(Errc::invalid_argument, "sequence " + std::to_string(g.seq) + " has " +
                                                      std::to_string(g.start) + " tokens but no linear-layer state");
      s.linear = LinearState::create(c_);
    } else if (s.linear.use_count() > 1) {
      s.linear = s.linear->clone();
    }
  }
  for (size_t gi = 0; gi < groups->size(); ++gi) {
    LinearGroup& g = (*groups)[gi];
    if (group_view[gi] >= 0) {
      bool own_seen = false;
      for (int32_t blk : views[static_cast<size_t>(group_view[gi])]) {
        if (blk == g.seq) {
          own_seen = true;
          continue;
        }
        const SequenceKv& s = *seqs[static_cast<size_t>(blk)];
        if (s.n_tokens == 0) continue;
        if (!s.linear)
          return make_error(Errc::invalid_argument, "sequence " + std::to_string(blk) + " has " +
                                                        std::to_string(s.n_tokens) + " tokens but no linear-layer state");
        if (s.linear->n_tokens != s.n_tokens)
          return make_error(Errc::unsupported, "a view reads sequence " + std::to_string(blk) + " at " +
                                                   std::to_string(s.n_tokens) + " tokens, but its linear-layer state "
                                                   "holds " + std::to_string(s.linear->n_tokens) +
                                                   " (a hybrid model's block is read at its full length only)");
        if (own_seen) {
          g.suffix.emplace_back(blk, s.n_tokens);
        } else {
          g.prefix.emplace_back(blk, s.n_tokens);
          g.key.emplace_back(s.linear->id, s.n_tokens);
        }
      }
    }
    const LinearState& own = *seqs[static_cast<size_t>(g.seq)]->linear;
    g.key.emplace_back(own.id, g.start);
    g.recompose = g.key != own.run_key;
  }
  return Status::success();
}

void ModelRunner::linear_layer(int l, int64_t T, std::span<SequenceKv* const> seqs, std::vector<LinearGroup>& groups) {
  const GdnConfig& d = c_.gdn;
  const LayerWeights& L = w_.layers[static_cast<size_t>(l)];
  const CpuKernels& K = dev_.kernels();
  const int E = c_.n_embd, C = d.conv_dim(), Hv = d.n_v_heads, dk = d.head_dim, kd = d.key_dim(), vd = d.value_dim();
  const size_t state = static_cast<size_t>(dk) * dk;  // one head's state, dv == dk
  const int keep = d.conv_kernel - 1;

  quantize(h_.data(), T, E, xq_.data());
  gemm({{&L.w_qkv, l_qkv_.data()}, {&L.w_z, l_z_.data()}, {&L.w_beta, l_beta_.data()}, {&L.w_alpha, l_alpha_.data()}},
       h_.data(), xq_.data(), T);
  for (int64_t t = 0; t < T; ++t)
    for (int h = 0; h < Hv; ++h) {
      const float a = l_alpha_[static_cast<size_t>(t * Hv + h)] + L.dt_bias[h];
      const float softplus = a > 20.0f ? a : std::log1p(std::exp(a));
      l_gb_[static_cast<size_t>(t * Hv + h) * 2] = L.ssm_a[h] * softplus;
      l_gb_[static_cast<size_t>(t * Hv + h) * 2 + 1] = 1.0f / (1.0f + std::exp(-l_beta_[static_cast<size_t>(t * Hv + h)]));
    }

  // 2. Each written sequence's view state, its tokens' factors and, when its view goes on after
  // it, their queries through the rest of the view. Reads other blocks' summaries as the step
  // found them; writes only the sequence's own cached state.
  const auto G = static_cast<int64_t>(groups.size());
  dev_.pool().run(G, [&](int64_t i, int thread) {
    LinearGroup& g = groups[static_cast<size_t>(i)];
    LinearLayerState& own = seqs[static_cast<size_t>(g.seq)]->linear->layers[static_cast<size_t>(l)];
    GdnBlockOps& ops = *gdn_ops_[static_cast<size_t>(thread)];
    if (g.recompose) {
      own.run_S.assign(state * Hv, 0.0f);
      own.run_tail.assign(static_cast<size_t>(keep) * C, 0.0f);
      bool zero = true;
      for (const auto& [blk, n] : g.prefix)
        ops.apply_block(L.conv, seqs[static_cast<size_t>(blk)]->linear->layers[static_cast<size_t>(l)], n,
                        own.run_S.data(), own.run_tail.data(), &zero);
      ops.apply_block(L.conv, own, g.start, own.run_S.data(), own.run_tail.data(), &zero);
    }
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
    ops.factors(L.conv, own.run_tail.data(), g.x.data(), static_cast<int>(N), g.q.data(), g.k.data(), g.v.data());
    if (g.suffix.empty()) return;
    std::vector<std::pair<const LinearLayerState*, int64_t>> suffix;
    for (const auto& [blk, n] : g.suffix)
      suffix.emplace_back(&seqs[static_cast<size_t>(blk)]->linear->layers[static_cast<size_t>(l)], n);
    g.y.resize(N * vd);
    g.c.resize(N * vd);
    std::vector<float> tail(own.run_tail);
    for (size_t s = 0; s < N; ++s) {
      ops.shift_tail(tail.data(), g.x.data() + s * C, 1);  // the writer's last inputs, token s included
      ops.suffix_query(L.conv, suffix, tail.data(), g.q.data() + s * kd, g.y.data() + s * vd, g.c.data() + s * vd);
    }
  });

  // 3. The new tokens of each sequence, in order, from its view state; then into its block's
  // summary.
  dev_.pool().run(G, [&](int64_t i, int thread) {
    LinearGroup& g = groups[static_cast<size_t>(i)];
    LinearLayerState& own = seqs[static_cast<size_t>(g.seq)]->linear->layers[static_cast<size_t>(l)];
    GdnBlockOps& ops = *gdn_ops_[static_cast<size_t>(thread)];
    const int n = static_cast<int>(g.tokens.size());
    const auto N = static_cast<size_t>(n);
    const bool suffix = !g.suffix.empty();
    for (int h = 0; h < Hv; ++h) {
      float* S = own.run_S.data() + h * state;
      const size_t kh = static_cast<size_t>(d.k_head_of(h)) * dk, vh = static_cast<size_t>(h) * dk;
      // The query each token's output reads the state with: its own, or its query through the
      // rest of the view (then + c).
      auto query = [&](size_t s) { return suffix ? g.y.data() + s * vd + vh : g.q.data() + s * kd + kh; };
      auto out = [&](size_t s) { return l_o_.data() + static_cast<size_t>(g.tokens[s]) * vd + vh; };
      // Token by token: the recurrence gives the same bits however a block's tokens were cut
      // into steps (a dropped block rebuilt in other chunks equals the original exactly); on
      // the CPU it costs what the chunk-parallel form (gdn::chunk, for the GPU) costs.
      for (size_t s = 0; s < N; ++s)
        gdn::step<float>(S, query(s), g.k.data() + s * kd + kh, g.v.data() + s * vd + vh, g.gb[(s * Hv + h) * 2],
                         g.gb[(s * Hv + h) * 2 + 1], out(s), dk, dk);
      if (suffix)
        for (size_t s = 0; s < N; ++s) {
          const float* c = g.c.data() + s * vd + vh;
          float* o = out(s);
          for (int j = 0; j < dk; ++j) o[j] += c[j];
        }
    }
    ops.append(own, g.start, g.x.data(), g.k.data(), g.v.data(), g.gb.data(), n);
    ops.shift_tail(own.run_tail.data(), g.x.data(), n);
  });

  // 4. Gated norm per head, then the output projection into h_.
  dev_.pool().run(T, [&](int64_t t, int) {
    for (int h = 0; h < Hv; ++h) {
      float* o = l_o_.data() + t * vd + h * dk;
      const float* z = l_z_.data() + t * vd + h * dk;
      K.rmsnorm(o, L.ssm_norm, o, dk, c_.norm_eps);
      for (int i = 0; i < dk; ++i) o[i] *= z[i] / (1.0f + std::exp(-z[i]));
    }
  });
  quantize(l_o_.data(), T, vd, xq_.data());
  gemm({{&L.w_ssm_out, h_.data()}}, l_o_.data(), xq_.data(), T);
}

}  // namespace chorus
