// The model, device and engine a serving command (node, serve) runs (apps/chorus/commands.h).
#pragma once

#include <memory>

#include "device/cpu_device.h"
#include "device/cuda_device.h"
#include "engine/model/model.h"
#include "engine/step/engine.h"

namespace chorus::app {

struct Served {
  std::unique_ptr<Model> model;
  std::unique_ptr<CpuDevice> device;
  std::unique_ptr<CudaDevice> gpu;  // --device cuda/auto found one (declared before the engine: outlives it)
  std::unique_ptr<Engine> engine;   // moved into the batcher
};

}  // namespace chorus::app
