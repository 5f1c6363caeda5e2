#include "device/cuda_info.h"

namespace chorus {

CudaInfo cuda_info() {
  CudaInfo info;
  info.error = "chorus was built without CUDA (CHORUS_CUDA=OFF or no nvcc at configure time)";
  return info;
}

std::string cuda_smoke_test() {
  return "chorus was built without CUDA";
}

}  // namespace chorus
