#include "engine/forward/cuda/cuda_runner.h"

#include "engine/forward/cuda/cuda_runner_impl.h"

namespace chorus {

namespace {

using cuda::bf16_bits;
using cuda_detail::Layer;
using cuda_detail::op;
using Mat = CudaMat;

}  // namespace

CudaRunner::CudaRunner(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaRunner::~CudaRunner() = default;

Status CudaRunner::check(const ModelConfig& c, const Weights& w) {
  auto unsupported = [&](const std::string& what) {
    return make_error(Errc::unsupported, "the CUDA runner does not run " + what + " yet (" + c.arch + ")");
  };
  if (c.moe())
    if (Status s = CudaMoe::check(c, w); !s.ok()) return s;
  if (c.hybrid())
    if (Status s = CudaLinear::check(c, w); !s.ok()) return s;
  if (c.n_swa > 0 || c.geglu || c.post_norms || c.embd_scale != 1.0f || c.logit_softcap > 0)
    return unsupported("Gemma 3's sliding-window layers, GeGLU, post-norms and embedding scale");
  // Its rotations are base^(-2i/n) / scale only (kernels/cuda/rope.cu and the attention kernels).
  if (w.rope_freqs != nullptr) return unsupported("Llama 3's RoPE frequency factors (rope_freqs.weight)");
  if (c.rope_yarn) return unsupported("YaRN RoPE scaling (rope.scaling.type yarn)");
  if (c.rope_mscale != 1.0f) return unsupported("rope.scaling.attn_factor other than 1");
  if (c.head_dim % 32 != 0 || c.head_dim > 256 || c.n_head / c.n_head_kv > 8)
    return unsupported("head size " + std::to_string(c.head_dim) + " with groups of " +
                       std::to_string(c.n_head / c.n_head_kv) + " (32..256 in steps of 32, groups up to 8)");
  auto check_type = [&](const WeightMatrix& m, const std::string& name) -> Status {
    if (cuda::converts_to_bf16(static_cast<int>(m.type))) return Status::success();
    return make_error(Errc::unsupported, "the CUDA runner cannot convert " + name + " (" +
                                             std::string(tensor_type_name(m.type)) +
                                             "): " + cuda::bf16_conversions() + " weights so far");
  };
  if (Status s = check_type(w.token_embd, "token_embd"); !s.ok()) return s;
  if (!c.tied_output)
    if (Status s = check_type(w.output, "output"); !s.ok()) return s;
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const LayerWeights& L = w.layers[l];
    const bool attention = !c.is_linear(static_cast<int>(l));
    for (const auto& [m, n] :
         {std::pair{&L.wq, "attn_q"}, std::pair{&L.wk, "attn_k"}, std::pair{&L.wv, "attn_v"},
          std::pair{&L.wo, "attn_output"}, std::pair{&L.w_gate, "ffn_gate"}, std::pair{&L.w_up, "ffn_up"},
          std::pair{&L.w_down, "ffn_down"}})
      if (attention || m == &L.w_gate || m == &L.w_up || m == &L.w_down)
        if (Status s = check_type(*m, "blk." + std::to_string(l) + "." + n); !s.ok()) return s;
  }
  return Status::success();
}

Result<std::unique_ptr<CudaRunner>> CudaRunner::create(const ModelConfig& c, const Weights& w,
                                                       CudaDevice& dev, const CudaRunnerOptions& opts) {
  if (Status s = check(c, w); !s.ok()) return s.error();
  if (opts.max_tokens < 1 || opts.n_pages < 1)
    return make_error(Errc::invalid_argument, "CUDA runner: max_tokens and n_pages must be positive");
  auto impl = std::make_unique<Impl>(c, dev, opts);
  Impl& m = *impl;
  CHORUS_TRY(m.upload_weights(w));
  CHORUS_TRY(m.take_buffers());
  if (c.moe()) {  // before the linear-state slots, which take a share of what is left
    auto moe = CudaMoe::create(c, w, dev, opts.max_tokens);
    if (!moe) return moe.error();
    m.moe = std::move(*moe);
  }
  if (c.hybrid()) {
    auto linear = CudaLinear::create(c, w, dev, opts.max_tokens, opts.linear_slots, opts.chain_reads, m.xb);
    if (!linear) return linear.error();
    m.linear = std::move(*linear);
  }
  return std::unique_ptr<CudaRunner>(new CudaRunner(std::move(impl)));
}

// The embeddings, the output and every layer's norms, biases and matrices, and the attention
// layers' KV pages.
Status CudaRunner::Impl::upload_weights(const Weights& w) {
  const int64_t E = c.n_embd;
  auto embd_m = cuda_upload_matrix(dev, w.token_embd, "token_embd");
  if (!embd_m) return embd_m.error();
  embd = *embd_m;
  if (c.tied_output) {
    output = embd;
  } else {
    auto out = cuda_upload_matrix(dev, w.output, "output");
    if (!out) return out.error();
    output = *out;
  }
  auto on = cuda_upload_vec(dev, w.output_norm, E, "output_norm");
  if (!on) return on.error();
  output_norm = *on;
  page_stride = 16 * c.kv_dim();
  for (int l = 0; l < c.n_layer; ++l) {
    auto D = upload_layer(w.layers[static_cast<size_t>(l)], l);
    if (!D) return D.error();
    layers.push_back(*D);
  }
  return Status::success();
}

Result<cuda_detail::Layer> CudaRunner::Impl::upload_layer(const LayerWeights& L, int l) {
  const int64_t E = c.n_embd, QD = c.q_dim(), KVD = c.kv_dim();
  Layer D;
  for (auto [dst, src, n, name] :
       {std::tuple{&D.attn_norm, L.attn_norm, E, "attn_norm"},
        std::tuple{&D.ffn_norm, L.ffn_norm, E, "ffn_norm"},
        std::tuple{&D.q_norm, L.q_norm, int64_t{c.head_dim}, "q_norm"},
        std::tuple{&D.k_norm, L.k_norm, int64_t{c.head_dim}, "k_norm"},
        std::tuple{&D.bq, L.bq, QD, "attn_q.bias"}, std::tuple{&D.bk, L.bk, KVD, "attn_k.bias"},
        std::tuple{&D.bv, L.bv, KVD, "attn_v.bias"}}) {
    auto r = cuda_upload_vec(dev, src, n, name);
    if (!r) return r.error();
    *dst = *r;
  }
  const bool attention = !c.is_linear(l);
  for (auto [dst, src, name] :
       {std::tuple{&D.wq, &L.wq, "attn_q"}, std::tuple{&D.wk, &L.wk, "attn_k"},
        std::tuple{&D.wv, &L.wv, "attn_v"}, std::tuple{&D.wo, &L.wo, "attn_output"},
        std::tuple{&D.gate, &L.w_gate, "ffn_gate"}, std::tuple{&D.up, &L.w_up, "ffn_up"},
        std::tuple{&D.down, &L.w_down, "ffn_down"}}) {
    const bool ffn = dst == &D.gate || dst == &D.up || dst == &D.down;
    if ((!attention && !ffn) || (ffn && c.moe())) continue;  // (MoE layers: engine/forward/cuda/cuda_moe.h)
    auto r = cuda_upload_matrix(dev, *src, name);
    if (!r) return r.error();
    *dst = *r;
  }
  if (!attention) return D;  // no KV: its state lives in the linear-state slots
  // n_pages, and one spare that the padding tokens of a graphed step write and read.
  const int64_t bytes = (opts.n_pages + 1) * page_stride * (opts.kv_bf16 ? 2 : 4);
  auto kp = dev.alloc(bytes, "KV pages");
  if (!kp) return kp.error();
  auto vp = dev.alloc(bytes, "KV pages");
  if (!vp) return vp.error();
  D.k_pool = *kp;
  D.v_pool = *vp;
  return D;
}

// Activations [max_tokens][...] and the step tables.
Status CudaRunner::Impl::take_buffers() {
  const int64_t T = opts.max_tokens, E = c.n_embd, QD = c.q_dim(), KVD = c.kv_dim(),
                FF = c.moe() ? 0 : c.n_ff;
  const int64_t widest = std::max({E, QD, FF, int64_t{c.gdn.value_dim()}});
  for (auto [dst, n] :
       {std::pair{&x, T * E}, std::pair{&h, T * E}, std::pair{&q, T * QD}, std::pair{&k, T * KVD},
        std::pair{&v, T * KVD}, std::pair{&att, T * QD}, std::pair{&gate, T * FF}, std::pair{&up, T * FF},
        std::pair{&logits, T * int64_t{c.n_vocab}}, std::pair{&q_single, T * QD},
        std::pair{&att_single, T * QD}})
    CHORUS_TRY(take_into(dst, n, "activations"));
  if (c.attn_output_gate) {
    CHORUS_TRY(take_into(&qg, 2 * T * QD, "activations"));
    CHORUS_TRY(take_into(&attn_gate, T * QD, "activations"));
  }
  CHORUS_TRY(take_into(&xb, T * widest, "activations"));
  page_cap = 8 * opts.n_pages + T + 1;
  for (auto [dst, n] : {std::pair{&ids, T}, std::pair{&pos, T}, std::pair{&write_page, T},
                        std::pair{&write_slot, T}, std::pair{&page_ids, page_cap}, std::pair{&logit_rows, T},
                        std::pair{&single_rows, T}, std::pair{&sampled, T}})
    CHORUS_TRY(take_into(dst, n, "step tables"));
  CHORUS_TRY(take_into(&segs, T * kMaxViewBlocks, "step tables"));
  CHORUS_TRY(take_into(&tokens, T, "step tables"));
  CHORUS_TRY(take_into(&single_table, T, "step tables"));
  CHORUS_TRY(take_into(&tiles, T, "step tables"));
  return take_into(&samples, T, "step tables");
}

Status CudaRunner::forward(std::span<const BatchToken> batch, std::span<SequenceKv* const> seqs,
                           float* logits_out, std::span<const View> views,
                           std::span<const std::optional<PlannedDraw>> draws, TokenId* tokens_out) {
  static_assert(max_device_top_k() == cuda::kMaxSampleTopK);
  Impl& m = *impl_;
  if (batch.empty()) return Status::success();
  CHORUS_TRY(check_forward_args(m.c, m.opts.max_tokens, batch, seqs, views));
  auto planned = m.plan_step(batch, seqs, views, draws, tokens_out != nullptr);
  if (!planned) return planned.error();
  const CudaStepPlan& p = *planned;
  CHORUS_TRY(m.put_tables(p));  // in stream order; `p` outlives them (the sync in run_step)
  auto graphed = m.run_step(p, seqs);
  if (!graphed) return graphed.error();
  Status sampling = m.sample(p);  // reported after the step's blocks are accounted for
  if (Status st = m.dev.sync("forward"); !st.ok()) {
    if (m.linear) m.linear->abandon(seqs);
    return st;
  }
  // The step has written its blocks: their lengths and linear states move on, whatever happens
  // to the logits below (a hybrid block's state cannot take the same tokens twice).
  std::vector<int64_t> written(seqs.size(), 0);
  for (const BatchToken& b : batch)
    written[static_cast<size_t>(b.seq)] = std::max<int64_t>(written[static_cast<size_t>(b.seq)], b.pos + 1);
  for (size_t i = 0; i < seqs.size(); ++i) seqs[i]->n_tokens = std::max(seqs[i]->n_tokens, written[i]);
  if (m.linear) m.linear->finish(seqs, *graphed);
  CHORUS_TRY(sampling);
  return m.read_back(batch, p, logits_out, tokens_out);
}

// The step's plan; for hybrid models the linear layers' too, launched directly when their tables
// cannot stay in place for a graph (CudaLinear::graphable()).
Result<CudaStepPlan> CudaRunner::Impl::plan_step(std::span<const BatchToken> batch,
                                                 std::span<SequenceKv* const> seqs,
                                                 std::span<const View> views,
                                                 std::span<const std::optional<PlannedDraw>> draws,
                                                 bool have_tokens_out) {
  CudaStepLimits limits{opts.n_pages, page_cap, opts.graphs, opts.graph_max_tokens, opts.max_tokens};
  auto planned = plan_cuda_step(batch, seqs, views, draws, have_tokens_out, limits);
  if (!planned) return planned.error();
  CHORUS_TRY(dev.bind());
  if (!linear) return planned;
  CHORUS_TRY(linear->plan(batch, seqs, views, planned->n_run));
  if (!planned->graphed || linear->graphable()) return planned;
  limits.graphs = false;
  planned = plan_cuda_step(batch, seqs, views, draws, have_tokens_out, limits);
  if (!planned) return planned.error();
  CHORUS_TRY(linear->plan(batch, seqs, views, planned->n_run));
  return planned;
}

Status CudaRunner::Impl::put_tables(const CudaStepPlan& p) {
  CHORUS_TRY(put(ids, p.ids));
  CHORUS_TRY(put(pos, p.pos));
  CHORUS_TRY(put(write_page, p.write_page));
  CHORUS_TRY(put(write_slot, p.write_slot));
  CHORUS_TRY(put(page_ids, p.page_ids));
  CHORUS_TRY(put(segs, p.segs));
  CHORUS_TRY(put(tokens, p.tokens));
  CHORUS_TRY(put(tiles, p.tiles));
  CHORUS_TRY(put(single_rows, p.single_tokens));
  CHORUS_TRY(put(single_table, p.single_table));
  CHORUS_TRY(put(logit_rows, p.logit_tokens));
  tiled = !p.graphed;
  n_tiles = static_cast<int>(p.tiles.size());
  n_single = static_cast<int>(p.single_tokens.size());
  n_logit_rows = p.graphed ? -1 : static_cast<int>(p.logit_tokens.size());
  return Status::success();
}

// The step's launches, after the hybrid layers' preparation (folds that make room, changed views
// composed): replayed from a CUDA graph, or run directly. Whether a graph ran.
Result<bool> CudaRunner::Impl::run_step(const CudaStepPlan& p, std::span<SequenceKv* const> seqs) {
  if (linear)
    if (Status st = linear->prepare(); !st.ok()) {
      linear->abandon(seqs);
      return st.error();
    }
  std::string capture_error;
  void* graph = p.graphed ? graph_for(p, &capture_error) : nullptr;
  if (Status st = graph ? dev.launch_graph(graph) : launch(p.n_run); !st.ok()) {
    if (linear) linear->abandon(seqs);
    return st.error();
  }
  if (!capture_error.empty()) {
    opts.graphs = false;
    graph_error = capture_error;
  }
  return graph != nullptr;
}

// The step's graph: captured once per key and replayed after. What launch() reads from the Impl
// is the same for every step of one key (no tiles, every row's logits; for hybrid models the same
// table sizes). Null when there are kMaxGraphs already, or the capture failed: a capture that
// fails ran nothing, and the step launches directly. If that works, the capture itself was at
// fault, and graphs stay off for this runner with the reason in describe(); if not, the step's
// error is the direct launch's.
void* CudaRunner::Impl::graph_for(const CudaStepPlan& p, std::string* capture_error) {
  std::array<int64_t, 8> key{p.n_run};
  if (linear) {
    const auto lk = linear->graph_key();
    std::copy(lk.begin(), lk.end(), key.begin() + 1);
  }
  if (auto it = graphs.find(key); it != graphs.end()) return it->second;
  if (graphs.size() >= kMaxGraphs) return nullptr;
  Status captured = dev.begin_capture();
  if (captured.ok()) {
    captured = launch(p.n_run);
    auto g = dev.end_capture();
    if (captured.ok() && !g) captured = g.error();
    if (captured.ok()) return graphs.emplace(key, *g).first->second;
    if (g) dev.destroy_graph(*g);
  }
  *capture_error = captured.error().message;
  return nullptr;
}

// The step's draws on the device, in stream order before the step's sync.
Status CudaRunner::Impl::sample(const CudaStepPlan& p) {
  if (p.samples.empty()) return Status::success();
  CHORUS_TRY(put(samples, p.samples));
  return op(cuda::sample_rows(logits, p.n_logits_rows(), c.n_vocab, samples,
                              static_cast<int>(p.samples.size()), sampled, dev.stream()),
            "sample_rows");
}

// The drawn tokens, then the other logits rows.
Status CudaRunner::Impl::read_back(std::span<const BatchToken> batch, const CudaStepPlan& p,
                                   float* logits_out, TokenId* tokens_out) {
  if (!p.samples.empty()) {
    std::vector<int32_t> picked(p.samples.size());
    CHORUS_TRY(dev.download(picked.data(), sampled, static_cast<int64_t>(picked.size() * sizeof(int32_t))));
    for (size_t i = 0; i < picked.size(); ++i) {
      if (picked[i] < 0 || picked[i] >= c.n_vocab)
        return make_error(Errc::internal, "sample_rows returned token " + std::to_string(picked[i]));
      tokens_out[p.sample_out[i]] = picked[i];
    }
  }
  int64_t row = 0;
  size_t next_sample = 0;
  for (size_t t = 0; t < batch.size(); ++t) {
    if (!batch[t].logits) continue;
    if (next_sample < p.sample_out.size() && p.sample_out[next_sample] == row) {
      ++next_sample;  // drawn on the device: no logits come back
      ++row;
      continue;
    }
    CHORUS_TRY(dev.download_async(logits_out + row * c.n_vocab,
                                  logits + p.logits_row(static_cast<int>(t), row) * c.n_vocab,
                                  int64_t{c.n_vocab} * static_cast<int64_t>(sizeof(float))));
    ++row;
  }
  return dev.sync("logits");
}

std::string CudaRunner::describe() const {
  const Impl& m = *impl_;
  return m.dev.describe() + (m.opts.kv_bf16 ? ", bf16 KV" : ", f32 KV") +
         (m.graph_error.empty() ? "" : ", CUDA graphs off (a capture failed: " + m.graph_error + ")");
}

int CudaRunner::max_tokens() const {
  return impl_->opts.max_tokens;
}
void CudaRunner::set_graphs(bool on) {
  impl_->opts.graphs = on;
  if (on) impl_->graph_error.clear();
}
int CudaRunner::graphs() const {
  return static_cast<int>(impl_->graphs.size());
}
CudaRunner::ChainReads CudaRunner::chain_reads() const {
  return impl_->linear ? ChainReads{impl_->linear->chain_reads().first, impl_->linear->chain_reads().second}
                       : ChainReads{};
}
void CudaRunner::set_chain_reads(bool on) {
  impl_->opts.chain_reads = on;
  if (impl_->linear) impl_->linear->set_chain_reads(on);
}

}  // namespace chorus
