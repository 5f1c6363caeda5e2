#include "engine/forward/linear_state.h"

#include <algorithm>
#include <atomic>
#include <cmath>

#include "kernels/cpu/gdn.h"

namespace chorus {

namespace {
std::atomic<uint64_t> g_next_id{1};
}  // namespace

std::shared_ptr<LinearState> LinearState::create(const ModelConfig& c) {
  auto s = std::make_shared<LinearState>();
  s->id = g_next_id++;
  s->layers.resize(static_cast<size_t>(c.n_layer));
  return s;
}

std::shared_ptr<LinearState> LinearState::clone() const {
  auto s = std::make_shared<LinearState>(*this);
  s->id = g_next_id++;
  s->run_key.clear();  // the copy's cached view state is rebuilt on first use
  s->slot.reset();
  s->slot_owner = nullptr;
  return s;
}

size_t LinearState::bytes() const {
  size_t n = 0;
  for (const LinearLayerState& l : layers)
    n += l.head_x.size() + l.head_gb.size() + l.tail_x.size() + l.body_k.size() + l.body_v.size() +
         l.body_gb.size() + l.A.size() + l.B.size() + l.run_S.size() + l.run_tail.size();
  return n * sizeof(float);
}

void LinearState::drop_view_cache() {
  for (LinearLayerState& l : layers) {
    for (auto* v : {&l.run_S, &l.run_tail, &l.base_S, &l.base_tail}) {
      v->clear();
      v->shrink_to_fit();
    }
  }
  run_key.clear();
  base_key.clear();
}

GdnBlockOps::GdnBlockOps(const GdnConfig& d, float eps, const CpuKernels& kernels)
    : d_(d), eps_(eps), K_(kernels) {}

void GdnBlockOps::factors(const float* conv_w, const float* prev, const float* x, int n, float* q, float* k,
                          float* v) {
  const int C = d_.conv_dim(), K = d_.conv_kernel, dk = d_.head_dim, kd = d_.key_dim(), vd = d_.value_dim();
  conv_.resize(static_cast<size_t>(n) * C);
  K_.gdn_conv(prev, x, n, conv_w, C, K, conv_.data());
  for (int t = 0; t < n; ++t) {
    const float* u = conv_.data() + static_cast<size_t>(t) * C;
    float* kt = k + static_cast<size_t>(t) * kd;
    std::copy(u + kd, u + 2 * kd, kt);
    for (int h = 0; h < d_.n_k_heads; ++h) gdn::l2_normalize(kt + h * dk, dk, eps_);
    if (q) {
      float* qt = q + static_cast<size_t>(t) * kd;
      std::copy(u, u + kd, qt);
      for (int h = 0; h < d_.n_k_heads; ++h) gdn::l2_normalize(qt + h * dk, dk, eps_);
    }
    std::copy(u + 2 * kd, u + 2 * kd + vd, v + static_cast<size_t>(t) * vd);
  }
}

void GdnBlockOps::shift_tail(float* tail, const float* x, int64_t n) const {
  const auto C = static_cast<size_t>(d_.conv_dim());
  const int64_t keep = d_.conv_kernel - 1;
  if (n >= keep) {
    std::copy(x + static_cast<size_t>(n - keep) * C, x + static_cast<size_t>(n) * C, tail);
    return;
  }
  std::copy(tail + static_cast<size_t>(n) * C, tail + static_cast<size_t>(keep) * C, tail);
  std::copy(x, x + static_cast<size_t>(n) * C, tail + static_cast<size_t>(keep - n) * C);
}

void GdnBlockOps::apply_block(const float* conv_w, const LinearLayerState& b, int64_t n_b, float* S,
                              const float* tail, bool* zero, int h0, int h1) {
  if (n_b == 0) return;
  const int dk = d_.head_dim, Hv = d_.n_v_heads, kd = d_.key_dim(), vd = d_.value_dim();
  if (h1 < 0) h1 = Hv;
  const size_t state = static_cast<size_t>(dk) * dk;  // dv == dk
  const int64_t keep = d_.conv_kernel - 1;
  const int n_head = static_cast<int>(std::min<int64_t>(n_b, keep));
  // Head tokens: convolved with the view's tail so far.
  tmp_.resize(static_cast<size_t>(n_head) * (kd + vd));
  float* k = tmp_.data();
  float* v = k + static_cast<size_t>(n_head) * kd;
  factors(conv_w, tail, b.head_x.data(), n_head, nullptr, k, v);
  for (int t = 0; t < n_head; ++t)
    for (int h = h0; h < h1; ++h) {
      const float* gb = b.head_gb.data() + (static_cast<size_t>(t) * Hv + h) * 2;
      K_.gdn_step(S + h * state, nullptr, k + static_cast<size_t>(t) * kd + d_.k_head_of(h) * dk,
                  v + static_cast<size_t>(t) * vd + h * dk, gb[0], gb[1], nullptr, dk, dk);
    }
  if (n_head > 0) *zero = false;
  // Body: its map, dense or token by token.
  if (b.n_body > 0) {
    if (b.dense) {
      if (*zero) {
        std::copy(b.B.begin() + static_cast<long>(h0 * state), b.B.begin() + static_cast<long>(h1 * state),
                  S + h0 * state);
      } else {
        scratch_.resize(state);
        for (int h = h0; h < h1; ++h) {  // S <- S A + B
          std::copy_n(b.B.data() + h * state, state, scratch_.data());
          K_.gdn_mul_right(S + h * state, b.A.data() + h * state, scratch_.data(), dk, dk, true);
          std::copy_n(scratch_.data(), state, S + h * state);
        }
      }
    } else {
      for (int64_t t = 0; t < b.n_body; ++t)
        for (int h = h0; h < h1; ++h) {
          const float* gb = b.body_gb.data() + (static_cast<size_t>(t) * Hv + h) * 2;
          K_.gdn_step(S + h * state, nullptr,
                      b.body_k.data() + static_cast<size_t>(t) * kd + d_.k_head_of(h) * dk,
                      b.body_v.data() + static_cast<size_t>(t) * vd + h * dk, gb[0], gb[1], nullptr, dk, dk);
        }
    }
    *zero = false;
  }
}

// y <- A_t y and c += B_t y for one token's map S -> S A_t + B_t (A_t = alpha (I - beta k k^T),
// B_t = beta v k^T): O(dk).
void token_map_on_query(const float* k, const float* v, float g, float beta, float* y, float* c, int dk) {
  float ky = 0;
  for (int i = 0; i < dk; ++i) ky += k[i] * y[i];
  const float alpha = std::exp(g);
  for (int i = 0; i < dk; ++i) {
    c[i] += beta * ky * v[i];
    y[i] = alpha * (y[i] - beta * ky * k[i]);
  }
}

void GdnBlockOps::advance_tail(const LinearLayerState& b, int64_t n_b, float* tail) const {
  if (n_b >= d_.conv_kernel - 1)
    std::copy(b.tail_x.begin(), b.tail_x.end(), tail);
  else
    shift_tail(tail, b.head_x.data(), n_b);
}

void GdnBlockOps::query_through(const float* conv_w,
                                std::span<const std::pair<const LinearLayerState*, int64_t>> suffix,
                                const float* tail, float* y, float* c) {
  const int dk = d_.head_dim, Hv = d_.n_v_heads, kd = d_.key_dim(), vd = d_.value_dim(), C = d_.conv_dim();
  const int64_t keep = d_.conv_kernel - 1;
  const size_t state = static_cast<size_t>(dk) * dk;
  // Forward over the suffix: each block's head tokens convolved with the tail before it.
  run_tail_.assign(tail, tail + static_cast<size_t>(keep) * C);
  heads_.resize(suffix.size() * static_cast<size_t>(keep) * (kd + vd));
  for (size_t i = 0; i < suffix.size(); ++i) {
    const auto& [b, n_b] = suffix[i];
    const int n_head = static_cast<int>(std::min<int64_t>(n_b, keep));
    float* k = heads_.data() + i * static_cast<size_t>(keep) * (kd + vd);
    factors(conv_w, run_tail_.data(), b->head_x.data(), n_head, nullptr, k,
            k + static_cast<size_t>(keep) * kd);
    advance_tail(*b, n_b, run_tail_.data());
  }
  // Backward: the query through each map, last block first, tokens last first.
  for (int h = 0; h < Hv; ++h) {
    float* yh = y + static_cast<size_t>(h) * dk;
    float* ch = c + static_cast<size_t>(h) * dk;
    const size_t kh = static_cast<size_t>(d_.k_head_of(h)) * dk;
    for (size_t i = suffix.size(); i-- > 0;) {
      const auto& [b, n_b] = suffix[i];
      if (b->n_body > 0) {
        if (b->dense) {
          tmp_.resize(static_cast<size_t>(dk));
          K_.gdn_query_dense(b->A.data() + h * state, b->B.data() + h * state, yh, ch, tmp_.data(), dk);
        } else {
          for (int64_t t = b->n_body; t-- > 0;) {
            const float* gb = b->body_gb.data() + (static_cast<size_t>(t) * Hv + h) * 2;
            token_map_on_query(b->body_k.data() + static_cast<size_t>(t) * kd + kh,
                               b->body_v.data() + static_cast<size_t>(t) * vd + static_cast<size_t>(h) * dk,
                               gb[0], gb[1], yh, ch, dk);
          }
        }
      }
      const int n_head = static_cast<int>(std::min<int64_t>(n_b, keep));
      const float* k = heads_.data() + i * static_cast<size_t>(keep) * (kd + vd);
      const float* v = k + static_cast<size_t>(keep) * kd;
      for (int t = n_head; t-- > 0;) {
        const float* gb = b->head_gb.data() + (static_cast<size_t>(t) * Hv + h) * 2;
        token_map_on_query(k + static_cast<size_t>(t) * kd + kh,
                           v + static_cast<size_t>(t) * vd + static_cast<size_t>(h) * dk, gb[0], gb[1], yh,
                           ch, dk);
      }
    }
  }
}

void GdnBlockOps::append(LinearLayerState& b, int64_t n_before, const float* x, const float* k,
                         const float* v, const float* gb, int n) {
  const Fold f = begin_append(b, n_before, x, k, v, gb, n);
  if (!f.active()) return;
  for (int h = 0; h < d_.n_v_heads; ++h) fold_head(b, f, h);
  end_append(b, f);
}

GdnBlockOps::Fold GdnBlockOps::begin_append(LinearLayerState& b, int64_t n_before, const float* x,
                                            const float* k, const float* v, const float* gb, int n) {
  const int dk = d_.head_dim, Hv = d_.n_v_heads, kd = d_.key_dim(), vd = d_.value_dim(), C = d_.conv_dim();
  const int64_t keep = d_.conv_kernel - 1;
  Fold f;
  if (b.tail_x.empty()) b.tail_x.assign(static_cast<size_t>(keep) * C, 0.0f);
  // tail_x holds the last min(n, K-1) inputs right-aligned in K-1 rows; shifting keeps that.
  shift_tail(b.tail_x.data(), x, n);
  int t = 0;
  for (; t < n && n_before + t < keep; ++t) {
    b.head_x.insert(b.head_x.end(), x + static_cast<size_t>(t) * C, x + static_cast<size_t>(t + 1) * C);
    b.head_gb.insert(b.head_gb.end(), gb + static_cast<size_t>(t) * Hv * 2,
                     gb + static_cast<size_t>(t + 1) * Hv * 2);
  }
  const int m = n - t;  // body tokens
  if (m <= 0) return f;
  const float* bk = k + static_cast<size_t>(t) * kd;
  const float* bv = v + static_cast<size_t>(t) * vd;
  const float* bgb = gb + static_cast<size_t>(t) * Hv * 2;
  if (!b.dense && b.n_body + m < dense_from()) {
    b.body_k.insert(b.body_k.end(), bk, bk + static_cast<size_t>(m) * kd);
    b.body_v.insert(b.body_v.end(), bv, bv + static_cast<size_t>(m) * vd);
    b.body_gb.insert(b.body_gb.end(), bgb, bgb + static_cast<size_t>(m) * Hv * 2);
    b.n_body += m;
    return f;
  }
  if (!b.dense) {  // dense from here: the identity map, the compact body's tokens folded in first
    const size_t state = static_cast<size_t>(dk) * dk;
    b.A.assign(state * Hv, 0.0f);
    b.B.assign(state * Hv, 0.0f);
    for (int h = 0; h < Hv; ++h)
      gdn::summary_identity<float>(b.A.data() + h * state, b.B.data() + h * state, dk, dk);
    f.old_k = std::move(b.body_k);
    f.old_v = std::move(b.body_v);
    f.old_gb = std::move(b.body_gb);
    b.body_k.clear();
    b.body_v.clear();
    b.body_gb.clear();
    f.n_old = b.n_body;
    b.n_body = 0;
    b.dense = true;
  }
  f.k = bk;
  f.v = bv;
  f.gb = bgb;
  f.m = m;
  return f;
}

void GdnBlockOps::fold_head(LinearLayerState& b, const Fold& f, int h) {
  if (f.n_old > 0) fold_tokens(b, h, f.old_k.data(), f.old_v.data(), f.old_gb.data(), f.n_old);
  if (f.m > 0) fold_tokens(b, h, f.k, f.v, f.gb, f.m);
}

// Folds m body tokens into value head h's dense (A, B).
void GdnBlockOps::fold_tokens(LinearLayerState& b, int h, const float* k, const float* v, const float* gb,
                              int64_t m) {
  const int dk = d_.head_dim, Hv = d_.n_v_heads, kd = d_.key_dim(), vd = d_.value_dim();
  const size_t state = static_cast<size_t>(dk) * dk;
  const auto M = static_cast<size_t>(m);
  kh_.resize(M * dk);
  vh_.resize(M * dk);
  g_.resize(M);
  beta_.resize(M);
  const int kh = d_.k_head_of(h);
  for (size_t s = 0; s < M; ++s) {
    std::copy_n(k + s * kd + static_cast<size_t>(kh) * dk, dk, kh_.data() + s * dk);
    std::copy_n(v + s * vd + static_cast<size_t>(h) * dk, dk, vh_.data() + s * dk);
    g_[s] = gb[(s * Hv + h) * 2];
    beta_[s] = gb[(s * Hv + h) * 2 + 1];
  }
  // Token by token, like the recurrence: the same bits however the tokens arrive.
  // (A, B) <- (A A_t, B A_t + B_t): A is a state whose token has no value.
  for (size_t t = 0; t < M; ++t) {
    K_.gdn_step(b.A.data() + h * state, nullptr, kh_.data() + t * dk, nullptr, g_[t], beta_[t], nullptr, dk,
                dk);
    K_.gdn_step(b.B.data() + h * state, nullptr, kh_.data() + t * dk, vh_.data() + t * dk, g_[t], beta_[t],
                nullptr, dk, dk);
  }
}

}  // namespace chorus
