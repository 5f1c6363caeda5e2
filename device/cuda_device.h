// The CUDA device: one GPU, one stream, a cuBLAS handle, and one up-front device allocation
// that everything else (KV pages, GDN state slabs, activations, uploaded weights) is carved
// from, so no step allocates. No CUDA header leaks out of this file: streams and handles are
// opaque pointers, buffers are device pointers.
//
// Built only with the CUDA targets (CHORUS_HAVE_CUDA); without them create() returns an error
// saying so. Every CUDA call goes through CHORUS_CUDA_CHECK (cuda_device.cpp), whose error names
// the call, CUDA's error and the file:line.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"

namespace chorus {

struct CudaDeviceOptions {
  int device = 0;          // CUDA device index
  int64_t pool_bytes = 0;  // the up-front pool; 0: 90 % of the device's free memory
};

class CudaDevice {
 public:
  static Result<std::unique_ptr<CudaDevice>> create(const CudaDeviceOptions& opts = {});
  ~CudaDevice();
  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;

  // `bytes` from the pool, 256-byte aligned. Out of pool: an out_of_memory error naming `what`,
  // the size asked and what is left. Memory is given back only by reset_to() (a bump allocator:
  // the layout is fixed at load).
  Result<void*> alloc(int64_t bytes, const std::string& what);
  int64_t mark() const { return used_; }  // reset_to(mark()) frees what came after
  void reset_to(int64_t mark);
  int64_t pool_bytes() const { return pool_bytes_; }
  int64_t pool_used() const { return used_; }

  // Makes this the calling thread's current CUDA device (the current device is per thread; the
  // methods below bind themselves, the ops in kernels/cuda/ops.h run on the current one).
  Status bind() const;
  void* stream() const { return stream_; }  // a cudaStream_t
  void* cublas() const { return cublas_; }  // a cublasHandle_t bound to stream()

  Status upload(void* dst, const void* src, int64_t bytes);  // host -> device, then waits
  // host -> device in stream order, without waiting: `src` must stay unchanged until the stream
  // has passed the copy (the next sync()).
  Status upload_async(void* dst, const void* src, int64_t bytes);
  Status download(void* dst, const void* src, int64_t bytes);  // device -> host, then waits
  // device -> host in stream order; `dst` is complete after the next sync().
  Status download_async(void* dst, const void* src, int64_t bytes);
  Status copy(void* dst, const void* src, int64_t bytes);  // device -> device, async on stream()
  Status zero(void* dst, int64_t bytes);                   // async on stream()
  // Waits for the stream; an error a kernel raised comes back here, with `what` in front.
  Status sync(const std::string& what = "stream");

  // CUDA graphs of the work launched on stream() between begin_capture() and end_capture():
  // nothing in between may synchronize, allocate or copy from pageable host memory. The graph
  // handle (a cudaGraphExec_t) is launched on stream() and destroyed with destroy_graph().
  Status begin_capture();
  Result<void*> end_capture();  // also ends a capture that failed, returning its error
  Status launch_graph(void* graph);
  void destroy_graph(void* graph);

  std::string describe() const;  // e.g. "cuda NVIDIA H200 (sm_90, 139.8 GiB), pool 120.0 GiB"
  int sm_count() const { return sm_count_; }

 private:
  CudaDevice() = default;
  int device_ = 0;
  std::string name_;
  int cc_major_ = 0, cc_minor_ = 0, sm_count_ = 0;
  int64_t total_bytes_ = 0;
  void* pool_ = nullptr;
  int64_t pool_bytes_ = 0, used_ = 0, base_mark_ = 0;
  void* stream_ = nullptr;
  void* cublas_ = nullptr;
};

// Y [n][m] (f32) = X [n][k] (bf16) W^T, W [m][k] (bf16, a weight's rows): cuBLAS with f32
// accumulation, on the device's stream, from the thread the device is bound to (bind()). Shapes
// are checked; errors name the call.
Status cuda_gemm_bf16(CudaDevice& dev, const void* w, const void* x, float* y, int64_t m, int64_t n,
                      int64_t k);

// out[i] = X[i] A[i] + Y[i] for i < batch (Y null: no addend), row-major f32: X [m][k], A [k][n],
// Y and out [m][n]; matrix i of each at i * stride (a stride of 0: the same matrix for all).
// cuBLAS, f32 products on the device's stream. out may be Y, not X or A; out's matrices must not
// overlap. The affine algebra of Gated DeltaNet summaries (kernels/cpu/gdn.h), per head: a state
// through a summary, S A + B; and the composition of two, A = A_L A_R (no Y), B = B_L A_R + B_R.
Status cuda_affine_f32_batched(CudaDevice& dev, const float* X, const float* A, const float* Y, float* out,
                               int64_t m, int64_t k, int64_t n, int64_t stride_x, int64_t stride_a,
                               int64_t stride_y, int64_t stride_out, int batch);

}  // namespace chorus
