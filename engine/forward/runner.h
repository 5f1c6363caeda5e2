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
};

}  // namespace chorus
