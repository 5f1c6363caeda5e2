// CudaLinear's plan of a step and its bookkeeping after it (engine/forward/cuda/cuda_linear.h): groups and
// slots, where each group's tokens go in its block, the tables the launches read (laid out so
// that a graph's stay in place), the runs prepare() and layer() make, and the blocks' counts
// once the step has run.
#include <map>

#include "engine/forward/cuda/cuda_linear_impl.h"

namespace chorus {

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
                                                      std::to_string(g.start) +
                                                      " tokens but no linear-layer state");
      auto fresh = LinearState::create(m.c);
      CHORUS_TRY(m.acquire(*fresh));
      CHORUS_TRY(m.dev.zero(m.slot_base(*fresh->slot), m.slot_size * 4));
      for (int l = 0; l < m.c.n_layer; ++l)
        if (m.c.is_linear(l))
          CHORUS_TRY(op(
              cuda::gdn_summary_reset(m.part(*fresh->slot, l) + m.lay.AB, m.Hv, m.dk, m.dk, m.dev.stream()),
              "gdn summary reset"));
      s.linear = std::move(fresh);
    } else if (s.linear.use_count() > 1) {
      auto from = m.slot(s, g.seq);
      if (!from) return from.error();
      auto copy = s.linear->clone();
      CHORUS_TRY(m.acquire(*copy));
      CHORUS_TRY(m.dev.copy(m.slot_base(*copy->slot), m.slot_base(*from), m.slot_size * 4));
      s.linear = std::move(copy);
    }
    return Status::success();
  };
  CHORUS_TRY(plan_linear_groups(m.chain_reads, batch, seqs, views, own, &m.groups));
  // Chain reads beyond what a step's head rows hold, and those of writers with blocks after them
  // in their view (not read through the query on the device yet), compose their views instead:
  // correct, with the same bookkeeping (the writer's run state then holds its view).
  int chain_heads = 0, n_chain = 0;
  for (LinearGroup& g : m.groups) {
    if (g.mode != LinearGroup::Mode::chain) continue;
    int need = static_cast<int>(std::min<int64_t>(g.start, m.K1));
    for (size_t b = g.n_base; b < g.prefix.size(); ++b)
      need += static_cast<int>(std::min<int64_t>(g.prefix[b].second, m.K1));
    if (!g.suffix.empty() || chain_heads + need > Impl::kMaxChainHeads ||
        chain_heads + need + (n_chain + 1) * m.K1 > cuda::kMaxChainRows) {
      g.mode = LinearGroup::Mode::recompose;
      g.compose = true;
      g.n_compose = g.prefix.size();
      continue;
    }
    chain_heads += need;
    ++n_chain;
  }
  const int T = static_cast<int>(batch.size());
  if (n_run < T)
    return make_error(Errc::internal, "CUDA linear layers: a step of " + std::to_string(T) +
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
  }
  if (n_run > T) {
    for (int32_t t = T; t < n_run; ++t) m.order.push_back(t);
    m.first.push_back(n_run);
    m.slot_of.push_back(m.pad_slot);
  }
  m.n_groups = static_cast<int>(m.slot_of.size());
  m.identity = true;
  for (size_t i = 0; i < m.order.size(); ++i)
    m.identity = m.identity && m.order[i] == static_cast<int32_t>(i);
  // Body tokens in a block's summary as the layers find it: a written block's after this step's
  // prefold (own_dense), another's as it is.
  std::map<int32_t, size_t> group_of;  // written sequence -> its group
  auto dense_of = [&](int32_t seq) {
    auto it = group_of.find(seq);
    return it != group_of.end() ? m.own_dense[it->second]
                                : seqs[static_cast<size_t>(seq)]->linear->device_dense;
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
    auto plan = plan_linear_append(start, n, st.device_dense, m.K1, m.dk);
    if (!plan)
      return make_error(plan.error().code,
                        "sequence " + std::to_string(m.groups[r].seq) + ": " + plan.error().message);
    const LinearAppend& a = *plan;
    for (int64_t i = 0; i < a.head; ++i)
      head.push_back({static_cast<int32_t>(f + i), slot, static_cast<int32_t>(start + i)});
    if (a.prefold > 0) m.prefolds.emplace_back(r, a.prefold);
    group_of[m.groups[r].seq] = r;
    m.own_dense[r] = a.dense_before;
    const int64_t row = f + a.head;  // the first body row
    if (a.folded > 0) m.folds.push_back({r, row, a.folded});
    for (int64_t i = a.folded, at = a.buffer_at; i < n - a.head; ++i, ++at)
      compact.push_back({static_cast<int32_t>(row + i), slot, static_cast<int32_t>(at)});
    m.new_dense[r] = a.dense_after;
  }
  for (int r = 0; r < m.n_groups; ++r)
    row_seq.insert(row_seq.end(),
                   static_cast<size_t>(m.first[static_cast<size_t>(r) + 1] - m.first[static_cast<size_t>(r)]),
                   r);
  m.n_head_rows = static_cast<int>(head.size());
  m.n_compact_rows = static_cast<int>(compact.size());
  m.suffixes.clear();
  for (size_t r = 0; r < G; ++r) {
    if (m.groups[r].suffix.empty()) continue;
    Impl::Suffix sx{r, {}};
    for (const auto& [blk, n] : m.groups[r].suffix) {
      auto s = m.slot(*seqs[static_cast<size_t>(blk)], blk);
      if (!s) return s.error();
      sx.blocks.emplace_back(*s, n, dense_of(blk));
    }
    m.suffixes.push_back(std::move(sx));
  }
  // Chain reads: per reader its token's row, its slot (base state and tail), and its blocks from
  // the first one written in this step, then its own block as the step found it, each block's
  // head tokens given rows of their own.
  std::vector<cuda::GdnChainRead> reads;
  std::vector<cuda::GdnChainBlock> chain_blocks;
  std::vector<cuda::GdnChainHead> chain_heads_rows;
  for (size_t r = 0; r < G; ++r) {
    const LinearGroup& g = m.groups[r];
    if (g.mode != LinearGroup::Mode::chain) continue;
    const auto read = static_cast<int32_t>(reads.size());
    reads.push_back({m.first[r], m.slot_of[r], static_cast<int32_t>(chain_blocks.size()), 0, g.n_base > 0});
    auto add_block = [&](int32_t slot, int64_t n, int64_t dense) {
      const auto block = static_cast<int32_t>(chain_blocks.size());
      chain_blocks.push_back({slot, static_cast<int32_t>(n), static_cast<int32_t>(dense),
                              static_cast<int32_t>(chain_heads_rows.size())});
      for (int32_t j = 0; j < std::min<int64_t>(n, m.K1); ++j) chain_heads_rows.push_back({read, block, j});
      ++reads.back().n_blocks;
    };
    for (size_t b = g.n_base; b < g.prefix.size(); ++b) {
      const auto& [blk, n] = g.prefix[b];
      auto s = m.slot(*seqs[static_cast<size_t>(blk)], blk);
      if (!s) return s.error();
      add_block(*s, n, dense_of(blk));
    }
    add_block(m.slot_of[r], g.start, m.own_dense[r]);
  }
  m.n_reads = static_cast<int>(reads.size());
  m.n_chain_blocks = static_cast<int>(chain_blocks.size());
  m.n_chain_heads = static_cast<int>(chain_heads_rows.size());
  m.graphable = m.folds.empty() && m.suffixes.empty();
  // The tables the layers read first, in a fixed order: their addresses depend only on the sizes
  // a graph is keyed by (graph_key()).
  std::vector<float*> states;
  for (int l = 0; l < m.c.n_layer; ++l)
    if (m.c.is_linear(l))
      for (size_t r = 0; r < m.slot_of.size(); ++r)
        states.push_back(r < G &&
                                 (!m.groups[r].suffix.empty() || m.groups[r].mode == LinearGroup::Mode::chain)
                             ? nullptr  // its rows' outputs are computed by the read through the view
                             : m.part(m.slot_of[r], l) + m.lay.S);
  CHORUS_TRY(m.put_into(m.order, &m.order_dev));
  CHORUS_TRY(m.put_into(row_seq, &m.row_seq_dev));
  CHORUS_TRY(m.put_into(m.first, &m.first_dev));
  CHORUS_TRY(m.put_into(m.slot_of, &m.slot_dev));
  CHORUS_TRY(m.put_into(head, &m.head_dev));
  CHORUS_TRY(m.put_into(compact, &m.compact_dev));
  CHORUS_TRY(m.put_into(states, &m.states_dev));
  CHORUS_TRY(m.put_into(reads, &m.reads_dev));
  CHORUS_TRY(m.put_into(chain_blocks, &m.chain_blocks_dev));
  CHORUS_TRY(m.put_into(chain_heads_rows, &m.chain_heads_dev));
  // Prefixes to compose: recomposing groups with the same blocks before them share one, and so
  // do chain reads whose base (the blocks before the first one written in this step) changed.
  m.prefixes.clear();
  for (size_t gi = 0; gi < G; ++gi) {
    LinearGroup& g = m.groups[gi];
    const bool chain = g.mode == LinearGroup::Mode::chain;
    if (g.mode == LinearGroup::Mode::cached || (chain && (!g.compose || g.n_base == 0))) continue;
    std::vector<std::tuple<int32_t, int64_t, int64_t>> blocks;
    for (size_t b = 0; b < (chain ? g.n_base : g.prefix.size()); ++b) {
      const auto& [blk, n] = g.prefix[b];
      auto s = m.slot(*seqs[static_cast<size_t>(blk)], blk);
      if (!s) return s.error();
      blocks.emplace_back(*s, n, dense_of(blk));
    }
    auto it = std::find_if(m.prefixes.begin(), m.prefixes.end(),
                           [&](const Impl::Prefix& p) { return p.blocks == blocks; });
    if (it == m.prefixes.end())
      it = m.prefixes.insert(m.prefixes.end(), Impl::Prefix{std::move(blocks), {}, {}});
    (chain ? it->base_users : it->users).push_back(gi);
  }
  // The single-matrix runs, in the order they are made: per linear layer the prefolds and the
  // compositions (prepare()), then per linear layer the reads through blocks after their
  // writers and the folds (layer()).
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
    for (const auto& [r, n] : m.prefolds) add_run(m.part(m.slot_of[r], l) + m.lay.AB, 0, n);
    for (const Impl::Prefix& p : m.prefixes) {
      for (const auto& [slot, n, dense] : p.blocks) m.plan_apply(n, dense, m.cS);
      for (size_t r : p.users)
        m.plan_apply(m.groups[r].start, m.own_dense[r], m.part(m.slot_of[r], l) + m.lay.S);
    }
  }
  m.n_prepare_runs = m.run_mats.size();
  for (int l = 0; l < m.c.n_layer; ++l) {
    if (!m.c.is_linear(l)) continue;
    for (const Impl::Suffix& sx : m.suffixes)
      for (int32_t row = m.first[sx.group]; row < m.first[sx.group + 1]; ++row) {
        add_run(m.part(m.slot_of[sx.group], l) + m.lay.S, row, row + 1);
        for (const auto& [slot, n, dense] : sx.blocks) m.plan_apply(n, dense, m.cS);
      }
    for (const Impl::Fold& f : m.folds) add_run(m.part(m.slot_of[f.group], l) + m.lay.AB, f.row, f.row + f.n);
  }
  CHORUS_TRY(m.put_into(m.run_mats, &m.run_mats_dev));
  CHORUS_TRY(m.put_into(m.run_ranges, &m.run_ranges_dev));
  return m.flush();
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
