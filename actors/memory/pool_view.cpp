#include "actors/memory/pool_view.h"

namespace chorus {

int64_t StoreView::n_pages() const {
  return store_.kv().n_pages();
}
int64_t StoreView::n_free() const {
  return store_.kv().n_free();
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
  return s;
}

}  // namespace chorus
