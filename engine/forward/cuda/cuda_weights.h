// Weights onto a CUDA device, once, when a runner is created (engine/forward/cuda/cuda_runner.h and its
// parts): matrices converted to bf16 on the device (the file's bytes staged in the pool,
// dequantized there, the staging given back), vectors and small f32 matrices as they are.
// Errors name the tensor: the pool too small, a type the device cannot convert, a device error.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "engine/model/weights.h"
#include "kernels/cuda/ops.h"

namespace chorus {

class CudaDevice;

// A weight matrix on the device, bf16 [rows][cols].
struct CudaMat {
  const cuda::bf16_bits* w = nullptr;
  int64_t rows = 0, cols = 0;
};

// `w` as bf16 into dst (room for w.rows * w.cols values).
Status cuda_upload_matrix_into(CudaDevice& dev, const WeightMatrix& w, cuda::bf16_bits* dst,
                               const char* name);
// `w` as bf16 in a new allocation of the pool.
Result<CudaMat> cuda_upload_matrix(CudaDevice& dev, const WeightMatrix& w, const char* name);
// `w` dequantized to f32 on the host, then uploaded: for small matrices read in f32 (routers).
Result<const float*> cuda_upload_matrix_f32(CudaDevice& dev, const WeightMatrix& w, const char* name);
// n floats; a null `v` (an optional tensor the file lacks) stays null.
Result<const float*> cuda_upload_vec(CudaDevice& dev, const float* v, int64_t n, const char* name);

}  // namespace chorus
