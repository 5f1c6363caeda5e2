// What CUDA/NCCL this build has, as plain functions: no CUDA header leaks out of device/.
// Built either from cuda_info.cpp (CUDA targets on) or cuda_info_none.cpp (off).
#pragma once

#include <string>

namespace chorus {

struct CudaInfo {
  bool built = false;       // compiled with the CUDA targets
  int device_count = 0;     // usable devices at run time (0 without a GPU or driver)
  int runtime_version = 0;  // cudaRuntimeGetVersion, e.g. 13000
  int nccl_version = 0;     // ncclGetVersion, e.g. 22809
  std::string error;        // why no device was found, if none was
};

// Queries the CUDA runtime and NCCL. Never throws; safe without a GPU.
CudaInfo cuda_info();

// Runs the smoke kernel (saxpy on 1024 floats) on device 0 and checks the result.
// Returns an empty string on success, else what failed. REQUIRES: cuda_info().device_count > 0.
std::string cuda_smoke_test();

}  // namespace chorus
