#include "engine/cuda_linear.h"
#include "engine/cuda_op.h"

#include <algorithm>
#include <array>
#include <map>
#include <cmath>
#include <cstring>
#include <mutex>
#include <tuple>
#include <vector>

#include "engine/linear_state.h"
#include "gpu/cuda_device.h"

namespace chorus {

namespace {

using cuda_detail::op;

// Free slots, shared with the states' deleters (a state may outlive the runner).
struct SlotPool {
  std::mutex mu;
  std::vector<int32_t> free;
  int n = 0;
};

}  // namespace

struct CudaLinear::Impl {
  const ModelConfig& c;
  CudaDevice& dev;
  const GdnConfig d;
  const int max_tokens;
  const int C, K1, Hv, Hk, dk, kd, vd;  // conv_dim, K-1, heads, head size, widths

  struct Layer {
    CudaMat qkv, z, beta, alpha, out;
    const float *conv = nullptr, *ssm_a = nullptr, *dt_bias = nullptr, *norm = nullptr;
    int64_t offset = 0;  // of this layer's part of a slot
    int index = 0;       // among the linear layers
  };
  std::vector<Layer> layers;  // [n_layer]; attention layers stay empty

  // One layer's part of a slot, in floats from its start.
  int64_t o_S = 0, o_run_tail = 0, o_tail = 0, o_head_x = 0, o_head_g = 0, o_head_b = 0, o_AB = 0, o_ck = 0, o_cv = 0,
          o_cg = 0, o_cb = 0, layer_floats = 0;
  float* slot_mem = nullptr;
  int64_t slot_size = 0;  // floats per slot
  std::shared_ptr<SlotPool> pool = std::make_shared<SlotPool>();

  // Activations [max_tokens][...], in the step's group order.
  float *in = nullptr, *qkv = nullptr, *y = nullptr, *q = nullptr, *k = nullptr, *v = nullptr, *z = nullptr,
        *bl = nullptr, *al = nullptr, *g = nullptr, *beta = nullptr, *o = nullptr;
  // Composition scratch: two states, a tail, and a block head's convolution and factors.
  float *cS = nullptr, *cS2 = nullptr, *ctail = nullptr, *cy = nullptr, *ck = nullptr, *cv = nullptr;
  cuda::bf16_bits* xb = nullptr;

  // The step's tables, all made by plan() and uploaded in one copy at its end, so that nothing
  // is uploaded between a layer's launches and a table that does not fit fails the step before
  // any layer has written a block. Neither side is reused until the next plan(), which comes
  // after the step's sync.
  std::vector<std::byte> host_tables;
  std::byte* dev_tables = nullptr;
  size_t tables_used = 0;
  // The single-matrix gdn_runs of the step (compositions and folds), in the order layer()
  // makes them: matrix and token range (checked against each call), and where they are on the
  // device.
  std::vector<float*> run_mats;
  std::vector<int32_t> run_ranges;  // [2 per run]
  float* const* run_mats_dev = nullptr;
  const int32_t* run_ranges_dev = nullptr;
  size_t next_run = 0;
  size_t n_prepare_runs = 0;  // the first ones are prepare()'s

  // The step (rows in group order: each written sequence's tokens together).
  std::vector<LinearGroup> groups;
  std::vector<int32_t> order;       // order[i]: the batch row at group-ordered row i
  bool identity = true;             // the batch is already in group order
  std::vector<int32_t> first;       // [groups + 1] each group's first row
  std::vector<int32_t> slot_of;     // [groups (+ padding)] the written block's slot
  int n_groups = 0;                 // with the padding group of a graphed step
  int32_t pad_slot = 0;             // the slot padding rows run through (never a block's)
  // Every layer appends the same rows to the same places: the head rows (raw inputs, g, beta)
  // and the rows that join the buffer (k, v, g, beta). A group whose buffer cannot take its new
  // tokens folds the buffer into the summary before the step (prepare()); one with more new
  // tokens than a buffer holds (a prefill) folds those in the layer, all but the last
  // (new mod dk).
  struct Fold {
    size_t group;
    int64_t row, n;  // the step's rows [row, row + n), in the layer
  };
  std::vector<Fold> folds;
  std::vector<std::pair<size_t, int64_t>> prefolds;  // (group, buffered tokens) before the step
  std::vector<int64_t> own_dense;                    // [groups] body tokens in [A; B] after the prefolds
  std::vector<int64_t> new_dense;                    // [groups] ... and after the step
  int n_head_rows = 0, n_compact_rows = 0;
  // On the device (in the step's tables): order, each row's group, first, slot_of, the rows to
  // append, and per linear layer the groups' run states (gdn_runs' matrices).
  const int32_t *order_dev = nullptr, *row_seq_dev = nullptr, *first_dev = nullptr, *slot_dev = nullptr;
  const cuda::SlotRow *head_dev = nullptr, *compact_dev = nullptr;
  float* const* states_dev = nullptr;
  // Distinct prefixes to compose (blocks as slot, length and body tokens in [A; B]), and which
  // groups use each.
  struct Prefix {
    std::vector<std::tuple<int32_t, int64_t, int64_t>> blocks;
    std::vector<size_t> users;
  };
  std::vector<Prefix> prefixes;
  bool graphable = false;  // no fold in the layers: the step's layer launches can be a graph

