// CudaLinear's plan of a step and its bookkeeping after it (engine/forward/cuda/cuda_linear.h): groups and
// slots, where each group's tokens go in its block, the tables the launches read (laid out so
// that a graph's stay in place), the runs prepare() and layer() make, and the blocks' counts
// once the step has run.
#include "engine/forward/cuda/cuda_linear_impl.h"

namespace chorus {

// The tables a step's plan uploads beside the Impl's own: each row's group, the rows to append,
// and the chain reads with their blocks and head rows.
struct CudaLinear::Impl::StepTables {
  std::vector<int32_t> row_seq;
  std::vector<cuda::SlotRow> head, compact;
  std::vector<cuda::GdnChainRead> reads;
  std::vector<cuda::GdnChainBlock> chain_blocks;
  std::vector<cuda::GdnChainHead> chain_heads;
};

Status CudaLinear::plan(std::span<const BatchToken> batch, std::span<SequenceKv* const> seqs,
                        std::span<const View> views, int n_run) {
  Impl& m = *impl_;
  if (m.uploading) CHORUS_TRY(m.dev.sync("the previous step's tables"));
  m.uploading = false;
  m.groups.clear();
  m.tables_used = 0;
  CHORUS_TRY(plan_linear_groups(
      m.chain_reads, batch, seqs, views,
      [&m](SequenceKv& s, const LinearGroup& g) { return m.own_slot(s, g); }, &m.groups));
  m.choose_chain_reads();
  CHORUS_TRY(m.plan_order(seqs, static_cast<int>(batch.size()), n_run));
  Impl::StepTables t;
  CHORUS_TRY(m.plan_appends(seqs, t));
  CHORUS_TRY(m.plan_suffixes(seqs));
  CHORUS_TRY(m.plan_chain_reads(seqs, t));
  m.graphable = m.folds.empty() && m.suffixes.empty();
  CHORUS_TRY(m.upload_tables(t));
  CHORUS_TRY(m.plan_prefixes(seqs));
  m.plan_runs();
  CHORUS_TRY(m.put_into(m.run_mats, &m.run_mats_dev));
  CHORUS_TRY(m.put_into(m.run_ranges, &m.run_ranges_dev));
  return m.flush();
}

// A written block: a slot of its own (zeroed, its summaries the identity map), or a copy of the
// one it shares.
Status CudaLinear::Impl::own_slot(SequenceKv& s, const LinearGroup& g) {
  if (!s.linear) {
    if (g.start > 0)
      return make_error(Errc::invalid_argument, "sequence " + std::to_string(g.seq) + " has " +
                                                    std::to_string(g.start) +
                                                    " tokens but no linear-layer state");
    auto fresh = LinearState::create(c);
    CHORUS_TRY(acquire(*fresh));
    CHORUS_TRY(dev.zero(slot_base(*fresh->slot), slot_size * 4));
    for (int l = 0; l < c.n_layer; ++l)
      if (c.is_linear(l))
        CHORUS_TRY(op(cuda::gdn_summary_reset(part(*fresh->slot, l) + lay.AB, Hv, dk, dk, dev.stream()),
                      "gdn summary reset"));
    s.linear = std::move(fresh);
  } else if (s.linear.use_count() > 1) {
    auto from = slot(s, g.seq);
    if (!from) return from.error();
    auto copy = s.linear->clone();
    CHORUS_TRY(acquire(*copy));
    CHORUS_TRY(dev.copy(slot_base(*copy->slot), slot_base(*from), slot_size * 4));
    s.linear = std::move(copy);
  }
  return Status::success();
}

// Chain reads beyond what a step's head rows hold, and those of writers with blocks after them in
// their view (not read through the query on the device yet), compose their views instead:
// correct, with the same bookkeeping (the writer's run state then holds its view).
void CudaLinear::Impl::choose_chain_reads() {
  int heads = 0, n_chain = 0;
  for (LinearGroup& g : groups) {
    if (g.mode != LinearGroup::Mode::chain) continue;
    int need = static_cast<int>(std::min<int64_t>(g.start, K1));
    for (size_t b = g.n_base; b < g.prefix.size(); ++b)
      need += static_cast<int>(std::min<int64_t>(g.prefix[b].second, K1));
    if (!g.suffix.empty() || heads + need > kMaxChainHeads ||
        heads + need + (n_chain + 1) * K1 > cuda::kMaxChainRows) {
      g.mode = LinearGroup::Mode::recompose;
      g.compose = true;
      g.n_compose = g.prefix.size();
      continue;
    }
    heads += need;
    ++n_chain;
  }
}

// Group order: each group's tokens together, groups in the order they first appear; then the
// padding rows of a graphed step, as one more group in the padding slot.
Status CudaLinear::Impl::plan_order(std::span<SequenceKv* const> seqs, int T, int n_run) {
  if (n_run < T)
    return make_error(Errc::internal, "CUDA linear layers: a step of " + std::to_string(T) +
                                          " tokens launched as " + std::to_string(n_run));
  order.clear();
  first.assign(1, 0);
  slot_of.clear();
  for (const LinearGroup& g : groups) {
    for (int64_t t : g.tokens) order.push_back(static_cast<int32_t>(t));
    first.push_back(static_cast<int32_t>(order.size()));
    auto s = slot(*seqs[static_cast<size_t>(g.seq)], g.seq);
    if (!s) return s.error();
    slot_of.push_back(*s);
  }
  if (n_run > T) {
    for (int32_t t = T; t < n_run; ++t) order.push_back(t);
    first.push_back(n_run);
    slot_of.push_back(pad_slot);
  }
  n_groups = static_cast<int>(slot_of.size());
  identity = true;
  for (size_t i = 0; i < order.size(); ++i) identity = identity && order[i] == static_cast<int32_t>(i);
  return Status::success();
}

// Where each group's new tokens go in its block: positions below K-1 are head rows; the rest join
// the buffer after the tokens already there. A buffer that cannot take them is folded into [A; B]
// before the step; more new tokens than a buffer holds are folded in the layer, all but the last
// (new mod dk).
Status CudaLinear::Impl::plan_appends(std::span<SequenceKv* const> seqs, StepTables& t) {
  const size_t G = groups.size();
  group_of.clear();
  folds.clear();
  prefolds.clear();
  new_dense.assign(G, 0);
  own_dense.assign(G, 0);
  for (size_t r = 0; r < G; ++r) {
    const int32_t f = first[r], n = first[r + 1] - f, slot = slot_of[r];
    const int64_t start = groups[r].start;
    const LinearState& st = *seqs[static_cast<size_t>(groups[r].seq)]->linear;
    auto plan = plan_linear_append(start, n, st.device_dense, K1, dk);
    if (!plan)
      return make_error(plan.error().code,
                        "sequence " + std::to_string(groups[r].seq) + ": " + plan.error().message);
    const LinearAppend& a = *plan;
    for (int64_t i = 0; i < a.head; ++i)
      t.head.push_back({static_cast<int32_t>(f + i), slot, static_cast<int32_t>(start + i)});
    if (a.prefold > 0) prefolds.emplace_back(r, a.prefold);
    group_of[groups[r].seq] = r;
    own_dense[r] = a.dense_before;
    const int64_t row = f + a.head;  // the first body row
    if (a.folded > 0) folds.push_back({r, row, a.folded});
    for (int64_t i = a.folded, at = a.buffer_at; i < n - a.head; ++i, ++at)
      t.compact.push_back({static_cast<int32_t>(row + i), slot, static_cast<int32_t>(at)});
    new_dense[r] = a.dense_after;
  }
  for (int r = 0; r < n_groups; ++r)
    t.row_seq.insert(t.row_seq.end(),
                     static_cast<size_t>(first[static_cast<size_t>(r) + 1] - first[static_cast<size_t>(r)]),
                     r);
  n_head_rows = static_cast<int>(t.head.size());
  n_compact_rows = static_cast<int>(t.compact.size());
  return Status::success();
}

Status CudaLinear::Impl::plan_suffixes(std::span<SequenceKv* const> seqs) {
  suffixes.clear();
  for (size_t r = 0; r < groups.size(); ++r) {
    if (groups[r].suffix.empty()) continue;
    Suffix sx{r, {}};
    for (const auto& [blk, n] : groups[r].suffix) {
      auto b = block_of(seqs, blk, n);
      if (!b) return b.error();
      sx.blocks.push_back(*b);
    }
    suffixes.push_back(std::move(sx));
  }
  return Status::success();
}

// Chain reads: per reader its token's row, its slot (base state and tail), and its blocks from the
// first one written in this step, then its own block as the step found it, each block's head
// tokens given rows of their own.
Status CudaLinear::Impl::plan_chain_reads(std::span<SequenceKv* const> seqs, StepTables& t) {
  for (size_t r = 0; r < groups.size(); ++r) {
    const LinearGroup& g = groups[r];
    if (g.mode != LinearGroup::Mode::chain) continue;
    const auto read = static_cast<int32_t>(t.reads.size());
    t.reads.push_back({first[r], slot_of[r], static_cast<int32_t>(t.chain_blocks.size()), 0, g.n_base > 0});
    auto add_block = [&](int32_t slot, int64_t n, int64_t dense) {
      const auto block = static_cast<int32_t>(t.chain_blocks.size());
      t.chain_blocks.push_back({slot, static_cast<int32_t>(n), static_cast<int32_t>(dense),
                                static_cast<int32_t>(t.chain_heads.size())});
      for (int32_t j = 0; j < std::min<int64_t>(n, K1); ++j) t.chain_heads.push_back({read, block, j});
      ++t.reads.back().n_blocks;
    };
    for (size_t b = g.n_base; b < g.prefix.size(); ++b) {
      auto blk = block_of(seqs, g.prefix[b].first, g.prefix[b].second);
      if (!blk) return blk.error();
      add_block(std::get<0>(*blk), std::get<1>(*blk), std::get<2>(*blk));
    }
    add_block(slot_of[r], g.start, own_dense[r]);
  }
  n_reads = static_cast<int>(t.reads.size());
  n_chain_blocks = static_cast<int>(t.chain_blocks.size());
  n_chain_heads = static_cast<int>(t.chain_heads.size());
  return Status::success();
}

// The tables the layers read first, in a fixed order: their addresses depend only on the sizes a
// graph is keyed by (graph_key()).
Status CudaLinear::Impl::upload_tables(const StepTables& t) {
  const size_t G = groups.size();
  std::vector<float*> states;
  for (int l = 0; l < c.n_layer; ++l)
    if (c.is_linear(l))
      for (size_t r = 0; r < slot_of.size(); ++r)
        states.push_back(r < G && (!groups[r].suffix.empty() || groups[r].mode == LinearGroup::Mode::chain)
                             ? nullptr  // its rows' outputs are computed by the read through the view
                             : part(slot_of[r], l) + lay.S);
  CHORUS_TRY(put_into(order, &order_dev));
  CHORUS_TRY(put_into(t.row_seq, &row_seq_dev));
  CHORUS_TRY(put_into(first, &first_dev));
  CHORUS_TRY(put_into(slot_of, &slot_dev));
  CHORUS_TRY(put_into(t.head, &head_dev));
  CHORUS_TRY(put_into(t.compact, &compact_dev));
  CHORUS_TRY(put_into(states, &states_dev));
  CHORUS_TRY(put_into(t.reads, &reads_dev));
  CHORUS_TRY(put_into(t.chain_blocks, &chain_blocks_dev));
  return put_into(t.chain_heads, &chain_heads_dev);
}

// Prefixes to compose: recomposing groups with the same blocks before them share one, and so do
// chain reads whose base (the blocks before the first one written in this step) changed.
Status CudaLinear::Impl::plan_prefixes(std::span<SequenceKv* const> seqs) {
  prefixes.clear();
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    LinearGroup& g = groups[gi];
    const bool chain = g.mode == LinearGroup::Mode::chain;
    if (g.mode == LinearGroup::Mode::cached || (chain && (!g.compose || g.n_base == 0))) continue;
    std::vector<std::tuple<int32_t, int64_t, int64_t>> blocks;
    for (size_t b = 0; b < (chain ? g.n_base : g.prefix.size()); ++b) {
      auto blk = block_of(seqs, g.prefix[b].first, g.prefix[b].second);
      if (!blk) return blk.error();
      blocks.push_back(*blk);
    }
    auto it =
        std::find_if(prefixes.begin(), prefixes.end(), [&](const Prefix& p) { return p.blocks == blocks; });
    if (it == prefixes.end()) it = prefixes.insert(prefixes.end(), Prefix{std::move(blocks), {}, {}});
    (chain ? it->base_users : it->users).push_back(gi);
  }
  return Status::success();
}

