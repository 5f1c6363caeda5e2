#include "engine/forward/forward_pass.h"

#include "device/cpu_device.h"
#include "engine/forward/cpu/cpu_runner.h"
#include "engine/forward/cuda/cuda_runner.h"

namespace chorus {

Result<std::unique_ptr<ForwardPass>> ForwardPass::create(const Model& m, CpuDevice& cpu, int max_tokens,
                                                         int64_t n_pages, CudaDevice* gpu, int linear_slots) {
  if (linear_slots < 0) return make_error(Errc::invalid_argument, "linear_slots must not be negative");
  if (!gpu) {
    CHORUS_ASSIGN_OR_RETURN(KvCache kv, KvCache::create(m.config, n_pages, cpu.kv_type()));
    auto runner = std::make_unique<CpuRunner>(m.config, m.weights, cpu, max_tokens);
    runner->set_linear_slots(linear_slots);
    return std::unique_ptr<ForwardPass>(new ForwardPass(std::move(runner), std::move(kv)));
  }
  if (cpu.kv_type() != KvType::f32)
    return make_error(Errc::unsupported,
                      std::string("a ") + kv_type_name(cpu.kv_type()) +
                          " KV cache runs on the CPU only: the CUDA runner keeps f32 pages");
  CudaRunnerOptions ro;
  ro.max_tokens = max_tokens;
  ro.n_pages = n_pages;
  ro.linear_slots = linear_slots;
  CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<CudaRunner> runner,
                          CudaRunner::create(m.config, m.weights, *gpu, ro));
  CHORUS_ASSIGN_OR_RETURN(KvCache kv, KvCache::create(m.config, n_pages, runner.get()));
  return std::unique_ptr<ForwardPass>(new ForwardPass(std::move(runner), std::move(kv)));
}

ForwardPass::ForwardPass(std::unique_ptr<Runner> runner, KvCache kv)
    : runner_(std::move(runner)), kv_(std::move(kv)) {
  kv_.set_linear_slots(runner_->linear_slots());
}

ForwardPass::~ForwardPass() = default;

CpuRunner* ForwardPass::cpu_runner() {
  return dynamic_cast<CpuRunner*>(runner_.get());
}

}  // namespace chorus
