// What the memory side of a node knows of its KV pool: the pool's size, its free pages, and per
// block the numbers the room gate and the program table count with. The live view reads the
// engine's block store (the batcher's thread); a snapshot holds a copy (tests, and the numbers
// a batcher reports after a step).
#pragma once

#include <cstdint>
#include <map>
#include <optional>

#include "engine/step/block_store.h"

namespace chorus {

struct BlockStat {
  int64_t pages = 0;   // KV pages its extents hold now
  int64_t tokens = 0;  // tokens in its log
  int64_t cached = 0;  // of which have KV
  int holds = 0;       // pending requests naming it
  bool paused = false;
  int64_t paused_cached = 0;  // paused: the positions a restore rebuilds
  bool slot = false;          // hybrid models with counted slots: it holds a linear-state slot now
};

class PoolView {
 public:
  virtual ~PoolView() = default;
  virtual int64_t n_pages() const = 0;
  virtual int64_t n_free() const = 0;
  virtual std::optional<BlockStat> stat(BlockId b) const = 0;  // nullopt: no such live block
  // Hybrid models: the linear-state slots (engine/forward/linear_slots.h); 0 of 0 when nothing
  // limits them (then nothing counts them either).
  virtual int64_t n_slots() const { return 0; }
  virtual int64_t n_free_slots() const { return 0; }
  int64_t pages(BlockId b) const {
    auto s = stat(b);
    return s ? s->pages : 0;
  }
  // What a block takes in slots: now (0 or 1), and when restored (1 once it has tokens).
  int64_t slots(BlockId b) const {
    auto s = stat(b);
    return s && s->slot ? 1 : 0;
  }
  int64_t restore_slots(BlockId b) const {
    if (n_slots() == 0) return 0;
    auto s = stat(b);
    return s && s->paused && s->paused_cached > 0 ? 1 : 0;
  }
};

// A copy of the numbers.
struct PoolSnapshot final : PoolView {
  uint64_t version = 0;  // a later snapshot of the same pool has a larger one
  int64_t pool_pages = 0, free_pages = 0;
  int64_t pool_slots = 0, free_slots = 0;
  std::map<BlockId, BlockStat> blocks;
  int64_t n_pages() const override { return pool_pages; }
  int64_t n_free() const override { return free_pages; }
  int64_t n_slots() const override { return pool_slots; }
  int64_t n_free_slots() const override { return free_slots; }
  std::optional<BlockStat> stat(BlockId b) const override {
    auto it = blocks.find(b);
    if (it == blocks.end()) return std::nullopt;
    return it->second;
  }
};

// The engine's block store as it is now. REQUIRES: used on the thread that owns the store.
class StoreView final : public PoolView {
 public:
  explicit StoreView(const BlockStore& store) : store_(store) {}
  int64_t n_pages() const override;
  int64_t n_free() const override;
  int64_t n_slots() const override;
  int64_t n_free_slots() const override;
  std::optional<BlockStat> stat(BlockId b) const override;

 private:
  const BlockStore& store_;
};

}  // namespace chorus
