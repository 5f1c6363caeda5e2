// CudaLinear's weights and slots, and the launches of a step: prepare() (folds that make room,
// changed views composed) and layer() (everything a graph can hold). The plan is in
// cuda_linear_plan.cpp.
#include <algorithm>
#include <cmath>

#include "engine/forward/cuda/cuda_linear_impl.h"

namespace chorus {

CudaLinear::CudaLinear(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaLinear::~CudaLinear() = default;

Status CudaLinear::check(const ModelConfig& c, const Weights& w) {
  auto unsupported = [&](const std::string& what) {
    return make_error(Errc::unsupported, "the CUDA runner does not run " + what + " yet (" + c.arch + ")");
  };
  const GdnConfig& d = c.gdn;
  if (d.head_dim != 16 && (d.head_dim < 32 || d.head_dim > 128 || d.head_dim % 32 != 0))
    return unsupported("Gated DeltaNet heads of " + std::to_string(d.head_dim) +
                       " (16, or 32..128 in steps of 32)");
  if (d.conv_kernel < 2 || d.conv_kernel > 16)
    return unsupported("a Gated DeltaNet convolution of width " + std::to_string(d.conv_kernel) + " (2..16)");
  for (size_t l = 0; l < w.layers.size(); ++l) {
    if (!c.is_linear(static_cast<int>(l))) continue;
    const LayerWeights& L = w.layers[l];
    for (const auto& [m, n] : {std::pair{&L.w_qkv, "attn_qkv"}, std::pair{&L.w_z, "attn_gate"},
                               std::pair{&L.w_beta, "ssm_beta"}, std::pair{&L.w_alpha, "ssm_alpha"},
                               std::pair{&L.w_ba, "ssm_ba"}, std::pair{&L.w_ssm_out, "ssm_out"}})
      if (m->data && !cuda::converts_to_bf16(static_cast<int>(m->type)))
        return make_error(Errc::unsupported, "the CUDA runner cannot convert blk." + std::to_string(l) + "." +
                                                 n + " (" + std::string(tensor_type_name(m->type)) +
                                                 "): " + cuda::bf16_conversions() + " weights so far");
  }
  return Status::success();
}

int64_t CudaLinear::slot_floats(const ModelConfig& c) {
  int64_t n_linear = 0;
  for (int l = 0; l < c.n_layer; ++l) n_linear += c.is_linear(l);
  return SlotLayout::of(c.gdn).size * n_linear;
}

// Layer l's matrices and vectors, and its part of a slot.
Status CudaLinear::Impl::upload_layer(const LayerWeights& L, int l) {
  Layer& D = layers[static_cast<size_t>(l)];
  D.index = n_linear++;
  D.offset = D.index * lay.size;
  for (auto [dst, src, name] :
       {std::tuple{&D.qkv, &L.w_qkv, "attn_qkv"}, std::tuple{&D.z, &L.w_z, "attn_gate"},
        std::tuple{&D.beta, &L.w_beta, "ssm_beta"}, std::tuple{&D.alpha, &L.w_alpha, "ssm_alpha"},
        std::tuple{&D.ba, &L.w_ba, "ssm_ba"}, std::tuple{&D.out, &L.w_ssm_out, "ssm_out"}}) {
    if (!src->data) continue;  // ssm_ba (qwen3next) or ssm_beta and ssm_alpha
    auto r = cuda_upload_matrix(dev, *src, name);
    if (!r) return r.error();
    *dst = *r;
  }
  for (auto [dst, src, n, name] : {std::tuple{&D.conv, L.conv, int64_t{K1 + 1} * C, "ssm_conv1d"},
                                   std::tuple{&D.ssm_a, L.ssm_a, int64_t{Hv}, "ssm_a"},
                                   std::tuple{&D.dt_bias, L.dt_bias, int64_t{Hv}, "ssm_dt.bias"},
                                   std::tuple{&D.norm, L.ssm_norm, int64_t{dk}, "ssm_norm"}}) {
    if (!src)
      return make_error(Errc::bad_format,
                        std::string("blk.") + std::to_string(l) + "." + name + " is missing");
    auto r = cuda_upload_vec(dev, src, n, name);
    if (!r) return r.error();
    *dst = *r;
  }
  return Status::success();
}

Result<std::unique_ptr<CudaLinear>> CudaLinear::create(const ModelConfig& c, const Weights& w,
                                                       CudaDevice& dev, int max_tokens, int n_slots,
                                                       bool chain_reads, cuda::bf16_bits* xb) {
  if (Status s = check(c, w); !s.ok()) return s.error();
  if (n_slots < 0)
    return make_error(Errc::invalid_argument, "CUDA runner: linear_slots must not be negative");
  auto impl = std::make_unique<Impl>(c, dev);
  Impl& m = *impl;
  m.xb = xb;
  m.chain_reads = chain_reads;
  m.layers.resize(static_cast<size_t>(c.n_layer));
  for (int l = 0; l < c.n_layer; ++l)
    if (c.is_linear(l)) CHORUS_TRY(m.upload_layer(w.layers[static_cast<size_t>(l)], l));
  m.slot_size = slot_floats(c);
  if (n_slots == 0) {  // 64, or what half of the pool left fits
    const int64_t fits = (dev.pool_bytes() - dev.pool_used()) / 2 / (m.slot_size * 4);
    n_slots = static_cast<int>(std::clamp<int64_t>(fits, 1, 64));
  }
  auto slots = dev.alloc(m.slot_size * (n_slots + 1) * 4, "linear-state slots");  // + 1: padding
  if (!slots) return slots.error();
  m.slot_mem = static_cast<float*>(*slots);
  m.pad_slot = n_slots;
  if (Status st = dev.zero(m.slot_base(m.pad_slot), m.slot_size * 4); !st.ok()) return st.error();
  m.pool = std::make_unique<LinearSlots>(n_slots);
  const int64_t T = max_tokens;
  for (auto [dst, n] : {std::pair{&m.in, T * c.n_embd},
                        std::pair{&m.qkv, T * m.C},
                        std::pair{&m.y, T * m.C},
                        std::pair{&m.q, T * m.kd},
                        std::pair{&m.k, T * m.kd},
                        std::pair{&m.v, T * m.vd},
                        std::pair{&m.z, T * m.vd},
                        std::pair{&m.bl, T * 2 * m.Hv},
                        std::pair{&m.al, T * m.Hv},
                        std::pair{&m.g, T * m.Hv},
                        std::pair{&m.beta, T * m.Hv},
                        std::pair{&m.o, T * m.vd},
                        std::pair{&m.cS, m.state_floats()},
                        std::pair{&m.cS2, m.state_floats()},
                        std::pair{&m.ctail, int64_t{m.K1} * m.C},
                        std::pair{&m.cy, int64_t{m.K1} * m.C},
                        std::pair{&m.ck, int64_t{m.K1} * m.kd},
                        std::pair{&m.cv, int64_t{m.K1} * m.vd},
                        std::pair{&m.hy, int64_t{Impl::kMaxChainHeads} * m.C},
                        std::pair{&m.hk, int64_t{Impl::kMaxChainHeads} * m.kd},
                        std::pair{&m.hv, int64_t{Impl::kMaxChainHeads} * m.vd}}) {
    auto r = dev.alloc(n * 4, "linear-layer activations");
    if (!r) return r.error();
    *dst = static_cast<float*>(*r);
  }
  constexpr int64_t kTableBytes = int64_t{16} << 20;
  auto tables = dev.alloc(kTableBytes, "linear-layer step tables");
  if (!tables) return tables.error();
  m.dev_tables = static_cast<std::byte*>(*tables);
  m.host_tables.resize(kTableBytes);
  return std::unique_ptr<CudaLinear>(new CudaLinear(std::move(impl)));
}

Status CudaLinear::prepare() {
  Impl& m = *impl_;
  for (int l = 0; l < m.c.n_layer; ++l) {
    if (!m.c.is_linear(l)) continue;
    for (const auto& [r, n] : m.prefolds) {  // buffers that cannot take the step's tokens
      float* B = m.part(m.slot_of[r], l);
      CHORUS_TRY(m.runs(B + m.lay.AB, true, B + m.lay.ck, B + m.lay.cv, B + m.lay.cg, B + m.lay.cb, 0,
                        static_cast<int>(n)));
    }
    // The view states that changed, composed from the blocks' summaries as the step found them.
    for (const Impl::Prefix& p : m.prefixes) {
      CHORUS_TRY(m.dev.zero(m.cS, m.state_floats() * 4));
      CHORUS_TRY(m.dev.zero(m.ctail, int64_t{m.K1} * m.C * 4));
      for (const auto& [slot, n, dense] : p.blocks)
        CHORUS_TRY(m.apply_block(l, slot, n, dense, m.cS, m.cS2, m.ctail));
      for (size_t r : p.users) {  // then each writer's own block as it is before the step
        float* B = m.part(m.slot_of[r], l);
        CHORUS_TRY(m.dev.copy(B + m.lay.S, m.cS, m.state_floats() * 4));
        CHORUS_TRY(m.dev.copy(B + m.lay.run_tail, m.ctail, int64_t{m.K1} * m.C * 4));
        CHORUS_TRY(m.apply_block(l, m.slot_of[r], m.groups[r].start, m.own_dense[r], B + m.lay.S, m.cS2,
                                 B + m.lay.run_tail));
      }
      for (size_t r : p.base_users) {  // a chain read's base: kept as it is
        float* B = m.part(m.slot_of[r], l);
        CHORUS_TRY(m.dev.copy(B + m.lay.S, m.cS, m.state_floats() * 4));
        CHORUS_TRY(m.dev.copy(B + m.lay.base_tail, m.ctail, int64_t{m.K1} * m.C * 4));
      }
    }
  }
  if (m.next_run != m.n_prepare_runs)
    return make_error(Errc::internal, "CUDA linear layers: the step's preparation made " +
                                          std::to_string(m.next_run) + " of the " +
                                          std::to_string(m.n_prepare_runs) + " gdn runs its plan made");
  return Status::success();
}

Status CudaLinear::layer(int l, float* h, int T) {
  Impl& m = *impl_;
  const Impl::Layer& L = m.layers[static_cast<size_t>(l)];
  if (T != static_cast<int>(m.order.size()))
    return make_error(Errc::internal, "CUDA linear layer: " + std::to_string(T) + " tokens, planned for " +
                                          std::to_string(m.order.size()));
  CHORUS_TRY(m.project(L, h, T));
  // (The view states that changed were composed by prepare().)
  const cuda::GdnChainArgs chain = m.chain_args(L);
  if (m.n_reads > 0) CHORUS_TRY(m.chain_inputs(chain));
  CHORUS_TRY(m.recur(L, T));
  // Chain reads write their rows' outputs (gdn_runs skipped their runs), before any block they
  // read takes this step's tokens.
  if (m.n_reads > 0) CHORUS_TRY(op(cuda::gdn_chain_read(chain, m.dev.stream()), "gdn chain read"));
  CHORUS_TRY(m.suffix_reads(l));
  CHORUS_TRY(m.append_to_blocks(L, l));
  if (L.index + 1 == m.n_linear && m.next_run != m.run_mats.size())
    return make_error(Errc::internal, "CUDA linear layers: the step made " + std::to_string(m.next_run) +
                                          " of the " + std::to_string(m.run_mats.size()) +
                                          " gdn runs its plan made");
  return m.output(L, h, T);
}

// 1. Projections and gates of every token, in group order.
Status CudaLinear::Impl::project(const Layer& L, float* h, int T) {
  void* st = dev.stream();
  float* x = h;
  if (!identity) {
    CHORUS_TRY(op(cuda::gather_rows(h, order_dev, T, c.n_embd, in, st), "gdn gather"));
    x = in;
  }
  CHORUS_TRY(op(cuda::to_bf16(x, xb, int64_t{T} * c.n_embd, st), "to_bf16"));
  CHORUS_TRY(gemm(L.qkv, qkv, T));
  CHORUS_TRY(gemm(L.z, z, T));
  if (L.ba.w) {  // qwen3next: b and alpha packed per key head
    CHORUS_TRY(gemm(L.ba, bl, T));
    return op(cuda::gdn_gates_packed(bl, L.dt_bias, L.ssm_a, T, Hv, Hk, g, beta, st), "gdn gates");
  }
  CHORUS_TRY(gemm(L.beta, bl, T));
  CHORUS_TRY(gemm(L.alpha, al, T));
  return op(cuda::gdn_gates(al, bl, L.dt_bias, L.ssm_a, T, Hv, g, beta, st), "gdn gates");
}

cuda::GdnChainArgs CudaLinear::Impl::chain_args(const Layer& L) const {
  return {reads_dev,
          n_reads,
          chain_blocks_dev,
          chain_heads_dev,
          n_chain_heads,
          slot_mem,
          slot_size,
          L.offset,
          lay.parts(),
          L.conv,
          C,
          K1,
          hy,
          hk,
          hv,
          q,
          k,
          v,
          g,
          beta,
          o,
          Hk,
          Hv,
          dk,
          d.tiled_heads};
}

// Chain reads: their blocks' head tokens convolved with the inputs before them (split, k
// normalised), and each reader's run tail, which the convolution in recur() reads.
Status CudaLinear::Impl::chain_inputs(const cuda::GdnChainArgs& chain) {
  void* st = dev.stream();
  CHORUS_TRY(op(cuda::gdn_chain_inputs(chain, st), "gdn chain inputs"));
  CHORUS_TRY(op(cuda::split_qkv(hy, n_chain_heads, kd, vd, nullptr, hk, hv, st), "gdn chain split"));
  return op(cuda::l2norm_rows(hk, n_chain_heads * Hk, dk, c.norm_eps, st), "gdn chain l2norm");
}

// 3. Each group's tokens: convolution with its view's tail, factors, the recurrence from its view
// state (all groups in one launch each).
Status CudaLinear::Impl::recur(const Layer& L, int T) {
  void* st = dev.stream();
  CHORUS_TRY(op(cuda::gdn_conv_slots(qkv, T, row_seq_dev, first_dev, slot_dev, slot_mem, slot_size,
                                     L.offset + lay.run_tail, L.conv, C, K1 + 1, y, st),
                "gdn conv"));
  CHORUS_TRY(op(cuda::split_qkv(y, T, kd, vd, q, k, v, st), "gdn split"));
  CHORUS_TRY(op(cuda::l2norm_rows(q, T * Hk, dk, c.norm_eps, st), "gdn l2norm q"));
  CHORUS_TRY(op(cuda::l2norm_rows(k, T * Hk, dk, c.norm_eps, st), "gdn l2norm k"));
  cuda::GdnRunsArgs a{states_dev + static_cast<int64_t>(L.index) * n_groups,
                      first_dev,
                      q,
                      k,
                      v,
                      g,
                      beta,
                      o,
                      n_groups,
                      Hk,
                      Hv,
                      dk,
                      dk,
                      0,
                      d.tiled_heads};
  return op(cuda::gdn_runs(a, st), "gdn runs");
}

// Writers with blocks after them in their view: token by token, the state after the token carried
// through those blocks (heads convolved with the writer's tail, token included), then read with
// the token's query (one batched product per key head). Before the tails move on.
Status CudaLinear::Impl::suffix_reads(int l) {
  void* st = dev.stream();
  const int64_t state = int64_t{dk} * dk, r = Hv / Hk;
  for (const Suffix& sx : suffixes) {
    float* B = part(slot_of[sx.group], l);
    const int32_t f = first[sx.group];
    for (int32_t row = f; row < first[sx.group + 1]; ++row) {
      CHORUS_TRY(runs(B + lay.S, false, k, v, g, beta, row, row + 1));
      CHORUS_TRY(dev.copy(cS, B + lay.S, state_floats() * 4));
      CHORUS_TRY(dev.copy(ctail, B + lay.run_tail, int64_t{K1} * C * 4));
      CHORUS_TRY(
          op(cuda::shift_rows(ctail, K1, qkv + int64_t{f} * C, row - f + 1, C, st), "gdn suffix tail"));
      for (const auto& [slot, n, dense] : sx.blocks)
        CHORUS_TRY(apply_block(l, slot, n, dense, cS, cS2, ctail));
      for (int kh = 0; kh < Hk; ++kh) {  // out[h] = S'[h] q[kh(h)] for the value heads of key head kh
        const float* qh = q + int64_t{row} * kd + int64_t{kh} * dk;
        const int64_t h0 = d.tiled_heads ? kh : kh * r, stride = d.tiled_heads ? Hk : 1;
        CHORUS_TRY(cuda_affine_f32_batched(dev, cS + h0 * state, qh, nullptr, o + int64_t{row} * vd + h0 * dk,
                                           dk, dk, 1, stride * state, 0, 0, stride * dk,
                                           static_cast<int>(r)));
      }
    }
  }
  return Status::success();
}

// Into each group's block: tails, folds (a prefill's tokens beyond what a buffer holds), new rows.
Status CudaLinear::Impl::append_to_blocks(const Layer& L, int l) {
  void* st = dev.stream();
  for (const int64_t at : {lay.run_tail, lay.tail})
    CHORUS_TRY(op(cuda::shift_rows_slots(slot_mem, slot_size, L.offset + at, slot_dev, first_dev, n_groups,
                                         K1, qkv, C, st),
                  "gdn tails"));
  for (const Fold& f : folds)
    CHORUS_TRY(runs(part(slot_of[f.group], l) + lay.AB, true, k, v, g, beta, static_cast<int>(f.row),
                    static_cast<int>(f.row + f.n)));
  for (const auto& [src, width, rows, n, at] : {std::tuple{qkv, C, head_dev, n_head_rows, lay.head_x},
                                                std::tuple{g, Hv, head_dev, n_head_rows, lay.head_g},
                                                std::tuple{beta, Hv, head_dev, n_head_rows, lay.head_b},
                                                std::tuple{k, kd, compact_dev, n_compact_rows, lay.ck},
                                                std::tuple{v, vd, compact_dev, n_compact_rows, lay.cv},
                                                std::tuple{g, Hv, compact_dev, n_compact_rows, lay.cg},
                                                std::tuple{beta, Hv, compact_dev, n_compact_rows, lay.cb}})
    CHORUS_TRY(
        op(cuda::rows_to_slots(src, width, rows, n, slot_mem, slot_size, L.offset + at, st), "gdn append"));
  return Status::success();
}

// 4. The 1/sqrt(dk) query scale, RMSNorm(o_h) * silu(z_h) per head, the output projection.
Status CudaLinear::Impl::output(const Layer& L, float* h, int T) {
  void* st = dev.stream();
  CHORUS_TRY(op(cuda::scale(o, int64_t{T} * vd, 1.0f / std::sqrt(static_cast<float>(dk)), st), "gdn scale"));
  CHORUS_TRY(op(cuda::rmsnorm(o, L.norm, o, T * Hv, dk, c.norm_eps, st), "ssm_norm"));
  CHORUS_TRY(op(cuda::swiglu(z, o, o, int64_t{T} * vd, st), "gdn gate"));
  CHORUS_TRY(op(cuda::to_bf16(o, xb, int64_t{T} * vd, st), "to_bf16"));
  if (identity) return gemm(L.out, h, T);
  CHORUS_TRY(gemm(L.out, in, T));
  return op(cuda::scatter_rows(in, order_dev, T, c.n_embd, h, st), "gdn scatter");
}

int CudaLinear::slots() const {
  return impl_->pool->capacity();
}
std::pair<int64_t, int64_t> CudaLinear::chain_reads() const {
  return {impl_->reads_done, impl_->graphed_reads};
}
void CudaLinear::set_chain_reads(bool on) {
  impl_->chain_reads = on;
}

int CudaLinear::slots_in_use() const {
  return impl_->pool->in_use();
}

LinearSlots& CudaLinear::slot_pool() {
  return *impl_->pool;
}

Status CudaLinear::save(LinearState& s) {
  Impl& m = *impl_;
  if (!m.pool->holds(s)) return Status::success();  // no slot of ours: nothing on the device
  s.saved_slot.resize(static_cast<size_t>(m.slot_size));
  CHORUS_TRY(m.dev.download(s.saved_slot.data(), m.slot_base(*s.slot), m.slot_size * 4));
  s.slot.reset();
  s.slot_owner = nullptr;
  return Status::success();
}

Status CudaLinear::load(LinearState& s) {
  Impl& m = *impl_;
  if (m.pool->holds(s)) return Status::success();
  if (s.saved_slot.size() != static_cast<size_t>(m.slot_size))
    return make_error(Errc::internal, "CUDA runner: a linear state to load holds " +
                                          std::to_string(s.saved_slot.size()) + " floats, not a slot's " +
                                          std::to_string(m.slot_size));
  CHORUS_TRY(m.acquire(s));
  if (Status st = m.dev.upload(m.slot_base(*s.slot), s.saved_slot.data(), m.slot_size * 4); !st.ok()) {
    s.slot.reset();
    s.slot_owner = nullptr;
    return st;
  }
  s.saved_slot.clear();
  s.saved_slot.shrink_to_fit();
  return Status::success();
}

}  // namespace chorus
