// What the CUDA runner's files share (engine/cuda_runner.cpp, engine/cuda_linear*): a CUDA
// op's "" or error text (kernels/cuda/ops.h) as a Status naming where in the model it ran, and
// the early return of a failed Status.
#pragma once

#include <string>

#include "base/status.h"

namespace chorus::cuda_detail {

inline Status op(const std::string& err, const char* where) {
  if (err.empty()) return Status::success();
  return make_error(Errc::internal, std::string(where) + ": " + err);
}

}  // namespace chorus::cuda_detail

#define CHORUS_TRY(expr)                              \
  do {                                                \
    if (Status st_ = (expr); !st_.ok()) return st_; \
  } while (0)
