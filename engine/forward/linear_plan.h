// How a step's tokens meet the Gated DeltaNet layers of hybrid models: grouped by the sequence
// they write, with the blocks their view puts before and after it and how the view's state is
// had. Planned once per step; the CPU runner and the CUDA runner (engine/forward/cuda/) share it.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <utility>
#include <vector>

#include "base/status.h"
#include "engine/forward/batch.h"
#include "engine/forward/linear_slots.h"
#include "engine/forward/linear_state.h"

namespace chorus {

// Hybrid models: the tokens one sequence writes in a step and the blocks its view puts
// before it (as forward()'s seqs indices, with their lengths at the start of the step). The CPU
// runner and the CUDA runner (engine/forward/cuda/cuda_linear.h) plan their linear layers alike.
struct LinearGroup {
  int32_t seq = 0;
  std::vector<int64_t> tokens;  // batch indices, in position order
  std::vector<std::pair<int32_t, int64_t>> prefix;
  std::vector<std::pair<int32_t, int64_t>> suffix;  // blocks the view puts after it
  int64_t start = 0;                                // the sequence's length at the start of the step
  // How its view state is had: the cached one (the view is unchanged), composed afresh from
  // the blocks' summaries (then cached), or not at all: one token's output read through the
  // view's blocks with its query (a block before it is written in this step too, so the view
  // changes every step; no O(dk^3) work).
  enum class Mode { cached, recompose, chain } mode = Mode::cached;
  std::vector<std::pair<uint64_t, int64_t>> key;  // the view's key (LinearState::run_key)
  size_t n_base = 0;     // chain: prefix blocks before the first one written this step
  bool compose = false;  // needs prefix[0, n_compose) composed this step
  size_t n_compose = 0;
  // Per layer: the tokens' raw inputs, (g, beta), factors, and with a suffix the queries
  // through it (y, c: the output is S y + c).
  std::vector<float> x, gb, q, k, v, y, c;
};

// Groups a step's tokens by the sequence they write and checks them: one view per sequence,
// positions appended in order, context blocks read at the length their linear state holds.
// `own` gives each written sequence a state of its own first (made, or copied when shared), so
// that the keys name it; then each group's mode: the cached view state, recomposed, or (with
// chain_reads, one token, a block before it written in this step too) read through the query.
Status plan_linear_groups(bool chain_reads, std::span<const BatchToken> batch,
                          std::span<SequenceKv* const> seqs, std::span<const View> views,
                          const std::function<Status(SequenceKv& s, const LinearGroup& g)>& own,
                          std::vector<LinearGroup>* groups);
// The CPU's `own`: LinearState::create, or clone() when another holder shares it; each with a
// slot of `slots` when the runner counts them (a state that lost its slot gets one again).
std::function<Status(SequenceKv&, const LinearGroup&)> own_linear_state(const ModelConfig& c,
                                                                        LinearSlots* slots = nullptr);
// After the step: each written sequence's state and cached view now hold its new tokens.
void finish_linear_groups(std::vector<LinearGroup>& groups, std::span<SequenceKv* const> seqs);

}  // namespace chorus
