// Loading a model and a CPU device for a test.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "device/cpu_device.h"
#include "engine/model/model.h"

namespace chorus::test {

// Loads the GGUF at `path` and creates a CPU device; a failure fails the test fatally (call it
// under ASSERT_NO_FATAL_FAILURE).
inline void load_model(const std::string& path, std::unique_ptr<Model>* model,
                       std::unique_ptr<CpuDevice>* device) {
  auto m = Model::load(path);
  ASSERT_TRUE(m.ok()) << m.error().to_string();
  *model = std::move(*m);
  auto d = CpuDevice::create();
  ASSERT_TRUE(d.ok()) << d.error().to_string();
  *device = std::move(*d);
}

}  // namespace chorus::test