  Impl(const ModelConfig& config, CudaDevice& device, int T)
      : c(config), dev(device), d(config.gdn), max_tokens(T), C(d.conv_dim()), K1(d.conv_kernel - 1),
        Hv(d.n_v_heads), Hk(d.n_k_heads), dk(d.head_dim), kd(d.key_dim()), vd(d.value_dim()) {}

  float* part(int32_t slot, int l) { return slot_mem + slot * slot_size + layers[static_cast<size_t>(l)].offset; }
  int64_t state_floats() const { return int64_t{Hv} * dk * dk; }

  // A table into the host buffer; its device address (valid after flush()).
  template <class T>
  Result<T*> put(const std::vector<T>& v) {
    const size_t bytes = v.size() * sizeof(T);
    const size_t at = (tables_used + 15) / 16 * 16;
    if (at + bytes > host_tables.size())
      return make_error(Errc::out_of_range, "CUDA linear layers: the step's tables take more than " +
                                                std::to_string(host_tables.size()) +
                                                " bytes (fewer sequences or shorter views per step)");
    if (bytes > 0) std::memcpy(host_tables.data() + at, v.data(), bytes);
    tables_used = at + bytes;
    return reinterpret_cast<T*>(dev_tables + at);
  }
  // The upload reads host_tables: until the step's sync, plan() must not write them again
  // (a step that failed before its sync leaves `uploading` set, and the next plan() waits).
  Status flush() {
    uploading = true;
    return dev.upload_async(dev_tables, host_tables.data(), static_cast<int64_t>(tables_used));
  }
  bool uploading = false;
  int n_linear = 0;

  template <class T, class P>
  Status put_into(const std::vector<T>& v, P* dst) {
    auto r = put(v);
    if (!r) return r.error();
    *dst = *r;
    return Status::success();
  }

  // gdn_runs over rows [t0, t1) of (k, v, g, beta) into one matrix, without outputs: a state or
  // a summary [A; B] (summary = true). The next of the runs plan() made tables for.
  Status runs(float* mat, bool summary, const float* k_, const float* v_, const float* g_, const float* b_, int t0,
              int t1) {
    if (t1 <= t0) return Status::success();
    const size_t i = next_run++;
    if (i >= run_mats.size() || run_mats[i] != mat || run_ranges[2 * i] != t0 || run_ranges[2 * i + 1] != t1)
      return make_error(Errc::internal, "CUDA linear layers: a gdn run the step's plan did not make");
    cuda::GdnRunsArgs a{run_mats_dev + i, run_ranges_dev + 2 * i, nullptr, k_, v_, g_, b_, nullptr, 1, Hk, Hv, dk, dk,
                        summary ? dk : 0, d.tiled_heads};
    return op(cuda::gdn_runs(a, dev.stream()), summary ? "gdn summary" : "gdn runs");
  }
  // The runs apply_block(l, slot, n, dense, S, ...) makes, planned.
  void plan_apply(int64_t n, int64_t dense, float* S) {
    if (n == 0) return;
    const int64_t n_head = std::min<int64_t>(n, K1), n_compact = n - n_head - dense;
    for (const int64_t t1 : {n_head, n_compact}) {
      if (t1 <= 0) continue;
      run_mats.push_back(S);
      run_ranges.insert(run_ranges.end(), {0, static_cast<int32_t>(t1)});
    }
  }

  // S (with S2 as scratch) and tail <- through block `slot` at n tokens, `dense` of them in its
  // summary, in layer l (the CPU's GdnBlockOps::apply_block, then advance_tail).
  Status apply_block(int l, int32_t slot, int64_t n, int64_t dense, float* S, float* S2, float* tail) {
    if (n == 0) return Status::success();
    const Layer& L = layers[static_cast<size_t>(l)];
    float* B = part(slot, l);
    void* st = dev.stream();
    const int n_head = static_cast<int>(std::min<int64_t>(n, K1));
    if (n_head > 0) {  // the head tokens convolved with the view's tail so far
      CHORUS_TRY(op(cuda::gdn_conv(tail, B + o_head_x, n_head, L.conv, C, K1 + 1, cy, st), "gdn head conv"));
      CHORUS_TRY(op(cuda::split_qkv(cy, n_head, kd, vd, nullptr, ck, cv, st), "gdn head split"));
      CHORUS_TRY(op(cuda::l2norm_rows(ck, n_head * Hk, dk, c.norm_eps, st), "gdn head l2norm"));
      CHORUS_TRY(runs(S, false, ck, cv, B + o_head_g, B + o_head_b, 0, n_head));
    }
    const int64_t n_compact = n - n_head - dense;
    if (dense > 0) {  // S <- S A + B, per value head
      const int64_t per_head = int64_t{dk + dk} * dk;
      CHORUS_TRY(cuda_affine_f32_batched(dev, S, B + o_AB, B + o_AB + int64_t{dk} * dk, S2, dk, dk, dk,
                                         int64_t{dk} * dk, per_head, per_head, int64_t{dk} * dk, Hv));
      CHORUS_TRY(dev.copy(S, S2, state_floats() * 4));
    }
    CHORUS_TRY(runs(S, false, B + o_ck, B + o_cv, B + o_cg, B + o_cb, 0, static_cast<int>(n_compact)));
    if (n >= K1) return dev.copy(tail, B + o_tail, int64_t{K1} * C * 4);
    return op(cuda::shift_rows(tail, K1, B + o_tail + (K1 - n) * C, static_cast<int>(n), C, st), "gdn tail");
  }

