#include "engine/forward/kv_cache.h"

#include "engine/sched/program_state.h"

#include <algorithm>
#include <cstring>
#include <new>

#include "engine/forward/linear_state.h"
#include "engine/model/model_config.h"

namespace chorus {

static_assert(kKvPageSize == kPageTokens, "the program policy counts pages of the KV cache's size");

Result<KvCache> KvCache::create(const ModelConfig& c, int64_t n_pages, KvPageStore* store) {
  if (n_pages <= 0) return make_error(Errc::invalid_argument, "KV cache needs at least one page");
  if (!store) return make_error(Errc::invalid_argument, "KV cache: no page store given");
  KvCache kv;
  kv.n_pages_ = n_pages;
  kv.kv_dim_ = c.kv_dim();
  kv.n_kv_layer_ = c.n_kv_layer;
  kv.store_ = store;
  kv.bytes_ = 0;
  kv.refs_.assign(static_cast<size_t>(n_pages), 0);
  kv.free_.reserve(static_cast<size_t>(n_pages));
  for (int64_t p = n_pages - 1; p >= 0; --p) kv.free_.push_back(static_cast<int32_t>(p));
  return kv;
}

Result<KvCache> KvCache::create(const ModelConfig& c, int64_t n_pages, KvType type) {
  constexpr int page_size = kKvPageSize;
  if (n_pages <= 0) return make_error(Errc::invalid_argument, "KV cache needs at least one page");
  KvCache kv;
  kv.n_pages_ = n_pages;
  kv.kv_dim_ = c.kv_dim();
  kv.n_kv_layer_ = c.n_kv_layer;
  kv.type_ = type;
  kv.elem_ = type == KvType::f16 ? sizeof(uint16_t) : sizeof(float);
  const double values =
      static_cast<double>(c.n_kv_layer) * 2 * static_cast<double>(n_pages) * page_size * c.kv_dim();
  const double bytes = values * static_cast<double>(kv.elem_);
  if (bytes > 1e15)
    return make_error(Errc::out_of_memory, "KV cache of " + std::to_string(static_cast<int64_t>(n_pages)) +
                                               " pages would need " + std::to_string(bytes / 1e9) + " GB");
  kv.bytes_ = static_cast<size_t>(bytes);
  kv.data_.reset(new (std::nothrow) std::byte[kv.bytes_]);
  if (!kv.data_)
    return make_error(Errc::out_of_memory, "cannot allocate the KV cache: " + std::to_string(kv.bytes_) +
                                               " bytes (" + std::to_string(n_pages) + " pages of " +
                                               std::to_string(page_size) + " positions) were refused");
  kv.refs_.assign(static_cast<size_t>(n_pages), 0);
  kv.free_.reserve(static_cast<size_t>(n_pages));
  for (int64_t p = n_pages - 1; p >= 0; --p) kv.free_.push_back(static_cast<int32_t>(p));
  return kv;
}

Status KvCache::reserve(SequenceKv& seq, int64_t n_tokens) {
  const int64_t need = (n_tokens + kKvPageSize - 1) / kKvPageSize;
  const int64_t more = need - static_cast<int64_t>(seq.pages.size());
  if (more <= 0) return Status::success();
  if (more > n_free())
    return make_error(Errc::out_of_memory, "KV cache full: " + std::to_string(n_tokens) + " positions need " +
                                               std::to_string(more) + " more pages, " +
                                               std::to_string(n_free()) + " of " + std::to_string(n_pages_) +
                                               " are free");
  for (int64_t i = 0; i < more; ++i) {
    seq.pages.push_back(free_.back());
    refs_[static_cast<size_t>(free_.back())] = 1;
    free_.pop_back();
  }
  return Status::success();
}

void KvCache::release(SequenceKv& seq) {
  for (int32_t p : seq.pages)
    if (--refs_[static_cast<size_t>(p)] == 0) free_.push_back(p);
  seq.pages.clear();
  seq.n_tokens = 0;
  seq.linear.reset();
}

void KvCache::share_prefix(const SequenceKv& from, int64_t n, SequenceKv* to) {
  const int64_t n_pages = (n + kKvPageSize - 1) / kKvPageSize;
  for (int64_t i = 0; i < n_pages; ++i) {
    const int32_t p = from.pages[static_cast<size_t>(i)];
    ++refs_[static_cast<size_t>(p)];
    to->pages.push_back(p);
  }
  to->n_tokens = n;
  if (n == from.n_tokens) to->linear = from.linear;
}

size_t KvCache::page_bytes() const {
  if (store_) return store_->page_bytes();
  return static_cast<size_t>(n_kv_layer_) * 2 * slab_bytes();
}

std::string KvCache::page_format() const {
  if (store_) return "device/" + std::to_string(store_->page_bytes());
  return std::string(kv_type_name(type_)) + "/L" + std::to_string(n_kv_layer_) + "/D" +
         std::to_string(kv_dim_);
}

Status KvCache::save_pages(std::span<const int32_t> pages, std::byte* out) const {
  if (store_) return store_->save_pages(pages, out);
  const size_t bytes = slab_bytes();
  for (int32_t p : pages)
    for (int l = 0; l < n_kv_layer_; ++l)
      for (int kv = 0; kv < 2; ++kv, out += bytes) std::memcpy(out, at(l, p, kv), bytes);
  return Status::success();
}

Status KvCache::load_pages(std::span<const int32_t> pages, const std::byte* in) {
  if (store_) return store_->load_pages(pages, in);
  const size_t bytes = slab_bytes();
  for (int32_t p : pages)
    for (int l = 0; l < n_kv_layer_; ++l)
      for (int kv = 0; kv < 2; ++kv, in += bytes) std::memcpy(at(l, p, kv), in, bytes);
  return Status::success();
}

Status KvCache::copy_on_write(SequenceKv& seq, int64_t pos, int n_layer) {
  const auto idx = static_cast<size_t>(pos / kKvPageSize);
  if (idx >= seq.pages.size()) return Status::success();
  const int32_t old = seq.pages[idx];
  if (refs_[static_cast<size_t>(old)] <= 1) return Status::success();
  if (free_.empty())
    return make_error(Errc::out_of_memory,
                      "KV cache full: no free page for a copy-on-write of a shared page");
  const int32_t fresh = free_.back();
  free_.pop_back();
  refs_[static_cast<size_t>(fresh)] = 1;
  --refs_[static_cast<size_t>(old)];
  if (store_) {
    if (Status s = store_->copy_page(fresh, old); !s.ok()) {
      refs_[static_cast<size_t>(fresh)] = 0;  // undone: the sequence keeps the shared page
      ++refs_[static_cast<size_t>(old)];
      free_.push_back(fresh);
      return s;
    }
    seq.pages[idx] = fresh;
    return Status::success();
  }
  for (int l = 0; l < n_layer; ++l)
    for (int kv = 0; kv < 2; ++kv) std::memcpy(at(l, fresh, kv), at(l, old, kv), slab_bytes());
  seq.pages[idx] = fresh;
  return Status::success();
}

}  // namespace chorus
