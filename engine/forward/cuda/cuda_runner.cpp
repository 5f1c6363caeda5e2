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
  const int64_t T = opts.max_tokens, E = c.n_embd, QD = c.q_dim(), KVD = c.kv_dim(),
                FF = c.moe() ? 0 : c.n_ff;
  auto embd = cuda_upload_matrix(dev, w.token_embd, "token_embd");
  if (!embd) return embd.error();
  m.embd = *embd;
  if (c.tied_output) {
    m.output = m.embd;
  } else {
    auto out = cuda_upload_matrix(dev, w.output, "output");
    if (!out) return out.error();
    m.output = *out;
  }
  auto on = cuda_upload_vec(dev, w.output_norm, E, "output_norm");
  if (!on) return on.error();
  m.output_norm = *on;
  m.page_stride = 16 * KVD;
  const int64_t elem = opts.kv_bf16 ? 2 : 4;
  for (int l = 0; l < c.n_layer; ++l) {
    const LayerWeights& L = w.layers[static_cast<size_t>(l)];
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
    if (!attention) {  // no KV: its state lives in the linear-state slots
      m.layers.push_back(D);
      continue;
    }
    // n_pages, and one spare that the padding tokens of a graphed step write and read.
    auto kp = dev.alloc((opts.n_pages + 1) * m.page_stride * elem, "KV pages");
    if (!kp) return kp.error();
    auto vp = dev.alloc((opts.n_pages + 1) * m.page_stride * elem, "KV pages");
    if (!vp) return vp.error();
    D.k_pool = *kp;
    D.v_pool = *vp;
    m.layers.push_back(D);
  }
  const int64_t widest = std::max({E, QD, FF, int64_t{c.gdn.value_dim()}});
  for (auto [dst, n] :
       {std::pair{&m.x, T * E}, std::pair{&m.h, T * E}, std::pair{&m.q, T * QD}, std::pair{&m.k, T * KVD},
        std::pair{&m.v, T * KVD}, std::pair{&m.att, T * QD}, std::pair{&m.gate, T * FF},
        std::pair{&m.up, T * FF}, std::pair{&m.logits, T * int64_t{c.n_vocab}},
        std::pair{&m.q_single, T * QD}, std::pair{&m.att_single, T * QD}}) {
    auto r = m.take<float>(n, "activations");
    if (!r) return r.error();
    *dst = *r;
  }
  if (c.attn_output_gate)
    for (auto [dst, n] : {std::pair{&m.qg, 2 * T * QD}, std::pair{&m.attn_gate, T * QD}}) {
      auto r = m.take<float>(n, "activations");
      if (!r) return r.error();
      *dst = *r;
    }
  auto xb = m.take<bf16_bits>(T * widest, "activations");
  if (!xb) return xb.error();
  m.xb = *xb;
  m.page_cap = 8 * opts.n_pages + T + 1;
  for (auto [dst, n] : {std::pair{&m.ids, T}, std::pair{&m.pos, T}, std::pair{&m.write_page, T},
                        std::pair{&m.write_slot, T}, std::pair{&m.page_ids, m.page_cap}}) {
    auto r = m.take<int32_t>(n, "step tables");
    if (!r) return r.error();
    *dst = *r;
  }
  auto segs = m.take<cuda::AttnSegment>(T * kMaxViewBlocks, "step tables");
  if (!segs) return segs.error();
  m.segs = *segs;
  auto toks = m.take<cuda::AttnToken>(T, "step tables");
  if (!toks) return toks.error();
  m.tokens = *toks;
  auto logit_rows = m.take<int32_t>(T, "step tables");
  if (!logit_rows) return logit_rows.error();
  m.logit_rows = *logit_rows;
  auto single_rows = m.take<int32_t>(T, "step tables");
  if (!single_rows) return single_rows.error();
  m.single_rows = *single_rows;
  auto single_table = m.take<cuda::AttnToken>(T, "step tables");
  if (!single_table) return single_table.error();
  m.single_table = *single_table;
  auto tiles = m.take<cuda::AttnTile>(T, "step tables");
  if (!tiles) return tiles.error();
  m.tiles = *tiles;
  auto samples = m.take<cuda::SampleRow>(T, "step tables");
  if (!samples) return samples.error();
  m.samples = *samples;
  auto sampled = m.take<int32_t>(T, "step tables");
  if (!sampled) return sampled.error();
  m.sampled = *sampled;
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