// The single-matrix runs, in the order they are made: per linear layer the prefolds and the
// compositions (prepare()), then per linear layer the reads through blocks after their writers
// and the folds (layer()).
void CudaLinear::Impl::plan_runs() {
  run_mats.clear();
  run_ranges.clear();
  next_run = 0;
  auto add_run = [this](float* mat, int64_t t0, int64_t t1) {
    if (t1 <= t0) return;
    run_mats.push_back(mat);
    run_ranges.insert(run_ranges.end(), {static_cast<int32_t>(t0), static_cast<int32_t>(t1)});
  };
  for (int l = 0; l < c.n_layer; ++l) {
    if (!c.is_linear(l)) continue;
    for (const auto& [r, n] : prefolds) add_run(part(slot_of[r], l) + lay.AB, 0, n);
    for (const Prefix& p : prefixes) {
      for (const auto& [slot, n, dense] : p.blocks) plan_apply(n, dense, cS);
      for (size_t r : p.users) plan_apply(groups[r].start, own_dense[r], part(slot_of[r], l) + lay.S);
    }
  }
  n_prepare_runs = run_mats.size();
  for (int l = 0; l < c.n_layer; ++l) {
    if (!c.is_linear(l)) continue;
    for (const Suffix& sx : suffixes)
      for (int32_t row = first[sx.group]; row < first[sx.group + 1]; ++row) {
        add_run(part(slot_of[sx.group], l) + lay.S, row, row + 1);
        for (const auto& [slot, n, dense] : sx.blocks) plan_apply(n, dense, cS);
      }
    for (const Fold& f : folds) add_run(part(slot_of[f.group], l) + lay.AB, f.row, f.row + f.n);
  }
}

