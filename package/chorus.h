// The embed API in one include: a topology (topology/topology.h) run as a Program on the actor
// runtime (actors/program.h) over a Model on a CpuDevice. docs/embedding.md walks through it.
//   find_package(chorus) + target_link_libraries(app PRIVATE chorus::chorus), or
//   g++ -std=c++20 app.cpp $(pkg-config --cflags --libs chorus)
#pragma once

#include "actors/program.h"
#include "device/cpu_device.h"
#include "engine/model/model.h"
#include "engine/model/model_paths.h"
#include "topology/topology.h"

namespace chorus {

// The version of the library linked in ("0.1.0"; the CMake package's and pkg-config's version).
const char* library_version();

}  // namespace chorus
