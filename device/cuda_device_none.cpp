// The CUDA device in a build without the CUDA targets: create() says so.
#include "device/cuda_device.h"

namespace chorus {

Result<std::unique_ptr<CudaDevice>> CudaDevice::create(const CudaDeviceOptions&) {
  return make_error(Errc::unsupported,
                    "this chorus was built without CUDA (configure with nvcc present, CHORUS_CUDA=ON)");
}
CudaDevice::~CudaDevice() = default;
Result<void*> CudaDevice::alloc(int64_t, const std::string&) {
  return make_error(Errc::unsupported, "no CUDA");
}
void CudaDevice::reset_to(int64_t) {}
Status CudaDevice::bind() const {
  return make_error(Errc::unsupported, "no CUDA");
}
Status CudaDevice::upload(void*, const void*, int64_t) {
  return make_error(Errc::unsupported, "no CUDA");
}
Status CudaDevice::upload_async(void*, const void*, int64_t) {
  return make_error(Errc::unsupported, "no CUDA");
}
Status CudaDevice::download(void*, const void*, int64_t) {
  return make_error(Errc::unsupported, "no CUDA");
}
Status CudaDevice::download_async(void*, const void*, int64_t) {
  return make_error(Errc::unsupported, "no CUDA");
}
Status CudaDevice::copy(void*, const void*, int64_t) {
  return make_error(Errc::unsupported, "no CUDA");
}
Status CudaDevice::zero(void*, int64_t) {
  return make_error(Errc::unsupported, "no CUDA");
}
Status CudaDevice::sync(const std::string&) {
  return make_error(Errc::unsupported, "no CUDA");
}
Status CudaDevice::begin_capture() {
  return make_error(Errc::unsupported, "no CUDA");
}
Result<void*> CudaDevice::end_capture() {
  return make_error(Errc::unsupported, "no CUDA");
}
Status CudaDevice::launch_graph(void*) {
  return make_error(Errc::unsupported, "no CUDA");
}
void CudaDevice::destroy_graph(void*) {}
std::string CudaDevice::describe() const {
  return "cuda (not built)";
}
Status cuda_gemm_bf16(CudaDevice&, const void*, const void*, float*, int64_t, int64_t, int64_t) {
  return make_error(Errc::unsupported, "no CUDA");
}
Status cuda_affine_f32_batched(CudaDevice&, const float*, const float*, const float*, float*, int64_t,
                               int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int) {
  return make_error(Errc::unsupported, "no CUDA");
}

}  // namespace chorus
