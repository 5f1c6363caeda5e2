#include "engine/forward_pass.h"

#include "engine/cuda_runner.h"
#include "gpu/cpu_device.h"

namespace chorus {

Result<std::unique_ptr<ForwardPass>> ForwardPass::create(const Model& m, CpuDevice& cpu, int max_tokens,
                                                         int64_t n_pages, CudaDevice* gpu) {
  if (!gpu) {
    auto kv = KvCache::create(m.config, n_pages);
    if (!kv) return kv.error();
    std::unique_ptr<ForwardPass> p(new ForwardPass(cpu, std::move(*kv), nullptr));
    p->cpu_ = std::make_unique<ModelRunner>(m.config, m.weights, cpu, max_tokens);
    return p;
  }
  CudaRunnerOptions ro;
  ro.max_tokens = max_tokens;
  ro.n_pages = n_pages;
  auto runner = CudaRunner::create(m.config, m.weights, *gpu, ro);
  if (!runner) return runner.error();
  auto kv = KvCache::create(m.config, n_pages, runner->get());
  if (!kv) return kv.error();
  return std::unique_ptr<ForwardPass>(new ForwardPass(cpu, std::move(*kv), std::move(*runner)));
}

ForwardPass::ForwardPass(CpuDevice& cpu, KvCache kv, std::unique_ptr<CudaRunner> gpu)
    : cpu_device_(cpu), gpu_(std::move(gpu)), kv_(std::move(kv)) {}

ForwardPass::~ForwardPass() = default;

int ForwardPass::max_tokens() const { return gpu_ ? gpu_->max_tokens() : cpu_->max_tokens(); }

std::string ForwardPass::describe() const { return gpu_ ? gpu_->describe() : cpu_device_.describe(); }

Status ForwardPass::run(std::span<const BatchToken> batch, std::span<SequenceKv* const> seqs, float* logits,
                        std::span<const View> views, std::span<const std::optional<PlannedDraw>> draws,
                        TokenId* drawn) {
  if (gpu_) return gpu_->forward(batch, seqs, logits, views, draws, drawn);
  return cpu_->forward(batch, seqs, kv_, logits, views);
}

}  // namespace chorus