Status CudaRunner::forward(std::span<const BatchToken> batch, std::span<SequenceKv* const> seqs,
                           float* logits_out, std::span<const View> views,
                           std::span<const std::optional<PlannedDraw>> draws, TokenId* tokens_out) {
  static_assert(max_device_top_k() == cuda::kMaxSampleTopK);
  Impl& m = *impl_;
  const ModelConfig& c = m.c;
  const int T = static_cast<int>(batch.size());
  if (T == 0) return Status::success();
  CHORUS_TRY(check_forward_args(c, m.opts.max_tokens, batch, seqs, views));
  CudaStepLimits limits{m.opts.n_pages, m.page_cap, m.opts.graphs, m.opts.graph_max_tokens,
                        m.opts.max_tokens};
  auto planned = plan_cuda_step(batch, seqs, views, draws, tokens_out != nullptr, limits);
  if (!planned) return planned.error();
  CHORUS_TRY(m.dev.bind());
  if (m.linear) {
    CHORUS_TRY(m.linear->plan(batch, seqs, views, planned->n_run));
    if (planned->graphed && !m.linear->graphable()) {  // see CudaLinear::graphable(): launched directly
      limits.graphs = false;
      planned = plan_cuda_step(batch, seqs, views, draws, tokens_out != nullptr, limits);
      if (!planned) return planned.error();
      CHORUS_TRY(m.linear->plan(batch, seqs, views, planned->n_run));
    }
  }
  const CudaStepPlan& p = *planned;
  // The tables go up in stream order; `p` outlives them (the sync below).
  CHORUS_TRY(m.put(m.ids, p.ids));
  CHORUS_TRY(m.put(m.pos, p.pos));
  CHORUS_TRY(m.put(m.write_page, p.write_page));
  CHORUS_TRY(m.put(m.write_slot, p.write_slot));
  CHORUS_TRY(m.put(m.page_ids, p.page_ids));
  CHORUS_TRY(m.put(m.segs, p.segs));
  CHORUS_TRY(m.put(m.tokens, p.tokens));
  CHORUS_TRY(m.put(m.tiles, p.tiles));
  CHORUS_TRY(m.put(m.single_rows, p.single_tokens));
  CHORUS_TRY(m.put(m.single_table, p.single_table));
  CHORUS_TRY(m.put(m.logit_rows, p.logit_tokens));
  m.tiled = !p.graphed;
  m.n_tiles = static_cast<int>(p.tiles.size());
  m.n_single = static_cast<int>(p.single_tokens.size());
  m.n_logit_rows = p.graphed ? -1 : static_cast<int>(p.logit_tokens.size());

  // Hybrid models: the work before the layers (folds that make room, changed views composed).
  if (m.linear)
    if (Status st = m.linear->prepare(); !st.ok()) {
      m.linear->abandon(seqs);
      return st;
    }
  // The step's launches: captured once per key into a CUDA graph and replayed, or run directly
  // (prefill-sized steps, or graphs off). What launch() reads from `m` is the same for every
  // step of one key (no tiles, every row's logits; for hybrid models the same table sizes).
  void* graph = nullptr;
  std::string capture_error;
  if (p.graphed) {
    std::array<int64_t, 8> key{p.n_run};
    if (m.linear) {
      const auto k = m.linear->graph_key();
      std::copy(k.begin(), k.end(), key.begin() + 1);
    }
    if (auto it = m.graphs.find(key); it != m.graphs.end()) {
      graph = it->second;
    } else if (m.graphs.size() < Impl::kMaxGraphs) {
      // A capture that fails ran nothing: the step launches directly below. If that works, the
      // capture itself was at fault, and graphs stay off for this runner with the reason in
      // describe(); if not, the step's error is the direct launch's.
      Status captured = m.dev.begin_capture();
      if (captured.ok()) {
        captured = m.launch(p.n_run);
        auto g = m.dev.end_capture();
        if (captured.ok() && !g) captured = g.error();
        if (captured.ok()) {
          graph = m.graphs.emplace(key, *g).first->second;
        } else if (g) {
          m.dev.destroy_graph(*g);
        }
      }
      if (!captured.ok()) capture_error = captured.error().message;
    }
  }
  if (Status st = graph ? m.dev.launch_graph(graph) : m.launch(p.n_run); !st.ok()) {
    if (m.linear) m.linear->abandon(seqs);
    return st;
  }
  if (!capture_error.empty()) {
    m.opts.graphs = false;
    m.graph_error = capture_error;
  }
  Status sampling = Status::success();  // reported after the step's blocks are accounted for
  if (!p.samples.empty()) {
    sampling = m.put(m.samples, p.samples);
    if (sampling.ok())
      sampling = op(cuda::sample_rows(m.logits, p.n_logits_rows(), c.n_vocab, m.samples,
                                      static_cast<int>(p.samples.size()), m.sampled, m.dev.stream()),
                    "sample_rows");
  }
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
  if (m.linear) m.linear->finish(seqs, graph != nullptr);
  CHORUS_TRY(sampling);
  if (!p.samples.empty()) {
    std::vector<int32_t> picked(p.samples.size());
    CHORUS_TRY(
        m.dev.download(picked.data(), m.sampled, static_cast<int64_t>(picked.size() * sizeof(int32_t))));
    for (size_t i = 0; i < picked.size(); ++i) {
      if (picked[i] < 0 || picked[i] >= c.n_vocab)
        return make_error(Errc::internal, "sample_rows returned token " + std::to_string(picked[i]));
      tokens_out[p.sample_out[i]] = picked[i];
    }
  }
  // The other logits rows come back.
  int64_t row = 0;
  size_t next_sample = 0;
  for (int t = 0; t < T; ++t) {
    if (!batch[static_cast<size_t>(t)].logits) continue;
    if (next_sample < p.sample_out.size() && p.sample_out[next_sample] == row) {
      ++next_sample;  // drawn on the device: no logits come back
      ++row;
      continue;
    }
    CHORUS_TRY(m.dev.download_async(logits_out + row * c.n_vocab, m.logits + p.logits_row(t, row) * c.n_vocab,
                                    int64_t{c.n_vocab} * static_cast<int64_t>(sizeof(float))));
    ++row;
  }
  return m.dev.sync("logits");
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
