// CudaRunner: KV pages copied within the device and to and from the host, and linear states
// offloaded and loaded (engine/forward/cuda/cuda_runner.h).
#include <string>

#include "engine/forward/cuda/cuda_runner_impl.h"

namespace chorus {

using cuda_detail::Layer;

LinearSlots* CudaRunner::linear_slots() {
  return impl_->linear ? &impl_->linear->slot_pool() : nullptr;
}
Status CudaRunner::offload_linear(LinearState& s) {
  return impl_->linear ? impl_->linear->save(s) : Status::success();
}
Status CudaRunner::load_linear(LinearState& s) {
  return impl_->linear ? impl_->linear->load(s) : Status::success();
}

// One page of one pool is page_stride elements at page * page_stride; a page's bytes on the
// host are every layer's K then V, in layer order.
size_t CudaRunner::page_bytes() const {
  const Impl& m = *impl_;
  return static_cast<size_t>(m.c.n_kv_layer) * 2 * static_cast<size_t>(m.page_stride) *
         (m.opts.kv_bf16 ? 2 : 4);
}

namespace {

Status check_pages(std::span<const int32_t> pages, int64_t n_pages, const char* what) {
  for (int32_t p : pages)
    if (p < 0 || p >= n_pages)
      return make_error(Errc::invalid_argument, std::string(what) + ": page " + std::to_string(p) +
                                                    " is outside the " + std::to_string(n_pages) +
                                                    " pages of the CUDA runner");
  return Status::success();
}

}  // namespace

Status CudaRunner::copy_page(int32_t dst, int32_t src) {
  Impl& m = *impl_;
  const int32_t both[] = {dst, src};
  CHORUS_TRY(check_pages(both, m.opts.n_pages, "copy_page"));
  const int64_t bytes = m.page_stride * (m.opts.kv_bf16 ? 2 : 4);
  for (const Layer& L : m.layers)
    for (void* pool : {L.k_pool, L.v_pool}) {
      if (!pool) continue;  // a linear layer
      auto* base = static_cast<std::byte*>(pool);
      CHORUS_TRY(m.dev.copy(base + dst * bytes, base + src * bytes, bytes));
    }
  return m.dev.sync("copy_page");
}

Status CudaRunner::save_pages(std::span<const int32_t> pages, std::byte* out) {
  Impl& m = *impl_;
  CHORUS_TRY(check_pages(pages, m.opts.n_pages, "save_pages"));
  const int64_t bytes = m.page_stride * (m.opts.kv_bf16 ? 2 : 4);
  for (int32_t p : pages)
    for (const Layer& L : m.layers)
      for (const void* pool : {L.k_pool, L.v_pool}) {
        if (!pool) continue;  // a linear layer
        CHORUS_TRY(m.dev.download_async(out, static_cast<const std::byte*>(pool) + p * bytes, bytes));
        out += bytes;
      }
  return m.dev.sync("save_pages");
}

Status CudaRunner::load_pages(std::span<const int32_t> pages, const std::byte* in) {
  Impl& m = *impl_;
  CHORUS_TRY(check_pages(pages, m.opts.n_pages, "load_pages"));
  const int64_t bytes = m.page_stride * (m.opts.kv_bf16 ? 2 : 4);
  for (int32_t p : pages)
    for (const Layer& L : m.layers)
      for (void* pool : {L.k_pool, L.v_pool}) {
        if (!pool) continue;  // a linear layer
        CHORUS_TRY(m.dev.upload_async(static_cast<std::byte*>(pool) + p * bytes, in, bytes));
        in += bytes;
      }
  return m.dev.sync("load_pages");  // `in` must outlive the copies
}

}  // namespace chorus
