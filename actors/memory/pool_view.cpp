#include "actors/memory/pool_view.h"

#include "engine/forward/linear_slots.h"
#include "engine/forward/linear_state.h"

namespace chorus {

int64_t StoreView::n_pages() const {
  return store_.kv().n_pages();
}
int64_t StoreView::n_free() const {
  return store_.kv().n_free();
}

int64_t StoreView::n_slots() const {
  const LinearSlots* s = store_.kv().linear_slots();
  return s ? s->capacity() : 0;
}
int64_t StoreView::n_free_slots() const {
  const LinearSlots* s = store_.kv().linear_slots();
  return s ? s->free() : 0;
}

std::optional<BlockStat> StoreView::stat(BlockId b) const {
  auto blk = store_.get(b);
  if (!blk) return std::nullopt;
  const Block& x = **blk;
  BlockStat s;
  for (const Extent& e : x.extents) s.pages += static_cast<int64_t>(e.kv.pages.size());
  s.tokens = static_cast<int64_t>(x.tokens.size());
  s.cached = x.n_cached();
  s.holds = x.holds;
  s.paused = x.paused;
  s.paused_cached = x.paused_cached;
  if (const LinearSlots* slots = store_.kv().linear_slots())
    for (const Extent& e : x.extents) s.slot = s.slot || (e.kv.linear && slots->holds(*e.kv.linear));
  return s;
}

}  // namespace chorus
