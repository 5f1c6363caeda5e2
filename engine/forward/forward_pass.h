// A forward pass with the KV cache it writes: what the Engine runs on. The runner is the CPU's
// (a CpuRunner over a KvCache that holds the pages) or a GPU's (a CudaRunner, which holds the
// pages itself: the KvCache keeps their bookkeeping and asks the runner, its page store, to
// move them); the pass only owns them in the right order.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>

#include "base/status.h"
#include "engine/forward/kv_cache.h"
#include "engine/forward/runner.h"
#include "engine/model/model.h"

namespace chorus {

class CpuDevice;
class CudaDevice;
class CpuRunner;

class ForwardPass {
 public:
  // `max_tokens` per forward, `n_pages` KV pages. With `gpu`, the CUDA runner's errors come back
  // (a model it does not run yet, a pool too small). `linear_slots` (hybrid models): blocks
  // that may hold a linear state at once; 0: on a GPU the runner's default, on the CPU no limit.
  // REQUIRES: model, cpu and gpu outlive it.
  static Result<std::unique_ptr<ForwardPass>> create(const Model& model, CpuDevice& cpu, int max_tokens,
                                                     int64_t n_pages, CudaDevice* gpu, int linear_slots = 0);
  ~ForwardPass();

  KvCache& kv() { return kv_; }
  int max_tokens() const { return runner_->max_tokens(); }
  bool on_gpu() const { return runner_->on_gpu(); }
  std::string describe() const { return runner_->describe(); }
  CpuRunner* cpu_runner();  // null on a GPU
  Runner& runner() { return *runner_; }

  // Runner::run on this pass's cache.
  Status run(std::span<const BatchToken> batch, std::span<SequenceKv* const> seqs, float* logits,
             std::span<const View> views = {}, std::span<const std::optional<PlannedDraw>> draws = {},
             TokenId* drawn = nullptr) {
    return runner_->run(batch, seqs, kv_, logits, views, draws, drawn);
  }

 private:
  ForwardPass(std::unique_ptr<Runner> runner, KvCache kv);
  std::unique_ptr<Runner> runner_;  // declared before kv_: a GPU runner is the cache's page store
  KvCache kv_;
};

}  // namespace chorus
