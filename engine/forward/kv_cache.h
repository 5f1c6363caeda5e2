// The paged KV cache: a pool of fixed-size pages of kKvPageSize (16) token positions, each
// holding K and V for every layer, allocated once up front. A sequence owns an ordered list of
// pages; position p of a sequence lives in page pages[p / 16], slot p % 16.
// Within a page and layer, K is dimension-major ([kv_dim][16]: one dimension of 16 positions is
// one vector) and V position-major ([16][kv_dim]); see AttentionArgs.
//
// Invariants:
//  1. A page is free (reference count 0, on the free list) or held by one or more sequences
//     (count = number of sequences listing it). Shared pages are read-only for all holders:
//     a holder that must write into one first takes a private copy (copy_on_write).
//  2. n_free() + pages held == n_pages(), always.
// Thread-safety: not thread-safe; owned by one engine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "kernels/cpu/cpu_kernels.h"

namespace chorus {

class LinearSlots;

struct ModelConfig;
struct LinearState;

struct SequenceKv {
  std::vector<int32_t> pages;  // page ids, in position order
  int64_t n_tokens = 0;        // positions written so far
  // Hybrid models: the Gated DeltaNet layers' per-block state (engine/forward/linear_state.h), created
  // by the first forward that writes the sequence. Shared (read-only) by sequences that share
  // all of its tokens; a writer takes a private copy first.
  std::shared_ptr<LinearState> linear;
};

// Where the page data lives when it is not in this cache's host memory (the CUDA runner's
// device pools): KvCache keeps the bookkeeping and asks the store to move the data. Page ids
// are KvCache's.
class KvPageStore {
 public:
  virtual ~KvPageStore() = default;
  virtual size_t page_bytes() const = 0;  // one page, every KV layer
  virtual Status copy_page(int32_t dst, int32_t src) = 0;
  // `pages` to / from host memory, page_bytes() each, in the order given.
  virtual Status save_pages(std::span<const int32_t> pages, std::byte* out) = 0;
  virtual Status load_pages(std::span<const int32_t> pages, const std::byte* in) = 0;
};

class KvCache {
 public:
  // Allocates n_pages pages of `type` (KvType: f32 exact, f16 half the bytes). Errors:
  // Errc::out_of_memory naming the bytes asked for.
  static Result<KvCache> create(const ModelConfig& config, int64_t n_pages, KvType type = KvType::f32);
  // Bookkeeping only: the data lives in `store` (which must outlive the cache), and k()/v()
  // are not to be called.
  static Result<KvCache> create(const ModelConfig& config, int64_t n_pages, KvPageStore* store);

  static constexpr int page_size() { return kKvPageSize; }
  // Pages that `tokens` positions take (a sequence starts a fresh page).
  static constexpr int64_t pages_for(int64_t tokens) { return (tokens + kKvPageSize - 1) / kKvPageSize; }
  int64_t n_pages() const { return n_pages_; }
  int64_t n_free() const { return static_cast<int64_t>(free_.size()); }
  size_t bytes() const { return bytes_; }
  KvType type() const { return type_; }
  // Hybrid models: the runner's linear-state slots, which the sequences' linear states hold
  // (engine/forward/linear_slots.h); null when nothing limits them. Set by ForwardPass.
  void set_linear_slots(const LinearSlots* s) { slots_ = s; }
  const LinearSlots* linear_slots() const { return slots_; }

  // Grows `seq` to hold `n_tokens` positions. Errors: Errc::out_of_memory when the pool runs
  // out (the sequence keeps the pages it had).
  Status reserve(SequenceKv& seq, int64_t n_tokens);
  // Drops the sequence's hold on all its pages (a page whose count reaches 0 returns to the
  // pool) and its linear-layer state.
  void release(SequenceKv& seq);
  // Makes `to` a view of the first n positions of `from`, sharing its pages (counts go up) and,
  // when n covers all of `from`, its linear-layer state.
  // REQUIRES: to is empty; n <= from.n_tokens; a sequence with linear state is shared whole.
  void share_prefix(const SequenceKv& from, int64_t n, SequenceKv* to);
  // Before writing position `pos` of `seq`: if the page holding it is shared, replaces it in
  // `seq` by a private copy (all layers). Errors: Errc::out_of_memory when no page is free.
  Status copy_on_write(SequenceKv& seq, int64_t pos, int n_layer);
  int32_t refs(int32_t page) const { return refs_[static_cast<size_t>(page)]; }

  // Page data, wherever it lives: the bytes of one page (every KV layer), and pages copied to
  // host memory and back (offload), page_bytes() each in the order given. Errors come from
  // the store (a device copy that failed).
  size_t page_bytes() const;
  // What save_pages() writes, for checking that pages saved by one cache can load into another:
  // "f32/L<layers>/D<kv dim>" (or "f16/...") here, "device/<bytes>" for a device's pages (a CPU
  // and a GPU cache, or an f32 and an f16 one, do not exchange pages).
  std::string page_format() const;
  Status save_pages(std::span<const int32_t> pages, std::byte* out) const;
  Status load_pages(std::span<const int32_t> pages, const std::byte* in);

  // One KV layer's keys in one page, [kv_dim][16], and values, [16][kv_dim]. `layer` is the
  // KV slot (ModelConfig::kv_layer): hybrid models keep no KV for their linear layers. k() and
  // v() for an f32 cache, k_f16() and v_f16() for an f16 one.
  float* k(int layer, int32_t page) { return reinterpret_cast<float*>(at(layer, page, 0)); }
  float* v(int layer, int32_t page) { return reinterpret_cast<float*>(at(layer, page, 1)); }
  uint16_t* k_f16(int layer, int32_t page) { return reinterpret_cast<uint16_t*>(at(layer, page, 0)); }
  uint16_t* v_f16(int layer, int32_t page) { return reinterpret_cast<uint16_t*>(at(layer, page, 1)); }

 private:
  // Bytes of one layer's keys (or values) in one page.
  size_t slab_bytes() const {
    return static_cast<size_t>(kKvPageSize) * static_cast<size_t>(kv_dim_) * elem_;
  }
  std::byte* at(int layer, int32_t page, int kv) const {
    return data_.get() +
           ((static_cast<size_t>(layer) * 2 + static_cast<size_t>(kv)) * static_cast<size_t>(n_pages_) +
            static_cast<size_t>(page)) *
               slab_bytes();
  }

  int64_t n_pages_ = 0;
  int kv_dim_ = 0;
  int n_kv_layer_ = 0;
  KvType type_ = KvType::f32;
  size_t elem_ = sizeof(float);   // bytes per value
  KvPageStore* store_ = nullptr;  // the data's home when not data_
  const LinearSlots* slots_ = nullptr;
  size_t bytes_ = 0;
  std::unique_ptr<std::byte[]> data_;  // [n_kv_layer][K, V][n_pages][16 * kv_dim], or none (store_)
  std::vector<int32_t> free_;          // free page ids (a stack)
  std::vector<int32_t> refs_;          // [n_pages] holders of each page
};

}  // namespace chorus
