// The Gated DeltaNet layers of hybrid models (qwen35) on a CUDA device, for the CudaRunner: the
// CPU's per-block linear state (engine/forward/linear_state.h) kept in device slots, with the same
// plan (plan_linear_groups) and the same arithmetic, so a view's state is composed from the
// blocks it lists without running their tokens again.
//
// A slot holds, per linear layer, one block's
//   head     the raw inputs [K-1][conv_dim] and (g, beta) of its first min(n, K-1) tokens (their
//            k and v depend on the block before it in a view: convolved again when composed),
//   tail     the raw inputs of its last min(n, K-1) tokens, right-aligned in [K-1][conv_dim],
//   body     the tokens after the head: the affine summary [A; B] per value head ([dk + dv][dk],
//            kernels/cuda/ops.h gdn_runs) of the first LinearState::device_dense of them, and
//            the rest (at most dk) in a buffer (their L2-normalised k, v, g, beta), folded into
//            [A; B] when a step's tokens do not fit: an append costs a row copy, not an
//            O(dk^2) update of A and B per token;
//   run      the state S [Hv][dv][dk] and convolution tail of the view the block is written
//            under (LinearState::run_key says which): a writer whose view is unchanged steps it;
//            a chain reader's S holds its base's state instead (below; LinearState::base_key),
//   base     the tail of a chain reader's base, [K-1][conv_dim].
// How many tokens each part holds follows from the block's length and device_dense.
//
// A step: first (prepare(), outside any graph) the buffers that cannot take the step's tokens
// folded, and for each writer whose view changed, its view's state composed afresh in every
// linear layer (S = 0, then per block its head tokens through the recurrence, its summary by
// cuBLAS, its buffered tokens), a prefix shared by several writers composed once. Then per
// linear layer: the projections of all tokens (rows gathered by sequence when the batch
// interleaves them), the gates, every writer's tokens through the recurrence from its state
// (one launch for all), appended to its block; the gated RMSNorm and the output projection.
// These layer launches read only tables at fixed places, so a decode step's can be a graph.
//
// Chain reads (the CPU's LinearGroup::Mode::chain): a one-token writer whose view has a block
// written in the same step (AsyncLLM's writer reading a live thinker) would need its view
// composed every step. Instead its token's output is read through its query, carried backwards
// through the view's blocks from the first one that changes (its own block last), and then read
// with its base's state (the unchanging first blocks, composed when they change):
// cuda::gdn_chain_inputs convolves those blocks' head tokens with the inputs before them, and
// cuda::gdn_chain_read carries the queries, one launch each for all such writers, inside the
// layer, so such steps stay graphable. O(dk^2) per summarised block and head.
//
// A writer whose view puts blocks after it runs its tokens one at a time in the layer: each
// token's output reads its state after the token, composed through those blocks (the CPU
// carries the query backwards through them instead, GdnBlockOps::query_through).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "base/status.h"
#include "engine/forward/batch.h"
#include "engine/forward/linear_plan.h"
#include "engine/forward/runner.h"
#include "engine/model/model_config.h"
#include "engine/model/weights.h"
#include "kernels/cuda/ops.h"

