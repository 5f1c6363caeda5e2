// CudaLinear's state (engine/forward/cuda/cuda_linear.h), shared by its two files: cuda_linear.cpp (weights,
// slots, the launches of prepare() and layer()) and cuda_linear_plan.cpp (a step's plan and its
// bookkeeping). Internal to the engine.
#pragma once

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "device/cuda_device.h"
#include "engine/forward/cuda/cuda_linear.h"
#include "engine/forward/cuda/cuda_op.h"
#include "engine/forward/cuda/cuda_weights.h"
#include "engine/forward/linear_slots.h"
#include "engine/forward/linear_state.h"

namespace chorus {

// One linear layer's part of a slot (engine/forward/cuda/cuda_linear.h): where each piece starts, in floats
// from the part's start, and the part's size.
struct SlotLayout {
  int64_t S = 0, run_tail = 0, base_tail = 0, tail = 0, head_x = 0, head_g = 0, head_b = 0, AB = 0, ck = 0,
          cv = 0, cg = 0, cb = 0;
  int64_t size = 0;
  static SlotLayout of(const GdnConfig& d) {
    const int64_t K1 = d.conv_kernel - 1, C = d.conv_dim(), Hv = d.n_v_heads, dk = d.head_dim;
    SlotLayout o;
    for (auto [dst, n] :
         {std::pair{&o.S, Hv * dk * dk}, std::pair{&o.run_tail, K1 * C}, std::pair{&o.base_tail, K1 * C},
          std::pair{&o.tail, K1 * C}, std::pair{&o.head_x, K1 * C}, std::pair{&o.head_g, K1 * Hv},
          std::pair{&o.head_b, K1 * Hv}, std::pair{&o.AB, Hv * 2 * dk * dk},
          std::pair{&o.ck, dk * d.key_dim()}, std::pair{&o.cv, dk * d.value_dim()}, std::pair{&o.cg, dk * Hv},
          std::pair{&o.cb, dk * Hv}}) {
      *dst = o.size;
      o.size += n;
    }
    return o;
  }
  cuda::GdnSlotParts parts() const {
    return {S, tail, base_tail, run_tail, head_x, head_g, head_b, AB, ck, cv, cg, cb};
  }
};

using cuda_detail::op;  // (internal header: its two .cpp files only)

struct CudaLinear::Impl {
  const ModelConfig& c;
  CudaDevice& dev;
  const GdnConfig d;
  const int C, K1, Hv, Hk, dk, kd, vd;  // conv_dim, K-1, heads, head size, widths

  struct Layer {
    CudaMat qkv, z, beta, alpha, ba, out;  // ba (qwen3next) instead of beta and alpha
    const float *conv = nullptr, *ssm_a = nullptr, *dt_bias = nullptr, *norm = nullptr;
    int64_t offset = 0;  // of this layer's part of a slot
    int index = 0;       // among the linear layers
  };
  std::vector<Layer> layers;  // [n_layer]; attention layers stay empty

  const SlotLayout lay;  // one layer's part of a slot
  float* slot_mem = nullptr;
  int64_t slot_size = 0;              // floats per slot
  std::unique_ptr<LinearSlots> pool;  // made at create(), with the number of slots

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
  std::vector<int32_t> order;    // order[i]: the batch row at group-ordered row i
  bool identity = true;          // the batch is already in group order
  std::vector<int32_t> first;    // [groups + 1] each group's first row
  std::vector<int32_t> slot_of;  // [groups (+ padding)] the written block's slot
  int n_groups = 0;              // with the padding group of a graphed step
  int32_t pad_slot = 0;          // the slot padding rows run through (never a block's)
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
  // groups use each: as their view's state before their own block, or as a chain read's base.
  struct Prefix {
    std::vector<std::tuple<int32_t, int64_t, int64_t>> blocks;
    std::vector<size_t> users, base_users;
  };
  std::vector<Prefix> prefixes;
  // Writers whose view puts blocks after them (blocks written concurrently, Hogwild!-style): a
  // token's output reads its writer's state after the token, carried through those blocks as
  // the step found them, their first tokens convolved with the writer's inputs so far. Their
  // tokens run one at a time in the layer (the state after each is needed); the one launch for
  // all writers skips them (a null matrix).
  struct Suffix {
    size_t group;
    std::vector<std::tuple<int32_t, int64_t, int64_t>> blocks;  // slot, length, summarised
  };
  std::vector<Suffix> suffixes;
  // Chain reads (a one-token writer whose view has a block written in this step too, the CPU's
  // Mode::chain): the token's output is read through its query, back through the view's blocks
  // from the first one that changes (cuda::gdn_chain_read), then its base's state (the blocks
  // before, composed when they change and kept in the slot's run state, with their tail in
  // base_tail). The one launch for all writers skips them. A step's reads take at
  // most kMaxChainHeads head rows: a writer that would need more composes its view instead.
  static constexpr int kMaxChainHeads = 512;
  bool chain_reads = true;
  int n_reads = 0, n_chain_heads = 0, n_chain_blocks = 0;
  int64_t reads_done = 0, graphed_reads = 0;
  const cuda::GdnChainRead* reads_dev = nullptr;
  const cuda::GdnChainBlock* chain_blocks_dev = nullptr;
  const cuda::GdnChainHead* chain_heads_dev = nullptr;
  float *hy = nullptr, *hk = nullptr, *hv = nullptr;  // [kMaxChainHeads][C | kd | vd] the head rows' factors
  bool graphable = false;  // no fold in the layers, no blocks after a writer: a graph can hold the layers