std::array<int64_t, 7> CudaLinear::graph_key() const {
  const Impl& m = *impl_;
  return {m.n_groups, m.n_head_rows,    m.n_compact_rows, m.identity,
          m.n_reads,  m.n_chain_blocks, m.n_chain_heads};
}

bool CudaLinear::graphable() const {
  return impl_->graphable;
}

void CudaLinear::abandon(std::span<SequenceKv* const> seqs) {
  for (const LinearGroup& g : impl_->groups)
    if (const auto& s = seqs[static_cast<size_t>(g.seq)]->linear) s->broken = true;
}

void CudaLinear::finish(std::span<SequenceKv* const> seqs, bool graphed) {
  Impl& m = *impl_;
  m.uploading = false;  // the step's sync has passed the upload
  for (size_t r = 0; r < m.groups.size(); ++r)
    seqs[static_cast<size_t>(m.groups[r].seq)]->linear->device_dense = m.new_dense[r];
  finish_linear_groups(m.groups, seqs);
  m.reads_done += m.n_reads;
  if (graphed) m.graphed_reads += m.n_reads;
  // A chain read's base lives in the slot's run state, which any other step overwrites.
  for (const LinearGroup& g : m.groups)
    if (g.mode != LinearGroup::Mode::chain) seqs[static_cast<size_t>(g.seq)]->linear->base_key.clear();
}

}  // namespace chorus
