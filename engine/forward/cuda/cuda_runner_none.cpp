// CudaRunner in a build without CUDA targets (no nvcc at configure time): every entry point says
// so, and `--device auto` falls back to the CPU.
#include "engine/forward/cuda/cuda_runner.h"

namespace chorus {

struct CudaRunner::Impl {};
CudaRunner::CudaRunner(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaRunner::~CudaRunner() = default;
Status CudaRunner::check(const ModelConfig&, const Weights&) {
  return make_error(Errc::unsupported, "this chorus was built without CUDA");
}
int CudaRunner::max_tokens() const {
  return 0;
}
void CudaRunner::set_graphs(bool) {}
int CudaRunner::graphs() const {
  return 0;
}
CudaRunner::ChainReads CudaRunner::chain_reads() const {
  return {};
}
void CudaRunner::set_chain_reads(bool) {}
LinearSlots* CudaRunner::linear_slots() {
  return nullptr;
}
Status CudaRunner::offload_linear(LinearState&) {
  return make_error(Errc::unsupported, "this chorus was built without CUDA");
}
Status CudaRunner::load_linear(LinearState&) {
  return make_error(Errc::unsupported, "this chorus was built without CUDA");
}
size_t CudaRunner::page_bytes() const {
  return 0;
}
Status CudaRunner::copy_page(int32_t, int32_t) {
  return make_error(Errc::unsupported, "this chorus was built without CUDA");
}
Status CudaRunner::save_pages(std::span<const int32_t>, std::byte*) {
  return make_error(Errc::unsupported, "this chorus was built without CUDA");
}
Status CudaRunner::load_pages(std::span<const int32_t>, const std::byte*) {
  return make_error(Errc::unsupported, "this chorus was built without CUDA");
}
Result<std::unique_ptr<CudaRunner>> CudaRunner::create(const ModelConfig&, const Weights&, CudaDevice&,
                                                       const CudaRunnerOptions&) {
  return make_error(Errc::unsupported, "this chorus was built without CUDA");
}
Status CudaRunner::forward(std::span<const BatchToken>, std::span<SequenceKv* const>, float*,
                           std::span<const View>, std::span<const std::optional<PlannedDraw>>, TokenId*) {
  return make_error(Errc::unsupported, "this chorus was built without CUDA");
}
std::string CudaRunner::describe() const {
  return "cuda (not built)";
}

}  // namespace chorus
