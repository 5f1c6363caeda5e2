#include "device/cuda_device.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdio>

namespace chorus {

namespace {

Error cuda_error(const char* call, cudaError_t e, const char* file, int line) {
  return make_error(e == cudaErrorMemoryAllocation ? Errc::out_of_memory : Errc::internal,
                    std::string(call) + ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e) + " (" +
                        file + ":" + std::to_string(line) + ")");
}

Error cublas_error(const char* call, cublasStatus_t s, const char* file, int line) {
  return make_error(Errc::internal, std::string(call) + ": " + cublasGetStatusName(s) + ": " +
                                        cublasGetStatusString(s) + " (" + file + ":" + std::to_string(line) +
                                        ")");
}

std::string gib(int64_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f GiB", static_cast<double>(bytes) / (1 << 30));
  return b;
}

}  // namespace

// Evaluates a CUDA runtime call; on failure returns its error (with the call's text and
// file:line) from the enclosing function, which returns Status or Result<T>.
#define CHORUS_CUDA_CHECK(expr)                                                            \
  do {                                                                                     \
    const cudaError_t chorus_e_ = (expr);                                                  \
    if (chorus_e_ != cudaSuccess) return cuda_error(#expr, chorus_e_, __FILE__, __LINE__); \
  } while (0)
#define CHORUS_CUBLAS_CHECK(expr)                                                                      \
  do {                                                                                                 \
    const cublasStatus_t chorus_s_ = (expr);                                                           \
    if (chorus_s_ != CUBLAS_STATUS_SUCCESS) return cublas_error(#expr, chorus_s_, __FILE__, __LINE__); \
  } while (0)

Result<std::unique_ptr<CudaDevice>> CudaDevice::create(const CudaDeviceOptions& opts) {
  int count = 0;
  CHORUS_CUDA_CHECK(cudaGetDeviceCount(&count));
  if (opts.device < 0 || opts.device >= count)
    return make_error(Errc::not_found, "cuda device " + std::to_string(opts.device) + ": " +
                                           std::to_string(count) + " device(s) present");
  std::unique_ptr<CudaDevice> d(new CudaDevice());
  d->device_ = opts.device;
  CHORUS_CUDA_CHECK(cudaSetDevice(opts.device));
  cudaDeviceProp prop{};
  CHORUS_CUDA_CHECK(cudaGetDeviceProperties(&prop, opts.device));
  d->name_ = prop.name;
  d->cc_major_ = prop.major;
  d->cc_minor_ = prop.minor;
  d->sm_count_ = prop.multiProcessorCount;
  d->total_bytes_ = static_cast<int64_t>(prop.totalGlobalMem);
  size_t free_b = 0, total_b = 0;
  CHORUS_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  int64_t want =
      opts.pool_bytes > 0 ? opts.pool_bytes : static_cast<int64_t>(static_cast<double>(free_b) * 0.9);
  want &= ~int64_t{255};
  if (want > static_cast<int64_t>(free_b))
    return make_error(Errc::out_of_memory, "cuda device " + std::to_string(opts.device) + ": a pool of " +
                                               gib(want) + " asked, " + gib(static_cast<int64_t>(free_b)) +
                                               " free");
  CHORUS_CUDA_CHECK(cudaMalloc(&d->pool_, static_cast<size_t>(want)));
  d->pool_bytes_ = want;
  cudaStream_t st = nullptr;
  CHORUS_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  d->stream_ = st;
  cublasHandle_t h = nullptr;
  CHORUS_CUBLAS_CHECK(cublasCreate(&h));
  d->cublas_ = h;
  CHORUS_CUBLAS_CHECK(cublasSetStream(h, st));
  // cuBLAS's workspace from the pool: no allocation inside a step, so steps can be captured
  // into CUDA graphs.
  constexpr int64_t kWorkspace = int64_t{32} << 20;
  auto ws = d->alloc(kWorkspace, "cuBLAS workspace");
  if (!ws) return ws.error();
  CHORUS_CUBLAS_CHECK(cublasSetWorkspace(h, *ws, kWorkspace));
  d->base_mark_ = d->used_;
  return d;
}

CudaDevice::~CudaDevice() {
  if (cublas_) cublasDestroy(static_cast<cublasHandle_t>(cublas_));
  if (stream_) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
  if (pool_) cudaFree(pool_);
}

Result<void*> CudaDevice::alloc(int64_t bytes, const std::string& what) {
  if (bytes < 0) return make_error(Errc::invalid_argument, "cuda pool: " + what + ": negative size");
  const int64_t size = (bytes + 255) & ~int64_t{255};
  if (size > pool_bytes_ - used_)
    return make_error(Errc::out_of_memory, "cuda pool: " + what + ": " + gib(size) + " asked, " +
                                               gib(pool_bytes_ - used_) + " left of " + gib(pool_bytes_));
  void* p = static_cast<char*>(pool_) + used_;
  used_ += size;
  return p;
}

void CudaDevice::reset_to(int64_t mark) {
  if (mark >= base_mark_ && mark <= used_) used_ = mark;  // the workspace stays
}

Status CudaDevice::bind() const {
  CHORUS_CUDA_CHECK(cudaSetDevice(device_));
  return {};
}

Status CudaDevice::upload_async(void* dst, const void* src, int64_t bytes) {
  CHORUS_CUDA_CHECK(cudaSetDevice(device_));
  CHORUS_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyHostToDevice,
                                    static_cast<cudaStream_t>(stream_)));
  return {};
}

