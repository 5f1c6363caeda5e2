#include "actors/memory/program_table.h"

#include <algorithm>

#include "engine/forward/kv_cache.h"

namespace chorus {

ProgramRecord* ProgramTable::find(uint64_t id) {
  auto it = programs_.find(id);
  return it == programs_.end() ? nullptr : &it->second;
}

const ProgramRecord* ProgramTable::find(uint64_t id) const {
  auto it = programs_.find(id);
  return it == programs_.end() ? nullptr : &it->second;
}

uint64_t ProgramTable::hold_owner(std::span<const BlockId> blocks, bool paused_only) const {
  for (const auto& [id, p] : programs_) {
    if (!p.hold || (paused_only && p.state != ProgramState::paused)) continue;
    for (BlockId b : p.blocks)
      if (std::find(blocks.begin(), blocks.end(), b) != blocks.end()) return id;
  }
  return 0;
}

void ProgramTable::forget_block(BlockId b) {
  for (auto& [id, p] : programs_) std::erase(p.blocks, b);
}

ProgramTable::Holdings ProgramTable::holdings(uint64_t id, const PoolView& pool) const {
  Holdings h;
  if (const ProgramRecord* p = find(id))
    for (BlockId b : p->blocks)
      if (auto s = pool.stat(b)) {
        h.pages += s->pages;
        h.tokens += s->tokens;
        h.pending += s->holds;
        h.slots += s->slot ? 1 : 0;
      }
  return h;
}

int64_t ProgramTable::restore_pages(uint64_t id, const PoolView& pool) const {
  int64_t need = 0;
  if (const ProgramRecord* p = find(id))
    for (BlockId b : p->blocks)
      if (auto s = pool.stat(b); s && s->paused) need += KvCache::pages_for(s->paused_cached);
  return need;
}

int64_t ProgramTable::restore_slots(uint64_t id, const PoolView& pool) const {
  int64_t need = 0;
  if (const ProgramRecord* p = find(id))
    for (BlockId b : p->blocks) need += pool.restore_slots(b);
  return need;
}

}  // namespace chorus
