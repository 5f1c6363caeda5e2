// Mixture-of-experts feed-forward (qwen35moe), in llama.cpp's order of operations:
//   p = softmax(W_router h) over all experts; the n_expert_used most probable, their p
//   renormalised (sum clamped at 2^-14) and scaled by expert_weights_scale when set;
//   moe = sum over the selected slots, in order, of p_slot * W_down(silu(W_gate h) * W_up h);
//   out = moe + sigmoid(w_shared . h) * shared FFN(h);  x += out.
// Each expert's matrices run once per step over the tokens that chose it (gathered rows).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "device/cpu_device.h"
#include "engine/forward/cpu/cpu_runner.h"

namespace chorus {

// The router's probabilities of each token (h_ normed from x_).
void CpuRunner::moe_router(const LayerWeights& L, int64_t T) {
  const CpuKernels& K = dev_.kernels();
  const int E = c_.n_embd, NE = c_.n_expert;
  const auto ut = static_cast<size_t>(T);
  dev_.pool().run(T, [&](int64_t t, int) {
    K.rmsnorm(x_.data() + t * E, L.ffn_norm, h_.data() + t * E, E, c_.norm_eps);
  });
  moe_logits_.resize(ut * NE);
  if (L.router.type == TensorType::f32) {  // as llama.cpp: f32 dot products in ggml's order
    dev_.pool().run(T, [&](int64_t t, int) {
      for (int e = 0; e < NE; ++e)
        moe_logits_[static_cast<size_t>(t * NE + e)] = K.dot_f32(
            reinterpret_cast<const float*>(L.router.data + static_cast<size_t>(e) * L.router.row_bytes),
            h_.data() + t * E, E);
    });
  } else {
    gemm({{&L.router, moe_logits_.data()}}, h_.data(), T);
  }
}

// Routing: softmax, the top n_expert_used (ties: the lower id), renormalised.
void CpuRunner::moe_route(int64_t T) {
  const int NE = c_.n_expert, NU = c_.n_expert_used;
  const auto ut = static_cast<size_t>(T);
  moe_slot_expert_.resize(ut * NU);
  moe_slot_weight_.resize(ut * NU);
  std::vector<int> order(static_cast<size_t>(NE));
  for (int64_t t = 0; t < T; ++t) {
    float* p = moe_logits_.data() + t * NE;
    float mx = -INFINITY;
    for (int e = 0; e < NE; ++e) mx = std::max(mx, p[e]);
    double sum = 0;
    for (int e = 0; e < NE; ++e) sum += p[e] = std::exp(p[e] - mx);
    const auto inv = static_cast<float>(1.0 / sum);
    for (int e = 0; e < NE; ++e) p[e] *= inv;
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + NU, order.end(),
                      [&](int a, int b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    float wsum = 0;
    for (int s = 0; s < NU; ++s) wsum += p[order[static_cast<size_t>(s)]];
    wsum = std::max(wsum, 6.103515625e-5f);
    for (int s = 0; s < NU; ++s) {
      float w = p[order[static_cast<size_t>(s)]] / wsum;
      if (c_.expert_weights_scale != 0.0f && c_.expert_weights_scale != 1.0f) w *= c_.expert_weights_scale;
      moe_slot_expert_[static_cast<size_t>(t * NU + s)] = order[static_cast<size_t>(s)];
      moe_slot_weight_[static_cast<size_t>(t * NU + s)] = w;
    }
  }
}

// Experts: each over the rows that chose it; slot outputs kept apart.
void CpuRunner::moe_experts(const LayerWeights& L, int64_t T) {
  const CpuKernels& K = dev_.kernels();
  const int E = c_.n_embd, NE = c_.n_expert, NU = c_.n_expert_used, FE = c_.n_ff_exp;
  const auto ut = static_cast<size_t>(T);
  moe_slot_out_.resize(ut * NU * E);
  moe_rows_.resize(ut * E);
  // Slots (t * NU + s) bucketed by expert, in slot order: one pass.
  moe_first_.assign(static_cast<size_t>(NE) + 1, 0);
  for (int x : moe_slot_expert_) ++moe_first_[static_cast<size_t>(x) + 1];
  for (int e = 0; e < NE; ++e) moe_first_[static_cast<size_t>(e) + 1] += moe_first_[static_cast<size_t>(e)];
  moe_slots_.resize(moe_slot_expert_.size());
  {
    std::vector<int64_t> fill(moe_first_.begin(), moe_first_.end() - 1);
    for (size_t i = 0; i < moe_slot_expert_.size(); ++i)
      moe_slots_[static_cast<size_t>(fill[static_cast<size_t>(moe_slot_expert_[i])]++)] =
          static_cast<int64_t>(i);
  }
  for (int e = 0; e < NE; ++e) {
    const int64_t* slots = moe_slots_.data() + moe_first_[static_cast<size_t>(e)];
    const int64_t m = moe_first_[static_cast<size_t>(e) + 1] - moe_first_[static_cast<size_t>(e)];
    if (m == 0) continue;
    for (int64_t r = 0; r < m; ++r) std::copy_n(h_.data() + (slots[r] / NU) * E, E, moe_rows_.data() + r * E);
    gemm({{&L.exp_gate[static_cast<size_t>(e)], gate_.data()},
          {&L.exp_up[static_cast<size_t>(e)], up_.data()}},
         moe_rows_.data(), m);
    for (int64_t r = 0; r < m; ++r)
      K.swiglu(gate_.data() + r * FE, up_.data() + r * FE, gate_.data() + r * FE, FE);
    gemm({{&L.exp_down[static_cast<size_t>(e)], moe_rows_.data()}}, gate_.data(), m);
    for (int64_t r = 0; r < m; ++r) {
      const int64_t slot = slots[r];
      const float w = moe_slot_weight_[static_cast<size_t>(slot)];
      float* out = moe_slot_out_.data() + slot * E;
      const float* y = moe_rows_.data() + r * E;
      for (int i = 0; i < E; ++i) out[i] = y[i] * w;
    }
  }
}

void CpuRunner::moe_feed_forward(const LayerWeights& L, int64_t T) {
  const CpuKernels& K = dev_.kernels();
  const int E = c_.n_embd, NU = c_.n_expert_used, FS = c_.n_ff_shexp;
  const auto ut = static_cast<size_t>(T);
  moe_router(L, T);
  moe_route(T);
  moe_experts(L, T);  // then summed in slot order, below
  // Shared expert, gated per token.
  gemm({{&L.sh_gate, gate_.data()}, {&L.sh_up, up_.data()}}, h_.data(), T);
  dev_.pool().run(T, [&](int64_t t, int) {
    K.swiglu(gate_.data() + t * FS, up_.data() + t * FS, gate_.data() + t * FS, FS);
  });
  moe_rows_.resize(ut * E);
  gemm({{&L.sh_down, moe_rows_.data()}}, gate_.data(), T);

  for (int64_t t = 0; t < T; ++t) {
    float* out = moe_slot_out_.data() + t * NU * E;  // slot 0 accumulates the others
    for (int s = 1; s < NU; ++s) K.add(out, out + static_cast<int64_t>(s) * E, E);
    float g = K.dot_f32(L.sh_router, h_.data() + t * E, E);
    g = 1.0f / (1.0f + std::exp(-g));
    float* sh = moe_rows_.data() + t * E;
    for (int i = 0; i < E; ++i) sh[i] *= g;
    K.add(out, sh, E);
    K.add(x_.data() + t * E, out, E);
  }
}

}  // namespace chorus
