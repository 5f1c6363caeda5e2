// What a forward pass runs on: the CPU's CpuRunner (engine/forward/cpu/) or the GPU's
// CudaRunner (engine/forward/cuda/), behind one interface, so the step loop (ForwardPass, the
// Engine) never asks which.
#pragma once

#include <optional>
#include <span>
#include <string>

#include "base/status.h"
#include "engine/forward/batch.h"
#include "engine/forward/kv_cache.h"
#include "engine/forward/linear_slots.h"
#include "engine/forward/linear_state.h"
#include "engine/forward/sampler.h"

namespace chorus {

class Runner {
 public:
  virtual ~Runner() = default;

  virtual int max_tokens() const = 0;        // tokens per forward
  virtual std::string describe() const = 0;  // where it runs
  virtual bool on_gpu() const = 0;

  // One forward over `batch` (engine/forward/batch.h has its contract): K/V of every token into
  // its sequence's pages of `kv`, each written sequence's n_tokens raised, logits of the tokens
  // with `logits` set into `logits_out` ([n_logits, n_vocab], batch order). A runner on a GPU
  // samples the rows that have a draw there (`draws`, one per logits row; their tokens go to
  // `drawn`); the CPU's takes no draws. Errors: Errc::invalid_argument for a bad batch, and the
  // device's.
  virtual Status run(std::span<const BatchToken> batch, std::span<SequenceKv* const> seqs, KvCache& kv,
                     float* logits_out, std::span<const View> views,
                     std::span<const std::optional<PlannedDraw>> draws, TokenId* drawn) = 0;

  // Hybrid models: the linear-state slots its blocks hold (engine/forward/linear_slots.h); null
  // when nothing limits them (a CPU runner with no limit, a model with no linear layers).
  virtual LinearSlots* linear_slots() { return nullptr; }
  // A paused block's linear state leaves its slot (kept in host memory; the slot is free after),
  // and takes one again at its restore (Errc::out_of_memory when none is free). Where the state
  // lives in host memory anyway (the CPU), only the slot goes and comes back.
  virtual Status offload_linear(LinearState& s) {
    s.slot.reset();
    s.slot_owner = nullptr;
    return Status::success();
  }
  virtual Status load_linear(LinearState& s) {
    LinearSlots* pool = linear_slots();
    return pool && !pool->holds(s) ? pool->acquire(s) : Status::success();
  }
};

}  // namespace chorus
