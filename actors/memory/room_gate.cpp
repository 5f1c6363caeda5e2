#include "actors/memory/room_gate.h"

#include <algorithm>
#include <string>

#include "engine/forward/kv_cache.h"

namespace chorus {

int64_t RoomGate::adds(const Request& r) {
  return static_cast<int64_t>(r.tokens.size()) + (r.kind == RequestKind::generate ? r.stop.max_tokens : 0);
}

int64_t RoomGate::probe_pages(const Request& r) {
  size_t longest = 0;
  for (const auto& c : r.candidates) longest = std::max(longest, c.size());
  return KvCache::pages_for(static_cast<int64_t>(r.tokens.size() + longest));
}

int64_t RoomGate::reserved_end(BlockId b, const PoolView& pool) const {
  int64_t n = 0;
  if (auto s = pool.stat(b)) n = s->tokens;
  if (auto it = block_res_.find(b); it != block_res_.end()) n = std::max(n, it->second.end);
  return n;
}

int64_t RoomGate::outstanding(BlockId b, const PoolView& pool) const {
  auto it = block_res_.find(b);
  if (it == block_res_.end()) return 0;
  return std::max<int64_t>(0, KvCache::pages_for(it->second.end) - pool.pages(b));
}

int64_t RoomGate::growth_pages(const Request& r, const PoolView& pool) const {
  if (r.kind == RequestKind::append) return 0;
  if (r.kind == RequestKind::probe) return probe_pages(r);
  const int64_t end = reserved_end(r.write_to, pool);
  return KvCache::pages_for(end + adds(r)) - KvCache::pages_for(end);
}

int64_t RoomGate::gate_pages(const Request& r, const PoolView& pool) const {
  if (r.kind == RequestKind::append) return 0;
  if (r.kind == RequestKind::probe) return probe_pages(r);
  const int64_t after = KvCache::pages_for(reserved_end(r.write_to, pool) + adds(r)) - pool.pages(r.write_to);
  return std::max<int64_t>(0, after) - outstanding(r.write_to, pool);
}

int64_t RoomGate::room(const PoolView& pool) const {
  int64_t n = pool.n_free();
  for (const auto& [b, x] : block_res_) n -= outstanding(b, pool);
  for (const auto& [id, x] : reserved_) n -= x.probe_pages;
  return n;
}

int64_t RoomGate::gate_slots(const Request& r, const PoolView& pool) const {
  if (pool.n_slots() == 0 || r.kind == RequestKind::append) return 0;
  if (r.kind == RequestKind::probe) return 1;
  if (pool.slots(r.write_to) > 0) return 0;
  auto it = block_res_.find(r.write_to);
  return it != block_res_.end() && it->second.slot ? 0 : 1;
}

int64_t RoomGate::slot_room(const PoolView& pool) const {
  int64_t n = pool.n_free_slots();
  for (const auto& [b, x] : block_res_) n -= slot_kept(b, x, pool) ? 1 : 0;
  for (const auto& [id, x] : reserved_) n -= x.probe_slot ? 1 : 0;
  return n;
}

std::optional<Error> RoomGate::never_fits(const Request& r, std::span<const BlockId> program_blocks,
                                          const PoolView& pool) const {
  const int64_t need = gate_pages(r, pool), size = pool.n_pages();
  int64_t own = 0;
  for (BlockId b : program_blocks) own += pool.pages(b) + outstanding(b, pool);
  if (need + own > size)
    return make_error(Errc::out_of_memory, "KV cache too small: the request may write " +
                                               std::to_string(need) + " pages and its program holds " +
                                               std::to_string(own) + "; the pool has " +
                                               std::to_string(size));
  const int64_t need_slots = gate_slots(r, pool);
  if (need_slots == 0) return std::nullopt;
  int64_t own_slots = blocks_slot_kept(program_blocks, pool);
  for (BlockId b : program_blocks) own_slots += pool.slots(b);
  if (need_slots + own_slots <= pool.n_slots()) return std::nullopt;
  return make_error(Errc::out_of_memory,
                    "too few linear-state slots: the request needs one and its program holds " +
                        std::to_string(own_slots) + "; the node has " + std::to_string(pool.n_slots()) +
                        " (--linear-slots)");
}

int64_t RoomGate::end_after(const Request& r, const PoolView& pool) const {
  return r.kind == RequestKind::probe ? 0 : reserved_end(r.write_to, pool) + adds(r);
}

void RoomGate::reserve(RequestId id, const Request& r, uint64_t program, int64_t end, bool slot) {
  if (r.kind == RequestKind::probe) {
    reserved_[id] = Reservation{-1, probe_pages(r), slot, program};
    return;
  }
  if (r.kind == RequestKind::append) return;
  BlockReservation& br = block_res_[r.write_to];
  br.end = end;
  ++br.writers;
  br.slot = br.slot || slot;
  reserved_[id] = Reservation{r.write_to, 0, false, program};
}

bool RoomGate::release(RequestId id) {
  auto it = reserved_.find(id);
  if (it == reserved_.end()) return false;
  if (it->second.block >= 0)
    if (auto b = block_res_.find(it->second.block); b != block_res_.end() && --b->second.writers == 0)
      block_res_.erase(b);
  reserved_.erase(it);
  return true;
}

int64_t RoomGate::kept_for(uint64_t program, std::span<const BlockId> program_blocks,
                           const PoolView& pool) const {
  int64_t n = 0;
  for (BlockId b : program_blocks) n += outstanding(b, pool);
  for (const auto& [id, x] : reserved_)
    if (x.program == program) n += x.probe_pages;
  return n;
}

int64_t RoomGate::slots_kept_for(uint64_t program, std::span<const BlockId> program_blocks,
                                 const PoolView& pool) const {
  int64_t n = blocks_slot_kept(program_blocks, pool);
  for (const auto& [id, x] : reserved_)
    if (x.program == program && x.probe_slot) ++n;
  return n;
}

int64_t RoomGate::blocks_slot_kept(std::span<const BlockId> blocks, const PoolView& pool) const {
  int64_t n = 0;
  for (BlockId b : blocks)
    if (auto it = block_res_.find(b); it != block_res_.end() && slot_kept(b, it->second, pool)) ++n;
  return n;
}

}  // namespace chorus
