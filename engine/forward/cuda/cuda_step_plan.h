// The host side of one CUDA step (engine/forward/cuda/cuda_runner.cpp): from a batch, the tables its kernels
// read — token ids and positions, KV write slots, the page list of every block read and each
// token's segments into it, prefill tiles, the tokens whose logits are computed, the device
// draws — and the padding of a graphed step. Plain C++ over kernels/cuda/ops.h's structs (no
// CUDA headers), so the planning is tested on machines without a GPU (tests/engine/test_engine.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "base/status.h"
#include "engine/forward/batch.h"
#include "engine/forward/linear_plan.h"
#include "engine/forward/runner.h"
#include "engine/forward/sampler.h"
#include "engine/model/model_config.h"
#include "engine/model/weights.h"
#include "kernels/cuda/ops.h"

namespace chorus {

struct CudaStepLimits {
  int64_t n_pages = 0;        // the runner's pages; page n_pages is the spare one (padding)
  int64_t page_table = 0;     // entries of the device page table (one stays for the spare page)
  bool graphs = true;         // steps of up to graph_max_tokens tokens run as graphs ...
  int graph_max_tokens = 64;  // ... padded to a power of two, at most max_tokens
  int max_tokens = 256;
};

struct CudaStepPlan {
  int n_tokens = 0;  // the batch's
  bool graphed = false;
  int n_run = 0;  // tokens launched: n_tokens, or the padded size of a graph
  std::vector<int32_t> ids, pos, write_page, write_slot;  // [n_run]
  std::vector<int32_t> page_ids;
  std::vector<cuda::AttnSegment> segs;
  std::vector<cuda::AttnToken> tokens;  // [n_run]
  std::vector<cuda::AttnTile> tiles;    // not graphed: runs of 2..32 tokens that share pages
  // Not graphed: the other tokens (decodes beside a prefill), for the per-token kernel over them
  // compacted: their rows, and their entries of `tokens` (segments shared with the full table).
  std::vector<int32_t> single_tokens;
  std::vector<cuda::AttnToken> single_table;
  // Not graphed: the tokens whose logits are computed (logits row i is the i-th); graphed: every
  // token's are (row t is token t).
  std::vector<int32_t> logit_tokens;
  std::vector<cuda::SampleRow> samples;  // draws, with .row the logits row they read
  std::vector<int64_t> sample_out;       // per sample: its index among the batch's logits rows

  // Where the logits of the `row`-th logits token (token t) are.
  int64_t logits_row(int t, int64_t row) const { return graphed ? static_cast<int64_t>(t) : row; }
  int n_logits_rows() const { return graphed ? n_run : static_cast<int>(logit_tokens.size()); }
};

// Errors (Errc::invalid_argument unless said): draws that do not match the logits rows, a draw's
// top_k outside 1..cuda::kMaxSampleTopK, draws without `tokens_out`; a page outside the runner's;
// a view of more than kMaxViewBlocks blocks; more pages listed than the table holds
// (Errc::out_of_range). REQUIRES: check_forward_args() holds.
Result<CudaStepPlan> plan_cuda_step(std::span<const BatchToken> batch, std::span<SequenceKv* const> seqs,
                                    std::span<const View> views,
                                    std::span<const std::optional<PlannedDraw>> draws, bool have_tokens_out,
                                    const CudaStepLimits& limits);

}  // namespace chorus
