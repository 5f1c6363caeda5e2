// Cache blocks: append-only token logs with the KV derived from them, shared between many
// concurrent generations through views (AsyncLLM's CacheBlock).
//
// A block's KV is a list of extents: runs of consecutive positions whose keys are rotated at
// extent-local positions 0..n-1, each holding KV-cache pages. A block written from scratch has
// one extent; merge and fork build blocks from other blocks' extents by sharing their pages, so
// they copy nothing (attention rotates queries per extent, see AttentionSegment).
//
// Invariants:
//  1. The token log is the source of truth: KV covers log positions [0, n_cached) with
//     n_cached <= log size; the engine brings n_cached up to the log as it runs tokens.
//  2. Extents tile [0, n_cached) in order: extent e starts where e-1 ends.
//  3. A page shared by several extents is read-only; a write into it copies it first.
//  4. A block is freed only when nothing holds it (views of pending requests, the engine's
//     writers); freeing a held block is an error, not a crash, and changes nothing.
//  5. Freeing every block returns the page pool to exactly its free count before they existed.
//
// Thread-safety: none; owned by one Engine (later: by the memory actor).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/forward/kv_cache.h"
#include "engine/tokenizer/tokenizer.h"

namespace chorus {

using BlockId = int32_t;

struct Extent {
  int64_t first = 0;  // block position of the extent's first token
  SequenceKv kv;      // pages; kv.n_tokens = positions cached in this extent
};

struct Block {
  std::vector<TokenId> tokens;     // the log
  std::vector<Extent> extents;     // KV of positions [0, n_cached)
  int holds = 0;                   // pending requests holding it
  std::vector<float> last_logits;  // next-token logits after the last cached token, if known
  bool live = false;
  std::string name;  // for messages ("prompt", "thoughts", ...)
  // Paused (Engine::pause): no KV pages; `offloaded` holds the KV pages copied to host memory
  // (KvCache::save_pages: whole pages, in position order) when paused in offload mode, else
  // it is rebuilt from the log.
  bool paused = false;
  int64_t paused_cached = 0;
  std::vector<std::byte> offloaded;
  std::shared_ptr<LinearState> offloaded_linear;  // hybrid models, offload mode

  int64_t n_cached() const { return extents.empty() ? 0 : extents.back().first + extents.back().kv.n_tokens; }
};

class BlockStore {
 public:
  BlockStore(KvCache& kv, int n_layer) : kv_(kv), n_layer_(n_layer) {}
  BlockStore(const BlockStore&) = delete;
  BlockStore& operator=(const BlockStore&) = delete;

  BlockId create(std::string name = {});
  // Errors: Errc::not_found (no such live block); Errc::invalid_argument when held.
  Status free(BlockId id);
  Status clear(BlockId id);  // drops tokens and KV; the block stays. Same errors as free().
  // A new block equivalent to [a, b]: a's extents then b's, pages shared. Both must be fully
  // cached (no pending tokens). Errors name the block.
  Result<BlockId> merge(BlockId a, BlockId b, std::string name = {});
  // A new block holding the first n tokens of a (copy-on-write sharing of a prefix).
  Result<BlockId> fork(BlockId a, int64_t n, std::string name = {});

  // Looks a block up. Errors: Errc::not_found naming the id (and "freed" if it was).
  Result<Block*> get(BlockId id);
  Result<const Block*> get(BlockId id) const;
  bool is_live(BlockId id) const;
  void hold(BlockId id) { blocks_[static_cast<size_t>(id)].holds++; }
  void unhold(BlockId id) { blocks_[static_cast<size_t>(id)].holds--; }

  // Prepares `id` to receive KV for positions [n_cached, n_cached + n): the last extent grows
  // (a shared page is copied first), or a new extent starts when the last one is shared with
  // another block. Returns the extent that receives them. Errors: Errc::out_of_memory.
  Result<Extent*> prepare_write(BlockId id, int64_t n);

  size_t n_blocks() const;                                                // live blocks
  BlockId n_ids() const { return static_cast<BlockId>(blocks_.size()); }  // ids given so far: [0, n_ids)
  KvCache& kv() { return kv_; }
  const KvCache& kv() const { return kv_; }

 private:
  Status check_free(BlockId id, const char* what);

  KvCache& kv_;
  int n_layer_;
  std::vector<Block> blocks_;  // indexed by id; ids are not reused
};

}  // namespace chorus