Status CudaDevice::upload(void* dst, const void* src, int64_t bytes) {
  if (Status s = upload_async(dst, src, bytes); !s.ok()) return s;
  return sync("upload");
}

Status CudaDevice::download_async(void* dst, const void* src, int64_t bytes) {
  CHORUS_CUDA_CHECK(cudaSetDevice(device_));
  CHORUS_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost,
                                    static_cast<cudaStream_t>(stream_)));
  return {};
}

Status CudaDevice::download(void* dst, const void* src, int64_t bytes) {
  if (Status s = download_async(dst, src, bytes); !s.ok()) return s;
  return sync("download");
}

Status CudaDevice::copy(void* dst, const void* src, int64_t bytes) {
  CHORUS_CUDA_CHECK(cudaSetDevice(device_));
  CHORUS_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice,
                                    static_cast<cudaStream_t>(stream_)));
  return {};
}

Status CudaDevice::zero(void* dst, int64_t bytes) {
  CHORUS_CUDA_CHECK(cudaSetDevice(device_));
  CHORUS_CUDA_CHECK(cudaMemsetAsync(dst, 0, static_cast<size_t>(bytes), static_cast<cudaStream_t>(stream_)));
  return {};
}

Status CudaDevice::sync(const std::string& what) {
  CHORUS_CUDA_CHECK(cudaSetDevice(device_));
  const cudaError_t e = cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
  if (e != cudaSuccess)
    return cuda_error(("cudaStreamSynchronize after " + what).c_str(), e, __FILE__, __LINE__);
  return {};
}

// A capture that fails leaves its error as the thread's last CUDA error, which every kernel
// launcher reads back (cudaGetLastError): it is taken here, so that the step can still launch
// directly.
Status CudaDevice::begin_capture() {
  CHORUS_CUDA_CHECK(cudaSetDevice(device_));
  const cudaError_t e =
      cudaStreamBeginCapture(static_cast<cudaStream_t>(stream_), cudaStreamCaptureModeThreadLocal);
  if (e == cudaSuccess) return {};
  (void)cudaGetLastError();
  return cuda_error("cudaStreamBeginCapture", e, __FILE__, __LINE__);
}

Result<void*> CudaDevice::end_capture() {
  cudaGraph_t graph = nullptr;
  cudaError_t e = cudaStreamEndCapture(static_cast<cudaStream_t>(stream_), &graph);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    if (graph) cudaGraphDestroy(graph);
    return cuda_error("cudaStreamEndCapture", e, __FILE__, __LINE__);
  }
  cudaGraphExec_t exec = nullptr;
  e = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return cuda_error("cudaGraphInstantiate", e, __FILE__, __LINE__);
  }
  return static_cast<void*>(exec);
}

Status CudaDevice::launch_graph(void* graph) {
  CHORUS_CUDA_CHECK(cudaSetDevice(device_));
  CHORUS_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph), static_cast<cudaStream_t>(stream_)));
  return {};
}

void CudaDevice::destroy_graph(void* graph) {
  if (graph) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(graph));
}