  Status gemm(const CudaMat& w, float* out, int T) { return cuda_gemm_bf16(dev, w.w, xb, out, w.rows, T, w.cols); }

  Status acquire(LinearState& s) {
    int32_t id = -1;
    {
      std::lock_guard<std::mutex> lock(pool->mu);
      if (pool->free.empty())
        return make_error(Errc::out_of_memory,
                          "CUDA runner: all " + std::to_string(pool->n) +
                              " linear-state slots are in use (one per block of a hybrid model being written or "
                              "read; CudaRunnerOptions::linear_slots)");
      id = pool->free.back();
      pool->free.pop_back();
    }
    std::weak_ptr<SlotPool> owner = pool;
    s.device_slot = std::shared_ptr<const int32_t>(new int32_t(id), [owner](const int32_t* p) {
      if (auto pl = owner.lock()) {
        std::lock_guard<std::mutex> lock(pl->mu);
        pl->free.push_back(*p);
      }
      delete p;
    });
    s.device_owner = pool.get();
    return Status::success();
  }

  // The slot of a block the step reads or writes, checked.
  Result<int32_t> slot(const SequenceKv& s, int32_t seq) {
    if (!s.linear || !s.linear->device_slot || s.linear->device_owner != pool.get())
      return make_error(Errc::invalid_argument, "sequence " + std::to_string(seq) +
                                                    ": its linear-layer state is not in this CUDA runner's slots");
    if (s.linear->broken)
      return make_error(Errc::invalid_argument, "sequence " + std::to_string(seq) +
                                                    ": a step that wrote its linear-layer state failed part-way, so "
                                                    "the state is undefined (clear the block and write it again)");
    return *s.linear->device_slot;
  }
};

CudaLinear::CudaLinear(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaLinear::~CudaLinear() = default;

Status CudaLinear::check(const ModelConfig& c, const Weights& w) {
  auto unsupported = [&](const std::string& what) {
    return make_error(Errc::unsupported, "the CUDA runner does not run " + what + " yet (" + c.arch + ")");
  };
  const GdnConfig& d = c.gdn;
  if (d.head_dim != 16 && (d.head_dim < 32 || d.head_dim > 128 || d.head_dim % 32 != 0))
    return unsupported("Gated DeltaNet heads of " + std::to_string(d.head_dim) + " (16, or 32..128 in steps of 32)");
  if (d.conv_kernel < 2 || d.conv_kernel > 16)
    return unsupported("a Gated DeltaNet convolution of width " + std::to_string(d.conv_kernel) + " (2..16)");
  for (size_t l = 0; l < w.layers.size(); ++l) {
    if (!c.is_linear(static_cast<int>(l))) continue;
    const LayerWeights& L = w.layers[l];
    if (L.w_ba.data) return unsupported("Gated DeltaNet layers with a packed ssm_ba (qwen3next)");
    for (const auto& [m, n] : {std::pair{&L.w_qkv, "attn_qkv"}, std::pair{&L.w_z, "attn_gate"},
                               std::pair{&L.w_beta, "ssm_beta"}, std::pair{&L.w_alpha, "ssm_alpha"},
                               std::pair{&L.w_ssm_out, "ssm_out"}})
      if (!cuda::converts_to_bf16(static_cast<int>(m->type)))
        return make_error(Errc::unsupported, "the CUDA runner cannot convert blk." + std::to_string(l) + "." + n + " (" +
                                                 std::string(tensor_type_name(m->type)) +
                                                 "): F32, F16, BF16, Q8_0, Q4_0 and Q4_1 weights so far");
  }
  return Status::success();
}

int64_t CudaLinear::slot_floats(const ModelConfig& c) {
  const GdnConfig& d = c.gdn;
  const int64_t K1 = d.conv_kernel - 1, C = d.conv_dim(), Hv = d.n_v_heads, dk = d.head_dim;
  const int64_t per_layer = Hv * dk * dk + 3 * K1 * C + 2 * K1 * Hv + Hv * 2 * dk * dk +
                            dk * (d.key_dim() + d.value_dim() + 2 * Hv);
  int64_t n_linear = 0;
  for (int l = 0; l < c.n_layer; ++l) n_linear += c.is_linear(l);
  return per_layer * n_linear;
}

Result<std::unique_ptr<CudaLinear>> CudaLinear::create(const ModelConfig& c, const Weights& w, CudaDevice& dev,
                                                       int max_tokens, int n_slots, cuda::bf16_bits* xb,
                                                       const CudaUploads& up) {
  if (Status s = check(c, w); !s.ok()) return s.error();
  if (n_slots < 0) return make_error(Errc::invalid_argument, "CUDA runner: linear_slots must not be negative");
  auto impl = std::make_unique<Impl>(c, dev, max_tokens);
  Impl& m = *impl;
  m.xb = xb;
  // One layer's part of a slot.
  int64_t at = 0;
  for (auto [dst, n] : {std::pair{&m.o_S, m.state_floats()}, std::pair{&m.o_run_tail, int64_t{m.K1} * m.C},
                        std::pair{&m.o_tail, int64_t{m.K1} * m.C}, std::pair{&m.o_head_x, int64_t{m.K1} * m.C},
                        std::pair{&m.o_head_g, int64_t{m.K1} * m.Hv}, std::pair{&m.o_head_b, int64_t{m.K1} * m.Hv},
                        std::pair{&m.o_AB, int64_t{m.Hv} * 2 * m.dk * m.dk}, std::pair{&m.o_ck, int64_t{m.dk} * m.kd},
                        std::pair{&m.o_cv, int64_t{m.dk} * m.vd}, std::pair{&m.o_cg, int64_t{m.dk} * m.Hv},
                        std::pair{&m.o_cb, int64_t{m.dk} * m.Hv}}) {
    *dst = at;
    at += n;
  }
  m.layer_floats = at;
  m.layers.resize(static_cast<size_t>(c.n_layer));
  int64_t n_linear = 0;
  for (int l = 0; l < c.n_layer; ++l) {
    if (!c.is_linear(l)) continue;
    const LayerWeights& L = w.layers[static_cast<size_t>(l)];
    Impl::Layer& D = m.layers[static_cast<size_t>(l)];
    D.index = static_cast<int>(n_linear);
    m.n_linear = static_cast<int>(n_linear) + 1;
    D.offset = n_linear++ * m.layer_floats;
    for (auto [dst, src, name] : {std::tuple{&D.qkv, &L.w_qkv, "attn_qkv"}, std::tuple{&D.z, &L.w_z, "attn_gate"},
                                  std::tuple{&D.beta, &L.w_beta, "ssm_beta"}, std::tuple{&D.alpha, &L.w_alpha, "ssm_alpha"},
                                  std::tuple{&D.out, &L.w_ssm_out, "ssm_out"}}) {
      auto r = up.matrix(*src, name);
      if (!r) return r.error();
      *dst = *r;
    }
    for (auto [dst, src, n, name] : {std::tuple{&D.conv, L.conv, int64_t{m.K1 + 1} * m.C, "ssm_conv1d"},
                                     std::tuple{&D.ssm_a, L.ssm_a, int64_t{m.Hv}, "ssm_a"},
                                     std::tuple{&D.dt_bias, L.dt_bias, int64_t{m.Hv}, "ssm_dt.bias"},
                                     std::tuple{&D.norm, L.ssm_norm, int64_t{m.dk}, "ssm_norm"}}) {
      if (!src) return make_error(Errc::bad_format, std::string("blk.") + std::to_string(l) + "." + name + " is missing");
      auto r = up.vec(src, n, name);
      if (!r) return r.error();
      *dst = *r;
    }
  }
  m.slot_size = slot_floats(c);
  if (n_slots == 0) {  // 64, or what half of the pool left fits
    const int64_t fits = (dev.pool_bytes() - dev.pool_used()) / 2 / (m.slot_size * 4);
    n_slots = static_cast<int>(std::clamp<int64_t>(fits, 1, 64));
  }
  auto slots = dev.alloc(m.slot_size * (n_slots + 1) * 4, "linear-state slots");  // + 1: padding
  if (!slots) return slots.error();
  m.slot_mem = static_cast<float*>(*slots);
  m.pad_slot = n_slots;
  if (Status st = dev.zero(m.slot_mem + m.pad_slot * m.slot_size, m.slot_size * 4); !st.ok()) return st.error();
  m.pool->n = n_slots;
  for (int32_t i = n_slots - 1; i >= 0; --i) m.pool->free.push_back(i);
  const int64_t T = max_tokens;
  for (auto [dst, n] : {std::pair{&m.in, T * c.n_embd}, std::pair{&m.qkv, T * m.C}, std::pair{&m.y, T * m.C},
                        std::pair{&m.q, T * m.kd}, std::pair{&m.k, T * m.kd}, std::pair{&m.v, T * m.vd},
                        std::pair{&m.z, T * m.vd}, std::pair{&m.bl, T * m.Hv}, std::pair{&m.al, T * m.Hv},
                        std::pair{&m.g, T * m.Hv}, std::pair{&m.beta, T * m.Hv}, std::pair{&m.o, T * m.vd},
                        std::pair{&m.cS, m.state_floats()}, std::pair{&m.cS2, m.state_floats()},
                        std::pair{&m.ctail, int64_t{m.K1} * m.C}, std::pair{&m.cy, int64_t{m.K1} * m.C},
                        std::pair{&m.ck, int64_t{m.K1} * m.kd}, std::pair{&m.cv, int64_t{m.K1} * m.vd}}) {
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

Status CudaLinear::plan(std::span<const BatchToken> batch, std::span<SequenceKv* const> seqs,
                        std::span<const View> views, int n_run) {
  Impl& m = *impl_;
  if (m.uploading) CHORUS_TRY(m.dev.sync("the previous step's tables"));
  m.uploading = false;
  m.groups.clear();
  m.tables_used = 0;
  // A written block: a slot of its own (zeroed, its summaries the identity map), or a copy of
  // the one it shares.
  auto own = [&m](SequenceKv& s, const LinearGroup& g) -> Status {
    if (!s.linear) {
      if (g.start > 0)
        return make_error(Errc::invalid_argument, "sequence " + std::to_string(g.seq) + " has " +
                                                      std::to_string(g.start) + " tokens but no linear-layer state");
      auto fresh = LinearState::create(m.c);
      CHORUS_TRY(m.acquire(*fresh));
      float* base = m.slot_mem + *fresh->device_slot * m.slot_size;
      CHORUS_TRY(m.dev.zero(base, m.slot_size * 4));
      for (int l = 0; l < m.c.n_layer; ++l)
        if (m.c.is_linear(l))
          CHORUS_TRY(op(cuda::gdn_summary_reset(m.part(*fresh->device_slot, l) + m.o_AB, m.Hv, m.dk, m.dk, m.dev.stream()),
                        "gdn summary reset"));
      s.linear = std::move(fresh);
    } else if (s.linear.use_count() > 1) {
      auto from = m.slot(s, g.seq);
      if (!from) return from.error();
      auto copy = s.linear->clone();
      CHORUS_TRY(m.acquire(*copy));
      CHORUS_TRY(m.dev.copy(m.slot_mem + *copy->device_slot * m.slot_size, m.slot_mem + *from * m.slot_size,
                            m.slot_size * 4));
      s.linear = std::move(copy);
    }
    return Status::success();
  };
  CHORUS_TRY(plan_linear_groups(false, batch, seqs, views, own, &m.groups));
  const int T = static_cast<int>(batch.size());
  if (n_run < T) return make_error(Errc::internal, "CUDA linear layers: a step of " + std::to_string(T) +
                                                       " tokens launched as " + std::to_string(n_run));

  // Group order: each group's tokens together, groups in the order they first appear; then
  // the padding rows of a graphed step, as one more group in the padding slot.
  const auto G = m.groups.size();
  m.order.clear();
  m.first.assign(1, 0);
  m.slot_of.clear();
  for (const LinearGroup& g : m.groups) {
    for (int64_t t : g.tokens) m.order.push_back(static_cast<int32_t>(t));
    m.first.push_back(static_cast<int32_t>(m.order.size()));
    auto s = m.slot(*seqs[static_cast<size_t>(g.seq)], g.seq);
    if (!s) return s.error();
    m.slot_of.push_back(*s);
    if (!g.suffix.empty())
      return make_error(Errc::unsupported, "sequence " + std::to_string(g.seq) +
                                               ": its view puts blocks after it, which the CUDA runner's linear layers "
                                               "do not read yet (the CPU reads them through the query)");
  }
  if (n_run > T) {
    for (int32_t t = T; t < n_run; ++t) m.order.push_back(t);
    m.first.push_back(n_run);
    m.slot_of.push_back(m.pad_slot);
  }
  m.n_groups = static_cast<int>(m.slot_of.size());
  m.identity = true;
  for (size_t i = 0; i < m.order.size(); ++i) m.identity = m.identity && m.order[i] == static_cast<int32_t>(i);
  // Body tokens already in each written block's summary, after this step's prefolds.
  std::map<int32_t, int64_t> dense_now;  // by sequence, for the blocks this step writes
  auto dense_of = [&](int32_t seq) {
    auto it = dense_now.find(seq);
    return it != dense_now.end() ? it->second : seqs[static_cast<size_t>(seq)]->linear->device_dense;
  };
  // Where each group's new tokens go in its block: positions below K-1 are head rows; the rest
  // join the buffer after the tokens already there. A buffer that cannot take them is folded
  // into [A; B] before the step; more new tokens than a buffer holds are folded in the layer,
  // all but the last (new mod dk).
  std::vector<int32_t> row_seq;
  std::vector<cuda::SlotRow> head, compact;
  m.folds.clear();
  m.prefolds.clear();
  m.new_dense.assign(G, 0);
  m.own_dense.assign(G, 0);
  for (size_t r = 0; r < G; ++r) {
    const int32_t f = m.first[r], n = m.first[r + 1] - f, slot = m.slot_of[r];
    const int64_t start = m.groups[r].start;
    const LinearState& st = *seqs[static_cast<size_t>(m.groups[r].seq)]->linear;
    int64_t dense = st.device_dense;
    const int64_t head_end = std::min<int64_t>(start + n, m.K1);
    for (int64_t p = start; p < head_end; ++p)
      head.push_back({static_cast<int32_t>(f + p - start), slot, static_cast<int32_t>(p)});
    const int64_t s0 = std::max<int64_t>(0, head_end - start), added = n - s0;
    int64_t buffered = std::max<int64_t>(0, start - m.K1) - dense;
    if (buffered < 0 || buffered > m.dk)
      return make_error(Errc::internal, "sequence " + std::to_string(m.groups[r].seq) + ": " + std::to_string(buffered) +
                                            " buffered linear-layer tokens");
    if (added > 0 && buffered + added > m.dk && buffered > 0) {
      m.prefolds.emplace_back(r, buffered);
      dense += buffered;
      buffered = 0;
    }
    dense_now[m.groups[r].seq] = dense;
    m.own_dense[r] = dense;
    const int64_t row = f + s0;
    int64_t folded = 0;
    if (added > m.dk) {  // then the buffer is empty
      folded = added - added % m.dk;
      m.folds.push_back({r, row, folded});
    }
    for (int64_t i = folded; i < added; ++i)
      compact.push_back({static_cast<int32_t>(row + i), slot, static_cast<int32_t>(buffered++)});
    m.new_dense[r] = dense + folded;
  }
  for (int r = 0; r < m.n_groups; ++r)
    row_seq.insert(row_seq.end(), static_cast<size_t>(m.first[static_cast<size_t>(r) + 1] - m.first[static_cast<size_t>(r)]), r);
  m.n_head_rows = static_cast<int>(head.size());
  m.n_compact_rows = static_cast<int>(compact.size());
  m.graphable = m.folds.empty();
  // The tables the layers read first, in a fixed order: their addresses depend only on the sizes
  // a graph is keyed by (graph_key()).
  std::vector<float*> states;
  for (int l = 0; l < m.c.n_layer; ++l)
    if (m.c.is_linear(l))
      for (int32_t slot : m.slot_of) states.push_back(m.part(slot, l) + m.o_S);
  CHORUS_TRY(m.put_into(m.order, &m.order_dev));
  CHORUS_TRY(m.put_into(row_seq, &m.row_seq_dev));
  CHORUS_TRY(m.put_into(m.first, &m.first_dev));
  CHORUS_TRY(m.put_into(m.slot_of, &m.slot_dev));
  CHORUS_TRY(m.put_into(head, &m.head_dev));
  CHORUS_TRY(m.put_into(compact, &m.compact_dev));
  CHORUS_TRY(m.put_into(states, &m.states_dev));
  // Prefixes to compose: recomposing groups with the same blocks before them share one.
  m.prefixes.clear();
  for (size_t gi = 0; gi < G; ++gi) {
    LinearGroup& g = m.groups[gi];
    if (g.mode == LinearGroup::Mode::cached) continue;
    std::vector<std::tuple<int32_t, int64_t, int64_t>> blocks;
    for (const auto& [blk, n] : g.prefix) {
      auto s = m.slot(*seqs[static_cast<size_t>(blk)], blk);
      if (!s) return s.error();
      blocks.emplace_back(*s, n, dense_of(blk));
    }
    auto it = std::find_if(m.prefixes.begin(), m.prefixes.end(), [&](const Impl::Prefix& p) { return p.blocks == blocks; });
    if (it == m.prefixes.end()) it = m.prefixes.insert(m.prefixes.end(), Impl::Prefix{std::move(blocks), {}});
    it->users.push_back(gi);
  }
  // The single-matrix runs, in the order they are made: per linear layer the prefolds and the
  // compositions (prepare()), then per linear layer the folds (layer()).
  m.run_mats.clear();
  m.run_ranges.clear();
  m.next_run = 0;
  auto add_run = [&m](float* mat, int64_t t0, int64_t t1) {
    if (t1 <= t0) return;
    m.run_mats.push_back(mat);
    m.run_ranges.insert(m.run_ranges.end(), {static_cast<int32_t>(t0), static_cast<int32_t>(t1)});
  };
  for (int l = 0; l < m.c.n_layer; ++l) {
    if (!m.c.is_linear(l)) continue;
    for (const auto& [r, n] : m.prefolds) add_run(m.part(m.slot_of[r], l) + m.o_AB, 0, n);
    for (const Impl::Prefix& p : m.prefixes) {
      for (const auto& [slot, n, dense] : p.blocks) m.plan_apply(n, dense, m.cS);
      for (size_t r : p.users) m.plan_apply(m.groups[r].start, m.own_dense[r], m.part(m.slot_of[r], l) + m.o_S);
    }
  }
  m.n_prepare_runs = m.run_mats.size();
  for (int l = 0; l < m.c.n_layer; ++l)
    if (m.c.is_linear(l))
      for (const Impl::Fold& f : m.folds) add_run(m.part(m.slot_of[f.group], l) + m.o_AB, f.row, f.row + f.n);
  CHORUS_TRY(m.put_into(m.run_mats, &m.run_mats_dev));
  CHORUS_TRY(m.put_into(m.run_ranges, &m.run_ranges_dev));
  return m.flush();
}

Status CudaLinear::prepare() {
  Impl& m = *impl_;
  for (int l = 0; l < m.c.n_layer; ++l) {
    if (!m.c.is_linear(l)) continue;
    for (const auto& [r, n] : m.prefolds) {  // buffers that cannot take the step's tokens
      float* B = m.part(m.slot_of[r], l);
      CHORUS_TRY(m.runs(B + m.o_AB, true, B + m.o_ck, B + m.o_cv, B + m.o_cg, B + m.o_cb, 0, static_cast<int>(n)));
    }
    // The view states that changed, composed from the blocks' summaries as the step found them.
    for (const Impl::Prefix& p : m.prefixes) {
      CHORUS_TRY(m.dev.zero(m.cS, m.state_floats() * 4));
      CHORUS_TRY(m.dev.zero(m.ctail, int64_t{m.K1} * m.C * 4));
      for (const auto& [slot, n, dense] : p.blocks) CHORUS_TRY(m.apply_block(l, slot, n, dense, m.cS, m.cS2, m.ctail));
      for (size_t r : p.users) {  // then each writer's own block as it is before the step
        float* B = m.part(m.slot_of[r], l);
        CHORUS_TRY(m.dev.copy(B + m.o_S, m.cS, m.state_floats() * 4));
        CHORUS_TRY(m.dev.copy(B + m.o_run_tail, m.ctail, int64_t{m.K1} * m.C * 4));
        CHORUS_TRY(m.apply_block(l, m.slot_of[r], m.groups[r].start, m.own_dense[r], B + m.o_S, m.cS2, B + m.o_run_tail));
      }
    }
  }
  if (m.next_run != m.n_prepare_runs)
    return make_error(Errc::internal, "CUDA linear layers: the step's preparation made " + std::to_string(m.next_run) +
                                          " of the " + std::to_string(m.n_prepare_runs) + " gdn runs its plan made");
  return Status::success();
}

std::array<int64_t, 4> CudaLinear::graph_key() const {
  const Impl& m = *impl_;
  return {m.n_groups, m.n_head_rows, m.n_compact_rows, m.identity};
}

bool CudaLinear::graphable() const { return impl_->graphable; }

void CudaLinear::abandon(std::span<SequenceKv* const> seqs) {
  for (const LinearGroup& g : impl_->groups)
    if (const auto& s = seqs[static_cast<size_t>(g.seq)]->linear) s->broken = true;
}

Status CudaLinear::layer(int l, float* h, int T) {
  Impl& m = *impl_;
  const Impl::Layer& L = m.layers[static_cast<size_t>(l)];
  void* st = m.dev.stream();
  if (T != static_cast<int>(m.order.size()))
    return make_error(Errc::internal, "CUDA linear layer: " + std::to_string(T) + " tokens, planned for " +
                                          std::to_string(m.order.size()));
  // 1. Projections and gates of every token, in group order.
  float* in = h;
  if (!m.identity) {
    CHORUS_TRY(op(cuda::gather_rows(h, m.order_dev, T, m.c.n_embd, m.in, st), "gdn gather"));
    in = m.in;
  }
  CHORUS_TRY(op(cuda::to_bf16(in, m.xb, int64_t{T} * m.c.n_embd, st), "to_bf16"));
  CHORUS_TRY(m.gemm(L.qkv, m.qkv, T));
  CHORUS_TRY(m.gemm(L.z, m.z, T));
  CHORUS_TRY(m.gemm(L.beta, m.bl, T));
  CHORUS_TRY(m.gemm(L.alpha, m.al, T));
  CHORUS_TRY(op(cuda::gdn_gates(m.al, m.bl, L.dt_bias, L.ssm_a, T, m.Hv, m.g, m.beta, st), "gdn gates"));

  // 2. (The view states that changed were composed by prepare().)

  // 3. Each group's tokens: convolution with its view's tail, factors, the recurrence from its
  // view state (all groups in one launch each), then into its block: tails, folds, new rows.
  const int G = m.n_groups;
  CHORUS_TRY(op(cuda::gdn_conv_slots(m.qkv, T, m.row_seq_dev, m.first_dev, m.slot_dev, m.slot_mem, m.slot_size,
                                     L.offset + m.o_run_tail, L.conv, m.C, m.K1 + 1, m.y, st),
                "gdn conv"));
  CHORUS_TRY(op(cuda::split_qkv(m.y, T, m.kd, m.vd, m.q, m.k, m.v, st), "gdn split"));
  CHORUS_TRY(op(cuda::l2norm_rows(m.q, T * m.Hk, m.dk, m.c.norm_eps, st), "gdn l2norm q"));
  CHORUS_TRY(op(cuda::l2norm_rows(m.k, T * m.Hk, m.dk, m.c.norm_eps, st), "gdn l2norm k"));
  cuda::GdnRunsArgs a{m.states_dev + static_cast<int64_t>(L.index) * G, m.first_dev, m.q, m.k, m.v, m.g, m.beta, m.o, G,
                      m.Hk, m.Hv, m.dk, m.dk, 0, m.d.tiled_heads};
  CHORUS_TRY(op(cuda::gdn_runs(a, st), "gdn runs"));
  for (const int64_t part : {m.o_run_tail, m.o_tail})
    CHORUS_TRY(op(cuda::shift_rows_slots(m.slot_mem, m.slot_size, L.offset + part, m.slot_dev, m.first_dev, G, m.K1,
                                         m.qkv, m.C, st),
                  "gdn tails"));
  for (const Impl::Fold& f : m.folds)  // a prefill's tokens beyond what a buffer holds
    CHORUS_TRY(m.runs(m.part(m.slot_of[f.group], l) + m.o_AB, true, m.k, m.v, m.g, m.beta, static_cast<int>(f.row),
                      static_cast<int>(f.row + f.n)));
  for (const auto& [src, width, rows, n, part] :
       {std::tuple{m.qkv, m.C, m.head_dev, m.n_head_rows, m.o_head_x}, std::tuple{m.g, m.Hv, m.head_dev, m.n_head_rows, m.o_head_g},
        std::tuple{m.beta, m.Hv, m.head_dev, m.n_head_rows, m.o_head_b}, std::tuple{m.k, m.kd, m.compact_dev, m.n_compact_rows, m.o_ck},
        std::tuple{m.v, m.vd, m.compact_dev, m.n_compact_rows, m.o_cv}, std::tuple{m.g, m.Hv, m.compact_dev, m.n_compact_rows, m.o_cg},
        std::tuple{m.beta, m.Hv, m.compact_dev, m.n_compact_rows, m.o_cb}})
    CHORUS_TRY(op(cuda::rows_to_slots(src, width, rows, n, m.slot_mem, m.slot_size, L.offset + part, st), "gdn append"));

  if (L.index + 1 == m.n_linear && m.next_run != m.run_mats.size())
    return make_error(Errc::internal, "CUDA linear layers: the step made " + std::to_string(m.next_run) + " of the " +
                                          std::to_string(m.run_mats.size()) + " gdn runs its plan made");

  // 4. The 1/sqrt(dk) query scale, RMSNorm(o_h) * silu(z_h) per head, the output projection.
  CHORUS_TRY(op(cuda::scale(m.o, int64_t{T} * m.vd, 1.0f / std::sqrt(static_cast<float>(m.dk)), st), "gdn scale"));
  CHORUS_TRY(op(cuda::rmsnorm(m.o, L.norm, m.o, T * m.Hv, m.dk, m.c.norm_eps, st), "ssm_norm"));
  CHORUS_TRY(op(cuda::swiglu(m.z, m.o, m.o, int64_t{T} * m.vd, st), "gdn gate"));
  CHORUS_TRY(op(cuda::to_bf16(m.o, m.xb, int64_t{T} * m.vd, st), "to_bf16"));
  if (m.identity) return m.gemm(L.out, h, T);
  CHORUS_TRY(m.gemm(L.out, m.in, T));
  return op(cuda::scatter_rows(m.in, m.order_dev, T, m.c.n_embd, h, st), "gdn scatter");
}

void CudaLinear::finish(std::span<SequenceKv* const> seqs) {
  Impl& m = *impl_;
  m.uploading = false;  // the step's sync has passed the upload
  for (size_t r = 0; r < m.groups.size(); ++r)
    seqs[static_cast<size_t>(m.groups[r].seq)]->linear->device_dense = m.new_dense[r];
  finish_linear_groups(m.groups, seqs);
}

int CudaLinear::slots() const { return impl_->pool->n; }

int CudaLinear::slots_in_use() const {
  std::lock_guard<std::mutex> lock(impl_->pool->mu);
  return impl_->pool->n - static_cast<int>(impl_->pool->free.size());
}


}  // namespace chorus
