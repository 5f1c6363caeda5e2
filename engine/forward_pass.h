// A forward pass on the CPU or on a GPU, with the KV cache it writes: what the Engine runs on. On the CPU a ModelRunner over a KvCache that holds the pages; on a GPU a
// CudaRunner, which holds the pages itself (the KvCache keeps their bookkeeping and asks the
// runner, its page store, to move them).
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>

#include "base/status.h"
#include "engine/kv_cache.h"
#include "engine/model.h"
#include "engine/model_runner.h"
#include "engine/sampler.h"

namespace chorus {

class CpuDevice;
class CudaDevice;
class CudaRunner;

class ForwardPass {
 public:
  // `max_tokens` per forward, `n_pages` KV pages. With `gpu`, the CUDA runner's errors come back
  // (a model it does not run yet, a pool too small). REQUIRES: model, cpu and gpu outlive it.
  static Result<std::unique_ptr<ForwardPass>> create(const Model& model, CpuDevice& cpu, int max_tokens,
                                                     int64_t n_pages, CudaDevice* gpu);
  ~ForwardPass();

  KvCache& kv() { return kv_; }
  int max_tokens() const;
  bool on_gpu() const { return gpu_ != nullptr; }
  std::string describe() const;     // where it runs
  ModelRunner* cpu_runner() { return cpu_.get(); }  // null on a GPU

  // ModelRunner::forward's contract; on a GPU, logits rows with a draw are sampled there
  // (CudaRunner::forward). Draws are ignored on the CPU: pass none there.
  Status run(std::span<const BatchToken> batch, std::span<SequenceKv* const> seqs, float* logits,
             std::span<const View> views = {}, std::span<const std::optional<PlannedDraw>> draws = {},
             TokenId* drawn = nullptr);

 private:
  ForwardPass(CpuDevice& cpu, KvCache kv, std::unique_ptr<CudaRunner> gpu);
  CpuDevice& cpu_device_;
  std::unique_ptr<CudaRunner> gpu_;  // declared before kv_: the cache's page store outlives it
  KvCache kv_;
  std::unique_ptr<ModelRunner> cpu_;
};

}  // namespace chorus