  Impl(const ModelConfig& config, CudaDevice& device)
      : c(config),
        dev(device),
        d(config.gdn),
        C(d.conv_dim()),
        K1(d.conv_kernel - 1),
        Hv(d.n_v_heads),
        Hk(d.n_k_heads),
        dk(d.head_dim),
        kd(d.key_dim()),
        vd(d.value_dim()),
        lay(SlotLayout::of(d)) {}

  float* slot_base(int32_t slot) { return slot_mem + slot * slot_size; }
  float* part(int32_t slot, int l) { return slot_base(slot) + layers[static_cast<size_t>(l)].offset; }
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
  Status runs(float* mat, bool summary, const float* k_, const float* v_, const float* g_, const float* b_,
              int t0, int t1) {
    if (t1 <= t0) return Status::success();
    const size_t i = next_run++;
    if (i >= run_mats.size() || run_mats[i] != mat || run_ranges[2 * i] != t0 || run_ranges[2 * i + 1] != t1)
      return make_error(Errc::internal, "CUDA linear layers: a gdn run the step's plan did not make");
    cuda::GdnRunsArgs a{
        run_mats_dev + i, run_ranges_dev + 2 * i, nullptr, k_, v_, g_, b_, nullptr, 1, Hk, Hv, dk, dk,
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
      CHORUS_TRY(
          op(cuda::gdn_conv(tail, B + lay.head_x, n_head, L.conv, C, K1 + 1, cy, st), "gdn head conv"));
      CHORUS_TRY(op(cuda::split_qkv(cy, n_head, kd, vd, nullptr, ck, cv, st), "gdn head split"));
      CHORUS_TRY(op(cuda::l2norm_rows(ck, n_head * Hk, dk, c.norm_eps, st), "gdn head l2norm"));
      CHORUS_TRY(runs(S, false, ck, cv, B + lay.head_g, B + lay.head_b, 0, n_head));
    }
    const int64_t n_compact = n - n_head - dense;
    if (dense > 0) {  // S <- S A + B, per value head
      const int64_t per_head = int64_t{dk + dk} * dk;
      CHORUS_TRY(cuda_affine_f32_batched(dev, S, B + lay.AB, B + lay.AB + int64_t{dk} * dk, S2, dk, dk, dk,
                                         int64_t{dk} * dk, per_head, per_head, int64_t{dk} * dk, Hv));
      CHORUS_TRY(dev.copy(S, S2, state_floats() * 4));
    }
    CHORUS_TRY(
        runs(S, false, B + lay.ck, B + lay.cv, B + lay.cg, B + lay.cb, 0, static_cast<int>(n_compact)));
    if (n >= K1) return dev.copy(tail, B + lay.tail, int64_t{K1} * C * 4);
    return op(cuda::shift_rows(tail, K1, B + lay.tail + (K1 - n) * C, static_cast<int>(n), C, st),
              "gdn tail");
  }

  Status gemm(const CudaMat& w, float* out, int T) {
    return cuda_gemm_bf16(dev, w.w, xb, out, w.rows, T, w.cols);
  }

  Status acquire(LinearState& s) { return pool->acquire(s); }

  Status upload_layer(const LayerWeights& L, int l);  // create()'s, per linear layer
  // layer()'s phases (cuda_linear.cpp).
  Status project(const Layer& L, float* h, int T);
  cuda::GdnChainArgs chain_args(const Layer& L) const;
  Status chain_inputs(const cuda::GdnChainArgs& chain);
  Status recur(const Layer& L, int T);
  Status suffix_reads(int l);
  Status append_to_blocks(const Layer& L, int l);
  Status output(const Layer& L, float* h, int T);

  // plan()'s phases (cuda_linear_plan.cpp), in the order it runs them; StepTables holds the
  // tables they build for the upload.
  struct StepTables;
  Status own_slot(SequenceKv& s, const LinearGroup& g);
  void choose_chain_reads();
  Status plan_order(std::span<SequenceKv* const> seqs, int T, int n_run);
  Status plan_appends(std::span<SequenceKv* const> seqs, StepTables& t);
  Status plan_suffixes(std::span<SequenceKv* const> seqs);
  Status plan_chain_reads(std::span<SequenceKv* const> seqs, StepTables& t);
  Status upload_tables(const StepTables& t);
  Status plan_prefixes(std::span<SequenceKv* const> seqs);
  void plan_runs();
  // Body tokens in a block's summary as the layers find it: a written block's after this step's
  // prefold (own_dense), another's as it is.
  std::map<int32_t, size_t> group_of;  // written sequence -> its group
  int64_t dense_of(std::span<SequenceKv* const> seqs, int32_t seq) const {
    auto it = group_of.find(seq);
    return it != group_of.end() ? own_dense[it->second]
                                : seqs[static_cast<size_t>(seq)]->linear->device_dense;
  }
  // A block's (slot, length, summarised tokens), its slot checked.
  Result<std::tuple<int32_t, int64_t, int64_t>> block_of(std::span<SequenceKv* const> seqs, int32_t blk,
                                                         int64_t n) {
    auto s = slot(*seqs[static_cast<size_t>(blk)], blk);
    if (!s) return s.error();
    return std::tuple<int32_t, int64_t, int64_t>{*s, n, dense_of(seqs, blk)};
  }

  // The slot of a block the step reads or writes, checked.
  Result<int32_t> slot(const SequenceKv& s, int32_t seq) {
    if (!s.linear || !s.linear->slot || !pool->holds(*s.linear))
      return make_error(
          Errc::invalid_argument,
          "sequence " + std::to_string(seq) + ": its linear-layer state is not in this CUDA runner's slots");
    if (s.linear->broken)
      return make_error(Errc::invalid_argument,
                        "sequence " + std::to_string(seq) +
                            ": a step that wrote its linear-layer state failed part-way, so "
                            "the state is undefined (clear the block and write it again)");
    return *s.linear->slot;
  }
};

}  // namespace chorus