std::string CudaDevice::describe() const {
  return "cuda " + name_ + " (sm_" + std::to_string(cc_major_) + std::to_string(cc_minor_) + ", " +
         gib(total_bytes_) + "), pool " + gib(pool_bytes_);
}

Status cuda_gemm_bf16(CudaDevice& dev, const void* w, const void* x, float* y, int64_t m, int64_t n,
                      int64_t k) {
  if (m < 1 || n < 0 || k < 1 || m > INT32_MAX || n > INT32_MAX || k > INT32_MAX)
    return make_error(Errc::invalid_argument, "cuda gemm: shapes m " + std::to_string(m) + ", n " +
                                                  std::to_string(n) + ", k " + std::to_string(k));
  if (n == 0) return {};
  // Runs on the calling thread's current device, as the ops do (no cudaSetDevice here: this is
  // called inside graph captures).
  // Row-major Y [n][m] is column-major Y^T [m][n] = W [m][k] (column-major W^T: op T) x X^T.
  const float alpha = 1.0f, beta = 0.0f;
  CHORUS_CUBLAS_CHECK(cublasGemmEx(static_cast<cublasHandle_t>(dev.cublas()), CUBLAS_OP_T, CUBLAS_OP_N,
                                   static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), &alpha, w,
                                   CUDA_R_16BF, static_cast<int>(k), x, CUDA_R_16BF, static_cast<int>(k),
                                   &beta, y, CUDA_R_32F, static_cast<int>(m), CUBLAS_COMPUTE_32F,
                                   CUBLAS_GEMM_DEFAULT));
  return {};
}

Status cuda_affine_f32_batched(CudaDevice& dev, const float* X, const float* A, const float* Y, float* out,
                               int64_t m, int64_t k, int64_t n, int64_t stride_x, int64_t stride_a,
                               int64_t stride_y, int64_t stride_out, int batch) {
  if (m < 1 || k < 1 || n < 1 || batch < 0 || m > INT32_MAX || k > INT32_MAX || n > INT32_MAX)
    return make_error(Errc::invalid_argument, "cuda affine: shapes m " + std::to_string(m) + ", k " +
                                                  std::to_string(k) + ", n " + std::to_string(n) +
                                                  ", batch " + std::to_string(batch));
  if (out == X || out == A)
    return make_error(Errc::invalid_argument, "cuda affine: the output must not alias X or A");
  if (batch == 0) return {};
  auto st = static_cast<cudaStream_t>(dev.stream());
  float beta = 0.0f;
  if (Y) {  // out <- Y first (a strided copy per matrix), then out += X A
    const size_t bytes = static_cast<size_t>(m) * static_cast<size_t>(n) * sizeof(float);
    if (stride_out < m * n && batch > 1)
      return make_error(Errc::invalid_argument, "cuda affine: output matrices overlap (stride " +
                                                    std::to_string(stride_out) + " < " +
                                                    std::to_string(m * n) + ")");
    if (out != Y) {
      if (stride_y >= m * n || batch == 1)
        CHORUS_CUDA_CHECK(cudaMemcpy2DAsync(out, static_cast<size_t>(stride_out) * sizeof(float), Y,
                                            static_cast<size_t>(std::max(stride_y, m * n)) * sizeof(float),
                                            bytes, static_cast<size_t>(batch), cudaMemcpyDeviceToDevice, st));
      else  // one addend for every matrix (or overlapping ones): a copy each
        for (int i = 0; i < batch; ++i)
          CHORUS_CUDA_CHECK(
              cudaMemcpyAsync(out + i * stride_out, Y + i * stride_y, bytes, cudaMemcpyDeviceToDevice, st));
    }
    beta = 1.0f;
  }
  // Row-major out [m][n] = X [m][k] A [k][n] is column-major out^T = A^T X^T: cuBLAS's (n, m, k)
  // with A first.
  const float alpha = 1.0f;
  CHORUS_CUBLAS_CHECK(cublasSgemmStridedBatched(
      static_cast<cublasHandle_t>(dev.cublas()), CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(n),
      static_cast<int>(m), static_cast<int>(k), &alpha, A, static_cast<int>(n), stride_a, X,
      static_cast<int>(k), stride_x, &beta, out, static_cast<int>(n), stride_out, batch));
  return {};
}

}  // namespace chorus
