// `--device cpu|cuda|auto` for the commands that run the engine (generate, bench, run, serve,
// node).
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "device/cuda_device.h"
#include "engine/model/model.h"

namespace chorus::app {

// The GPU `device` asks for, or null for the CPU:
//   cpu:  null.
//   cuda: the CUDA device; an error when there is none, when this chorus was built without
//         CUDA, or when the CUDA runner does not run `model` yet (naming what).
//   auto: the CUDA device when there is one and the CUDA runner runs `model`; else null, with
//         a line on stderr saying why the CPU runs it.
// Other values are an error.
Result<std::unique_ptr<CudaDevice>> open_gpu(const char* cmd, const std::string& device, const Model& model);

}  // namespace chorus::app
