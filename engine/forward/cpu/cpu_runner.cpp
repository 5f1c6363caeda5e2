#include "engine/forward/cpu/cpu_runner.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "device/cpu_device.h"
#include "kernels/cpu/dequant.h"
#include "kernels/cpu/fp16.h"

namespace chorus {

namespace {
constexpr int kMaxSegments = kMaxViewBlocks;  // blocks in one view

// The model's rotary embedding as the kernels take it (kernels/cpu/cpu_kernels.h, RopeParams).
RopeParams rope_params(const ModelConfig& c, const Weights& w) {
  RopeParams p{c.rope_theta_scale(), 1.0f / c.rope_scale, w.rope_freqs};
  p.mscale = c.rope_mscale;
  if (c.rope_yarn) {
    p.ext_factor = c.yarn_ext_factor;
    std::tie(p.corr_lo, p.corr_hi) = c.yarn_corr_dims();
  }
  return p;
}
}  // namespace

CpuRunner::CpuRunner(const ModelConfig& config, const Weights& weights, CpuDevice& device, int max_tokens,
                     bool f32_activations)
    : c_(config),
      w_(weights),
      dev_(device),
      max_tokens_(std::max(1, max_tokens)),
      f32_activations_(f32_activations) {
  const auto T = static_cast<size_t>(max_tokens_);
  x_.resize(T * c_.n_embd);
  h_.resize(T * std::max(c_.n_embd, c_.q_dim()));
  q_.resize(T * c_.q_dim());
  k_.resize(T * c_.kv_dim());
  v_.resize(T * c_.kv_dim());
  att_.resize(T * c_.q_dim());
  const int ff = std::max({c_.n_ff, c_.n_ff_exp, c_.n_ff_shexp});
  gate_.resize(T * ff);
  up_.resize(T * ff);
  rope_cs_.resize(static_cast<size_t>(c_.n_rot));
  rope_ = rope_params(c_, w_);
  rope_swa_ = RopeParams{c_.rope_theta_scale_swa(), 1.0f, nullptr};  // no position scaling there,
  rope_swa_.mscale = c_.rope_mscale;  // but the attention factor, as llama.cpp gives every layer
  const int widest = std::max({c_.n_embd, c_.q_dim(), ff, c_.gdn.value_dim()});
  xq_.resize(T * static_cast<size_t>(widest / kQ8Block));
  // The types this runner reads from panels: those its table has panel kernels for, less those
  // it reads from their rows in llama.cpp's order (CpuDeviceOptions::llama_order).
  if (!f32_activations_) {
    const CpuKernels& k = dev_.kernels();
    const bool llama = dev_.llama_order();
    auto from_panels = [&k, llama](TensorType t) {
      const int i = static_cast<int>(t);
      return k.gemm_panels[i] != nullptr && !(llama && k.gemm_llama[i] != nullptr);
    };
    for (int t = 0; t < 40; ++t)
      if (from_panels(static_cast<TensorType>(t))) {
        w_.ensure_panels(from_panels);
        break;
      }
  }
  if (c_.attn_output_gate) qg_.resize(T * 2 * c_.q_dim());
  if (c_.hybrid()) {
    const GdnConfig& d = c_.gdn;
    l_qkv_.resize(T * d.conv_dim());
    l_z_.resize(T * d.value_dim());
    l_beta_.resize(T * d.n_v_heads);
    l_alpha_.resize(T * d.n_v_heads);
    l_gb_.resize(T * d.n_v_heads * 2);
    l_o_.resize(T * d.value_dim());
    for (int i = 0; i < dev_.n_threads(); ++i)
      gdn_ops_.push_back(std::make_unique<GdnBlockOps>(d, c_.norm_eps, dev_.kernels()));
  }
}

// Runs fn(t) for each token: inline for a single token (cheaper than waking the pool for a
// few microseconds of work), across the pool otherwise.
template <class Fn>
void CpuRunner::per_token(int64_t n_tokens, const Fn& fn) {
  if (n_tokens == 1) {
    fn(0);
    return;
  }
  dev_.pool().run(n_tokens, [&](int64_t t, int) { fn(t); });
}

// y_i [n_tokens, W_i.rows] = x [n_tokens, cols] W_i^T for every product (all read the same
// activations), in one parallel region: each matrix's rows are cut into chunks of whole 2-row
// tiles and the chunks of all matrices share the pool. Fewer regions per layer means fewer
// thread wake-ups per decode step. x is quantized to int8 first when a product reads it so.
void CpuRunner::gemm(std::initializer_list<Product> products, const float* x, int64_t n_tokens) {
  const CpuKernels& k = dev_.kernels();
  const int64_t n_cols = products.begin()->w->cols;
  bool want_q8 = false;
  for (const Product& p : products) want_q8 |= !f32_activations_ && gemm_input(p.w->type) == GemmInput::q8;
  if (want_q8) {
    const int64_t nb = n_cols / kQ8Block;
    per_token(n_tokens, [&](int64_t t) { k.quantize_q8(x + t * n_cols, xq_.data() + t * nb, n_cols); });
  }
  chunks_.clear();
  const int threads = dev_.n_threads();
  for (const Product& p : products) {
    const WeightMatrix& w = *p.w;
    // Q4_0, Q4_1, Q8_0 in llama.cpp's order when the device asks for it
    // (CpuDeviceOptions::llama_order).
    const GemmFn llama = dev_.llama_order() ? k.gemm_llama[static_cast<int>(w.type)] : nullptr;
    const bool panels = llama == nullptr && w.panels != nullptr && panel_type(w.type) && !f32_activations_;
    GemmArgs a{w.type,       w.data, w.row_bytes, w.cols, xq_.data(), x,
               n_tokens,     p.y,    w.rows,      0,      0,          panels ? w.panels : nullptr,
               w.panel_bytes};
    const GemmFn fn = f32_activations_ ? k.gemm_f32 : llama != nullptr ? llama : gemm_for(k, w.type, panels);
    // Chunks of whole tiles: 2 rows, or a panel's 16.
    const int64_t unit = panels ? kPanelRows : 2;
    const int64_t n = std::min<int64_t>(std::max<int64_t>(w.rows / unit, 1), threads == 1 ? 1 : threads * 4);
    const int64_t per = ((w.rows + n - 1) / n + unit - 1) / unit * unit;
    for (int64_t r0 = 0; r0 < w.rows; r0 += per) {
      a.r0 = r0;
      a.r1 = std::min(w.rows, r0 + per);
      chunks_.push_back({fn, a});
    }
  }
  dev_.pool().run(static_cast<int64_t>(chunks_.size()), [&](int64_t i, int) {
    const GemmChunk& c = chunks_[static_cast<size_t>(i)];
    c.fn(c.args);
  });
}

// x += W_down (silu(h W_gate) * h W_up), h = rmsnorm(x); gelu for GeGLU models, and with
// post-norms (gemma3) the product RMS-normed before it is added.
void CpuRunner::feed_forward(const LayerWeights& L, int64_t T) {
  if (c_.moe()) {
    moe_feed_forward(L, T);
    return;
  }
  const CpuKernels& K = dev_.kernels();
  const int E = c_.n_embd, FF = c_.n_ff;
  per_token(T,
            [&](int64_t t) { K.rmsnorm(x_.data() + t * E, L.ffn_norm, h_.data() + t * E, E, c_.norm_eps); });
  gemm({{&L.w_gate, gate_.data()}, {&L.w_up, up_.data()}}, h_.data(), T);
  const auto glu = c_.geglu ? K.geglu : K.swiglu;
  per_token(T,
            [&](int64_t t) { glu(gate_.data() + t * FF, up_.data() + t * FF, gate_.data() + t * FF, FF); });
  gemm({{&L.w_down, h_.data()}}, gate_.data(), T);
  if (L.ffn_post_norm)
    per_token(T, [&](int64_t t) {
      K.rmsnorm(h_.data() + t * E, L.ffn_post_norm, h_.data() + t * E, E, c_.norm_eps);
    });
  for (int64_t t = 0; t < T; ++t) K.add(x_.data() + t * E, h_.data() + t * E, E);
}

std::string CpuRunner::describe() const {
  return dev_.describe();
}

Status CpuRunner::run(std::span<const BatchToken> batch, std::span<SequenceKv* const> seqs, KvCache& kv,
                      float* logits_out, std::span<const View> views,
                      std::span<const std::optional<PlannedDraw>> draws, TokenId*) {
  if (!draws.empty())
    return make_error(Errc::invalid_argument, "the CPU runner draws no tokens: sample on the host");
  return forward(batch, seqs, kv, logits_out, views);
}

// What the attention layers of one step share: each token's segments (the same-step rule:
// context lengths as the step starts) and how the query heads are split into calls.
struct CpuRunner::StepAttention {
  // Query heads sharing a KV head go to one attention call (their keys and values are read
  // once), at most kMaxQueries at a time.
  static constexpr int kMaxQueries = 8;
  std::vector<std::vector<AttendSegment>> segs;
  size_t max_segs = 1;
  int64_t max_kv = 0;
  bool any_view = false;  // some token attends a view: each segment gets its own query rotation
  int q_per_call = 1, calls_per_kv_head = 1;
  size_t scratch_stride = 0;  // attention scratch floats per thread
  // Page pointer tables per sequence, rebuilt per layer (cheap: a few pointers per page).
  std::vector<std::vector<const float*>> kp, vp;
  std::vector<std::vector<const uint16_t*>> kp16, vp16;  // an f16 cache's
};

Status CpuRunner::plan_step_attention(std::span<const BatchToken> batch, std::span<SequenceKv* const> seqs,
                                      std::span<const View> views, StepAttention& sa) {
  sa.segs = plan_attention(batch, seqs, views);
  for (const auto& out : sa.segs) {
    int64_t n = 0;
    for (const AttendSegment& sg : out) n += sg.n_kv;
    sa.max_kv = std::max(sa.max_kv, n);
    sa.max_segs = std::max(sa.max_segs, out.size());
  }
  if (sa.max_segs > static_cast<size_t>(kMaxSegments))
    return make_error(Errc::invalid_argument, "a view of " + std::to_string(sa.max_segs) +
                                                  " blocks exceeds the limit of " +
                                                  std::to_string(kMaxSegments));
  sa.any_view = sa.max_segs > 1 ||
                std::any_of(batch.begin(), batch.end(), [](const BatchToken& b) { return b.view >= 0; });
  if (sa.any_view) q_seg_.resize(batch.size() * sa.max_segs * static_cast<size_t>(c_.q_dim()));
  const int group = c_.n_head / c_.n_head_kv;
  sa.q_per_call = std::min(group, StepAttention::kMaxQueries);
  sa.calls_per_kv_head = (group + sa.q_per_call - 1) / sa.q_per_call;
  // Attention scratch: per thread, as long as the longest view (rounded to 16).
  sa.scratch_stride = static_cast<size_t>(attention_scratch_floats(sa.q_per_call, sa.max_kv, c_.head_dim));
  if (scratch_.size() < sa.scratch_stride * static_cast<size_t>(dev_.n_threads()))
    scratch_.resize(sa.scratch_stride * static_cast<size_t>(dev_.n_threads()));
  sa.kp.resize(seqs.size());
  sa.vp.resize(seqs.size());
  sa.kp16.resize(seqs.size());
  sa.vp16.resize(seqs.size());
  return Status::success();
}

Status CpuRunner::forward(std::span<const BatchToken> batch, std::span<SequenceKv* const> seqs, KvCache& kv,
                          float* logits_out, std::span<const View> views) {
  const int64_t T = static_cast<int64_t>(batch.size());
  if (T == 0) return Status::success();
  CHORUS_TRY(check_forward_args(c_, max_tokens_, batch, seqs, views));
  std::vector<LinearGroup> groups;
  if (c_.hybrid())
    CHORUS_TRY(
        plan_linear_groups(chain_reads_, batch, seqs, views, own_linear_state(c_, slots_.get()), &groups));
  StepAttention sa;
  CHORUS_TRY(plan_step_attention(batch, seqs, views, sa));

  const CpuKernels& K = dev_.kernels();
  const int E = c_.n_embd;
  for (int64_t t = 0; t < T; ++t) {  // embeddings
    const WeightMatrix& e = w_.token_embd;
    dequantize_row(e.type, e.data + static_cast<size_t>(batch[t].token) * e.row_bytes, x_.data() + t * E, E);
    if (c_.embd_scale != 1.0f)
      for (int i = 0; i < E; ++i) x_[static_cast<size_t>(t * E + i)] *= c_.embd_scale;
  }
  for (int l = 0; l < c_.n_layer; ++l) {
    const LayerWeights& L = w_.layers[static_cast<size_t>(l)];
    per_token(
        T, [&](int64_t t) { K.rmsnorm(x_.data() + t * E, L.attn_norm, h_.data() + t * E, E, c_.norm_eps); });
    if (c_.is_linear(l))
      linear_layer(l, T, seqs, groups);  // h_ -> h_
    else
      attention_layer(l, L, batch, seqs, kv, sa);  // h_ -> h_
    if (L.attn_post_norm)
      per_token(T, [&](int64_t t) {
        K.rmsnorm(h_.data() + t * E, L.attn_post_norm, h_.data() + t * E, E, c_.norm_eps);
      });
    for (int64_t t = 0; t < T; ++t) K.add(x_.data() + t * E, h_.data() + t * E, E);
    feed_forward(L, T);
  }
  for (const BatchToken& b : batch) {
    SequenceKv& s = *seqs[static_cast<size_t>(b.seq)];
    s.n_tokens = std::max<int64_t>(s.n_tokens, b.pos + 1);
  }
  finish_linear_groups(groups, seqs);

  int64_t n_out = 0;  // logits for the tokens that want them
  for (int64_t t = 0; t < T; ++t) {
    if (!batch[t].logits) continue;
    K.rmsnorm(x_.data() + t * E, w_.output_norm, h_.data() + n_out * E, E, c_.norm_eps);
    ++n_out;
  }
  if (n_out > 0) gemm({{&w_.output, logits_out}}, h_.data(), n_out);
  if (c_.logit_softcap > 0) {  // c tanh(logits / c), as llama.cpp scales, tanh, scales
    const float c = c_.logit_softcap, inv = 1.0f / c;
    for (int64_t i = 0; i < n_out * c_.n_vocab; ++i) logits_out[i] = std::tanh(logits_out[i] * inv) * c;
  }
  return Status::success();
}

// The q, k and v products of h_ into q_, k_, v_ (with an output gate: the gate into qg_).
void CpuRunner::project_qkv(const LayerWeights& L, int64_t T) {
  if (!c_.attn_output_gate) {
    gemm({{&L.wq, q_.data()}, {&L.wk, k_.data()}, {&L.wv, v_.data()}}, h_.data(), T);
    return;
  }
  // attn_q yields each head's query then its gate: split them (gate kept in qg_).
  gemm({{&L.wq, qg_.data()}, {&L.wk, k_.data()}, {&L.wv, v_.data()}}, h_.data(), T);
  const int HD = c_.head_dim, QD = c_.q_dim();
  for (int64_t t = 0; t < T; ++t)
    for (int h = 0; h < c_.n_head; ++h) {
      const float* src = qg_.data() + (t * 2 * c_.n_head + 2 * h) * HD;
      std::copy(src, src + HD, q_.data() + t * QD + h * HD);
    }
}

// Token t's biases, q/k norms and rotary embedding; its query rotated per segment of a view;
// its key and value written into its sequence's page.
void CpuRunner::rotate_and_store(int64_t t, const LayerWeights& L, const RopeParams& rope, int kv_slot,
                                 const BatchToken& tok, const SequenceKv& s, KvCache& kv,
                                 const StepAttention& sa) {
  const CpuKernels& K = dev_.kernels();
  const int QD = c_.q_dim(), KVD = c_.kv_dim(), HD = c_.head_dim;
  const bool neox = c_.rope_layout == RopeLayout::rope_neox;
  float* q = q_.data() + t * QD;
  float* k = k_.data() + t * KVD;
  float* v = v_.data() + t * KVD;
  if (L.bq) K.add(q, L.bq, QD);
  if (L.bk) K.add(k, L.bk, KVD);
  if (L.bv) K.add(v, L.bv, KVD);
  if (L.q_norm)
    for (int h = 0; h < c_.n_head; ++h) K.rmsnorm(q + h * HD, L.q_norm, q + h * HD, HD, c_.norm_eps);
  if (L.k_norm)
    for (int h = 0; h < c_.n_head_kv; ++h) K.rmsnorm(k + h * HD, L.k_norm, k + h * HD, HD, c_.norm_eps);
  if (sa.any_view) {  // each segment gets its own rotation of the query
    const auto& ts = sa.segs[static_cast<size_t>(t)];
    for (size_t sg = 0; sg < ts.size(); ++sg) {
      float* qs = q_seg_.data() + (static_cast<size_t>(t) * sa.max_segs + sg) * QD;
      std::copy(q, q + QD, qs);
      K.rope_cache(rope_cs_.data(), c_.n_rot, rope, ts[sg].rotation);
      for (int h = 0; h < c_.n_head; ++h) K.rope(qs + h * HD, c_.n_rot, rope_cs_.data(), neox);
    }
  }
  K.rope_cache(rope_cs_.data(), c_.n_rot, rope, static_cast<float>(tok.pos));
  for (int h = 0; h < c_.n_head; ++h) K.rope(q + h * HD, c_.n_rot, rope_cs_.data(), neox);
  for (int h = 0; h < c_.n_head_kv; ++h) K.rope(k + h * HD, c_.n_rot, rope_cs_.data(), neox);
  const int ps = kv.page_size();
  const int32_t page = s.pages[static_cast<size_t>(tok.pos / ps)];
  const int pos_slot = tok.pos % ps;
  if (kv.type() == KvType::f16) {  // rounded to nearest even, as llama.cpp stores an f16 cache
    uint16_t* kpage = kv.k_f16(kv_slot, page);
    for (int i = 0; i < KVD; ++i) kpage[static_cast<size_t>(i) * ps + pos_slot] = f32_to_f16(k[i]);
    uint16_t* vrow = kv.v_f16(kv_slot, page) + static_cast<size_t>(pos_slot) * KVD;
    for (int i = 0; i < KVD; ++i) vrow[i] = f32_to_f16(v[i]);
    return;
  }
  float* kpage = kv.k(kv_slot, page);  // dimension-major
  for (int i = 0; i < KVD; ++i) kpage[static_cast<size_t>(i) * ps + pos_slot] = k[i];
  std::copy(v, v + KVD, kv.v(kv_slot, page) + static_cast<size_t>(pos_slot) * KVD);
}

// One attention layer over the batch: h_ (normed input) -> h_ (the layer's output).
// A sliding-window layer sees, of each segment, the positions whose view position is within
// n_swa of the query's: block position j >= rotation - n_swa + 1 (rotation = the query's view
// position minus the segment's offset), so one block may lie inside one reader's window and
// outside another's.
void CpuRunner::attention_layer(int layer, const LayerWeights& L, std::span<const BatchToken> batch,
                                std::span<SequenceKv* const> seqs, KvCache& kv, StepAttention& sa) {
  const CpuKernels& K = dev_.kernels();
  const int64_t T = static_cast<int64_t>(batch.size());
  const int QD = c_.q_dim(), KVD = c_.kv_dim(), HD = c_.head_dim;
  const int group = c_.n_head / c_.n_head_kv;
  const float scale = c_.q_scale();
  const int kv_slot = c_.kv_layer[static_cast<size_t>(layer)];
  const bool swa = c_.is_swa(layer);
  const RopeParams& rope = swa ? rope_swa_ : rope_;
  project_qkv(L, T);
  for (int64_t t = 0; t < T; ++t)
    rotate_and_store(t, L, rope, kv_slot, batch[t], *seqs[static_cast<size_t>(batch[t].seq)], kv, sa);
  const bool f16 = kv.type() == KvType::f16;
  for (size_t s = 0; s < seqs.size(); ++s) {
    sa.kp[s].clear();
    sa.vp[s].clear();
    sa.kp16[s].clear();
    sa.vp16[s].clear();
    for (int32_t p : seqs[s]->pages)
      if (f16) {
        sa.kp16[s].push_back(kv.k_f16(kv_slot, p));
        sa.vp16[s].push_back(kv.v_f16(kv_slot, p));
      } else {
        sa.kp[s].push_back(kv.k(kv_slot, p));
        sa.vp[s].push_back(kv.v(kv_slot, p));
      }
  }
  const int calls = sa.calls_per_kv_head, qpc = sa.q_per_call;
  dev_.pool().run(T * c_.n_head_kv * calls, [&](int64_t i, int thread) {
    const int64_t t = i / (c_.n_head_kv * calls);
    const int rest = static_cast<int>(i % (c_.n_head_kv * calls));
    const int kvh = rest / calls;
    const int h0 = kvh * group + (rest % calls) * qpc;  // first query head
    const int nq = std::min(qpc, (kvh + 1) * group - h0);
    const auto& ts = sa.segs[static_cast<size_t>(t)];
    AttentionSegment seg[kMaxSegments];
    for (size_t sg = 0; sg < ts.size(); ++sg) {
      const auto b = static_cast<size_t>(ts[sg].block);
      const float* q =
          sa.any_view ? q_seg_.data() + (static_cast<size_t>(t) * sa.max_segs + sg) * QD : q_.data() + t * QD;
      const int64_t begin = swa ? static_cast<int64_t>(ts[sg].rotation) - c_.n_swa + 1 : 0;
      seg[sg] = {q + static_cast<int64_t>(h0) * HD, sa.kp[b].data(),   sa.vp[b].data(),  ts[sg].n_kv,
                 std::max<int64_t>(begin, 0),       sa.kp16[b].data(), sa.vp16[b].data()};
    }
    AttentionArgs a{seg, static_cast<int>(ts.size()), nq, KVD, static_cast<int64_t>(kvh) * HD, HD, scale,
                    att_.data() + t * QD + static_cast<int64_t>(h0) * HD,
                    scratch_.data() + static_cast<size_t>(thread) * sa.scratch_stride,
                    // llama.cpp's order for a one-token step only where its bits are wanted; else one
                    // order for every batch, so that what a sequence computes does not depend on
                    // what else the step carries.
                    T == 1 && dev_.llama_order(), f16};
    K.attention(a);
  });
  if (c_.attn_output_gate)  // out *= sigmoid(gate), per head
    per_token(T, [&](int64_t t) {
      for (int h = 0; h < c_.n_head; ++h) {
        const float* g = qg_.data() + (t * 2 * c_.n_head + 2 * h + 1) * HD;
        float* o = att_.data() + t * QD + h * HD;
        for (int i = 0; i < HD; ++i) o[i] *= 1.0f / (1.0f + std::exp(-g[i]));  // ggml's sigmoid, then mul
      }
    });
  gemm({{&L.wo, h_.data()}}, att_.data(), T);
}

}  // namespace chorus
