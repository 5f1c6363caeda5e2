// What the CUDA runner's files share (engine/forward/cuda/cuda_runner.cpp, engine/cuda_linear*): a CUDA
// op's Status (kernels/cuda/ops.h) with where in the model it ran put in front of its message.
#pragma once

#include <string>

#include "base/status.h"

namespace chorus::cuda_detail {

inline Status op(const Status& s, const char* where) {
  if (s.ok()) return s;
  return make_error(s.error().code, std::string(where) + ": " + s.error().message);
}

}  // namespace chorus::cuda_detail