namespace chorus {

class CudaDevice;
class LinearSlots;

// Where one block's new tokens go in a step (plain arithmetic, tested without a device): the
// block holds `start` tokens, `dense` of its body (the tokens from position K-1 on) in its
// summary and the rest buffered, and the step writes `n` more; `keep` = K-1, `dk` the buffer's
// capacity. Errors: a buffer count outside 0..dk (the block's counts disagree).
struct LinearAppend {
  int64_t head = 0;          // the step's first `head` tokens are head rows, at positions start..
  int64_t prefold = 0;       // buffered tokens folded into the summary before the step
  int64_t folded = 0;        // the next `folded` tokens are folded in the layer (a multiple of dk)
  int64_t buffer_at = 0;     // the rest are buffered from this buffer row on
  int64_t dense_before = 0;  // body tokens in the summary once the prefold is done
  int64_t dense_after = 0;   // ... and after the step
};
inline Result<LinearAppend> plan_linear_append(int64_t start, int64_t n, int64_t dense, int64_t keep,
                                               int64_t dk) {
  LinearAppend a;
  a.head = std::max<int64_t>(0, std::min(start + n, keep) - start);
  const int64_t added = n - a.head;
  int64_t buffered = std::max<int64_t>(0, start - keep) - dense;
  if (buffered < 0 || buffered > dk)
    return make_error(Errc::internal,
                      std::to_string(buffered) + " buffered linear-layer tokens (a block of " +
                          std::to_string(start) + " with " + std::to_string(dense) + " summarised)");
  if (added > 0 && buffered > 0 && buffered + added > dk) {  // no room: fold the buffer first
    a.prefold = buffered;
    buffered = 0;
  }
  a.dense_before = dense + a.prefold;
  if (added > dk) a.folded = added - added % dk;  // the buffer is empty here
  a.buffer_at = buffered;
  a.dense_after = a.dense_before + a.folded;
  return a;
}

class CudaLinear {
 public:
  // Whether these linear layers can run here: an error (Errc::unsupported) naming what cannot.
  static Status check(const ModelConfig& c, const Weights& w);
  // Floats of one slot (every linear layer of one block).
  static int64_t slot_floats(const ModelConfig& c);
  // `xb` is the runner's bf16 staging buffer, [max_tokens][at least max(n_embd, value_dim)].
  // n_slots 0: CudaRunnerOptions::linear_slots's default.
  // Errors: the device pool too small for the weights, the slots or the activations.
  // chain_reads: CudaRunnerOptions::chain_reads.
  static Result<std::unique_ptr<CudaLinear>> create(const ModelConfig& c, const Weights& w, CudaDevice& dev,
                                                    int max_tokens, int n_slots, bool chain_reads,
                                                    cuda::bf16_bits* xb);
  ~CudaLinear();

  // Before a step's launches: groups, modes and slots (a written block gets one, or a copy of
  // a shared one), and every table of the step, uploaded. `n_run` is the rows the layers will
  // be launched for: the batch's, or a graph's padded size (the padding rows run through a
  // slot of their own). Errors: as plan_linear_groups, no free slot, a block whose linear state
  // is not in this runner's slots or is broken, tables that do not fit.
  Status plan(std::span<const BatchToken> batch, std::span<SequenceKv* const> seqs,
              std::span<const View> views, int n_run);
  // Whether the step's layer launches can be captured in a graph (no fold inside the layers — a
  // step of at most dk new body tokens per block — and no writer with blocks after it in its
  // view), and what a graph of them is keyed by besides the
  // padded size: the groups (with padding), head rows, buffer rows, whether rows are gathered,
  // and the chain reads' tables (reads, blocks, head rows).
  bool graphable() const;
  std::array<int64_t, 7> graph_key() const;
  // Launches the step's work before its layers (not part of a graph): buffers folded to make
  // room, and the views' states that changed, composed from the blocks' summaries. Nothing
  // synchronizes.
  Status prepare();
  // Launches model layer l (a linear layer) over the step's n_run rows: h [n_run][n_embd] holds
  // the normed input and gets the layer's output. Nothing synchronizes or allocates, and for a
  // graphable step nothing copies: it can be captured.
  Status layer(int l, float* h, int T);
  // After the step has run (`graphed`: from a graph): the written blocks' lengths and cached views.
  void finish(std::span<SequenceKv* const> seqs, bool graphed);
  // After a step that failed once its layers had started: the written blocks' states are
  // undefined (some layers appended, others not), so they are marked broken and every later
  // step that reads or writes them fails, naming the sequence. Everything that can fail
  // without a device error (slots, tables, views) fails in plan(), before any layer runs.
  void abandon(std::span<SequenceKv* const> seqs);

  int slots() const;
  int slots_in_use() const;
  LinearSlots& slot_pool();
  // A paused block's state out of its slot into host memory (LinearState::saved_slot; the slot
  // is free after), and back into a free slot (Errc::out_of_memory when none is).
  Status save(LinearState& s);
  Status load(LinearState& s);
  // Tokens read through their query (chain reads) by the steps that finished, and how many of
  // those steps ran as graphs; chain reads on or off from the next plan() on.
  std::pair<int64_t, int64_t> chain_reads() const;
  void set_chain_reads(bool on);

 private:
  struct Impl;
  explicit CudaLinear(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace chorus
