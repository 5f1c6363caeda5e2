#include "engine/forward/linear_plan.h"

#include <algorithm>
#include <map>
#include <string>

namespace chorus {

std::function<Status(SequenceKv&, const LinearGroup&)> own_linear_state(const ModelConfig& c,
                                                                        LinearSlots* slots) {
  return [&c, slots](SequenceKv& s, const LinearGroup& g) -> Status {
    std::shared_ptr<LinearState> fresh;
    if (!s.linear) {
      if (g.start > 0)
        return make_error(Errc::invalid_argument, "sequence " + std::to_string(g.seq) + " has " +
                                                      std::to_string(g.start) +
                                                      " tokens but no linear-layer state");
      fresh = LinearState::create(c);
    } else if (s.linear.use_count() > 1) {
      fresh = s.linear->clone();
    } else if (slots && !slots->holds(*s.linear)) {
      return slots->acquire(*s.linear);
    }
    if (fresh && slots) CHORUS_TRY(slots->acquire(*fresh));
    if (fresh) s.linear = std::move(fresh);
    return Status::success();
  };
}

namespace {

// The batch's tokens grouped by sequence, in order; each group's view noted in `group_view`.
Status group_tokens(std::span<const BatchToken> batch, std::span<SequenceKv* const> seqs,
                    std::map<int32_t, size_t>& index, std::vector<int32_t>& group_view,
                    std::vector<LinearGroup>* groups) {
  for (int64_t t = 0; t < static_cast<int64_t>(batch.size()); ++t) {
    const BatchToken& b = batch[static_cast<size_t>(t)];
    auto [it, fresh] = index.emplace(b.seq, groups->size());
    if (fresh) {
      LinearGroup g;
      g.seq = b.seq;
      g.start = seqs[static_cast<size_t>(b.seq)]->n_tokens;
      groups->push_back(std::move(g));
      group_view.push_back(b.view);
    }
    LinearGroup& g = (*groups)[it->second];
    if (group_view[it->second] != b.view)
      return make_error(Errc::invalid_argument,
                        "sequence " + std::to_string(b.seq) +
                            ": its tokens in one step use different views (a hybrid "
                            "model's linear layers run a sequence's tokens in one order)");
    const int64_t want = g.start + static_cast<int64_t>(g.tokens.size());
    if (b.pos != want)
      return make_error(Errc::invalid_argument,
                        "sequence " + std::to_string(b.seq) + ": position " + std::to_string(b.pos) +
                            " written where " + std::to_string(want) +
                            " comes next (a hybrid model's linear layers only append)");
    g.tokens.push_back(t);
  }
  return Status::success();
}

// The blocks of g's view before its own (prefix, with their keys) and after it (suffix).
Status read_view(LinearGroup& g, const View& view, std::span<SequenceKv* const> seqs) {
  bool own_seen = false;
  for (int32_t blk : view) {
    if (blk == g.seq) {
      own_seen = true;
      continue;
    }
    const SequenceKv& s = *seqs[static_cast<size_t>(blk)];
    if (s.n_tokens == 0) continue;
    if (!s.linear)
      return make_error(Errc::invalid_argument, "sequence " + std::to_string(blk) + " has " +
                                                    std::to_string(s.n_tokens) +
                                                    " tokens but no linear-layer state");
    if (s.linear->n_tokens != s.n_tokens)
      return make_error(Errc::unsupported, "a view reads sequence " + std::to_string(blk) + " at " +
                                               std::to_string(s.n_tokens) +
                                               " tokens, but its linear-layer state "
                                               "holds " +
                                               std::to_string(s.linear->n_tokens) +
                                               " (a hybrid model's block is read at its full length only)");
    if (own_seen) {
      g.suffix.emplace_back(blk, s.n_tokens);
    } else {
      g.prefix.emplace_back(blk, s.n_tokens);
      g.key.emplace_back(s.linear->id, s.n_tokens);
    }
  }
  return Status::success();
}

// How g gets its view's state this step, and what is composed for it.
void choose_mode(LinearGroup& g, const LinearState& own, bool chain_reads,
                 const std::map<int32_t, size_t>& index) {
  using Mode = LinearGroup::Mode;
  if (g.key == own.run_key) {
    g.mode = Mode::cached;
  } else if (!chain_reads || g.tokens.size() > 1) {
    g.mode = Mode::recompose;
  } else {
    // One token and a new view: compose the view's state (then step it each token) unless a
    // block before it in the view is being written in this very step, i.e. the view changes
    // every step (AsyncLLM's writer reading a thinker): then read the view through the
    // token's query instead (chain), which never pays the O(dk^3) composition.
    g.n_base = 0;
    while (g.n_base < g.prefix.size() && index.count(g.prefix[g.n_base].first) == 0) ++g.n_base;
    g.mode = g.n_base < g.prefix.size() ? Mode::chain : Mode::recompose;
  }
  // What to compose this step: the whole prefix (recompose), or a chain's unchanging first
  // blocks when they differ from the ones its cached base was made of.
  if (g.mode == Mode::recompose) {
    g.compose = true;
    g.n_compose = g.prefix.size();
  } else if (g.mode == Mode::chain) {
    g.n_compose = g.n_base;
    g.compose = !std::equal(g.key.begin(), g.key.begin() + static_cast<long>(g.n_base), own.base_key.begin(),
                            own.base_key.end());
  }
}

}  // namespace

Status plan_linear_groups(bool chain_reads, std::span<const BatchToken> batch,
                          std::span<SequenceKv* const> seqs, std::span<const View> views,
                          const std::function<Status(SequenceKv& s, const LinearGroup& g)>& own,
                          std::vector<LinearGroup>* groups) {
  std::map<int32_t, size_t> index;
  std::vector<int32_t> group_view;
  CHORUS_TRY(group_tokens(batch, seqs, index, group_view, groups));
  // Own states first (created, or copied when shared), so that the keys below name them.
  for (LinearGroup& g : *groups) CHORUS_TRY(own(*seqs[static_cast<size_t>(g.seq)], g));
  for (size_t gi = 0; gi < groups->size(); ++gi) {
    LinearGroup& g = (*groups)[gi];
    if (group_view[gi] >= 0) CHORUS_TRY(read_view(g, views[static_cast<size_t>(group_view[gi])], seqs));
    const LinearState& own_state = *seqs[static_cast<size_t>(g.seq)]->linear;
    g.key.emplace_back(own_state.id, g.start);
    choose_mode(g, own_state, chain_reads, index);
  }
  return Status::success();
}

void finish_linear_groups(std::vector<LinearGroup>& groups, std::span<SequenceKv* const> seqs) {
  for (LinearGroup& g : groups) {
    g.key.back().second += static_cast<int64_t>(g.tokens.size());
    LinearState& st = *seqs[static_cast<size_t>(g.seq)]->linear;
    st.n_tokens = g.key.back().second;
    if (g.mode == LinearGroup::Mode::chain) {  // no full state was kept; the base is
      st.base_key.assign(g.key.begin(), g.key.begin() + static_cast<long>(g.n_base));
      st.run_key.clear();
    } else {
      st.run_key = std::move(g.key);
    }
  }
}

}  // namespace chorus
