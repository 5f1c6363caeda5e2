#include "apps/chorus/gpu_choice.h"

#include <cstdio>

#include "engine/forward/cuda/cuda_runner.h"

namespace chorus::app {

Result<std::unique_ptr<CudaDevice>> open_gpu(const char* cmd, const std::string& device, const Model& model) {
  if (device == "cpu") return std::unique_ptr<CudaDevice>();
  if (device != "cuda" && device != "auto")
    return make_error(Errc::invalid_argument, "--device " + device + ": expected cpu, cuda or auto");
  const Status runs = CudaRunner::check(model.config, model.weights);
  if (device == "cuda" && !runs.ok()) return runs.error();
  if (!runs.ok()) {  // auto: the CPU, saying why
    std::fprintf(stderr, "chorus %s: --device auto: running on the CPU (%s)\n", cmd,
                 runs.error().message.c_str());
    return std::unique_ptr<CudaDevice>();
  }
  auto gpu = CudaDevice::create();
  if (gpu || device == "cuda") return gpu;
  std::fprintf(stderr, "chorus %s: --device auto: running on the CPU (no GPU: %s)\n", cmd,
               gpu.error().message.c_str());
  return std::unique_ptr<CudaDevice>();
}

}  // namespace chorus::app
