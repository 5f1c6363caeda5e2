// Engine tests built a second time into chorus_gpu_tests (CHORUS_ENGINE_ON_GPU) run their engines
// on the CUDA runner: the device they use, or why there is none (the test then skips).
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>

#include "device/cuda_device.h"
#include "device/cuda_info.h"

namespace chorus::test {

// Opens device 0 with a 2 GiB pool into `out`; the reason to skip when there is no device.
// A device that exists but does not open is a failure, not a skip.
inline std::optional<std::string> engine_gpu(std::unique_ptr<CudaDevice>* out) {
  const CudaInfo info = cuda_info();
  if (info.device_count == 0) return "no CUDA device: " + info.error;
  auto gpu = CudaDevice::create({.device = 0, .pool_bytes = int64_t{2} << 30});
  EXPECT_TRUE(gpu.ok()) << gpu.error().to_string();
  if (!gpu.ok()) return "the CUDA device did not open: " + gpu.error().to_string();
  *out = std::move(*gpu);
  return std::nullopt;
}

}  // namespace chorus::test
