#include "engine/step/block_store.h"

namespace chorus {

BlockId BlockStore::create(std::string name) {
  Block b;
  b.live = true;
  b.name = std::move(name);
  blocks_.push_back(std::move(b));
  return static_cast<BlockId>(blocks_.size() - 1);
}

bool BlockStore::is_live(BlockId id) const {
  return id >= 0 && static_cast<size_t>(id) < blocks_.size() && blocks_[static_cast<size_t>(id)].live;
}

Result<Block*> BlockStore::get(BlockId id) {
  auto b = static_cast<const BlockStore*>(this)->get(id);
  if (!b) return b.error();
  return const_cast<Block*>(*b);
}

Result<const Block*> BlockStore::get(BlockId id) const {
  if (id < 0 || static_cast<size_t>(id) >= blocks_.size())
    return make_error(Errc::not_found, "block " + std::to_string(id) + " does not exist");
  const Block& b = blocks_[static_cast<size_t>(id)];
  if (!b.live) return make_error(Errc::not_found, "block " + std::to_string(id) + " was freed");
  return &b;
}

Status BlockStore::check_free(BlockId id, const char* what) {
  auto b = get(id);
  if (!b) return b.error();
  if ((*b)->holds > 0)
    return make_error(Errc::invalid_argument, std::string("cannot ") + what + " block " + std::to_string(id) +
                                                  ": " + std::to_string((*b)->holds) +
                                                  " pending request(s) still use it");
  return Status::success();
}

Status BlockStore::free(BlockId id) {
  if (Status s = check_free(id, "free"); !s.ok()) return s;
  Block& b = blocks_[static_cast<size_t>(id)];
  for (Extent& e : b.extents) kv_.release(e.kv);
  b = Block{};
  return Status::success();
}

Status BlockStore::clear(BlockId id) {
  if (Status s = check_free(id, "clear"); !s.ok()) return s;
  Block& b = blocks_[static_cast<size_t>(id)];
  for (Extent& e : b.extents) kv_.release(e.kv);
  b.extents.clear();
  b.tokens.clear();
  return Status::success();
}

Result<BlockId> BlockStore::merge(BlockId a, BlockId b, std::string name) {
  for (BlockId x : {a, b}) {
    auto blk = get(x);
    if (!blk) return blk.error();
    if ((*blk)->n_cached() != static_cast<int64_t>((*blk)->tokens.size()))
      return make_error(Errc::invalid_argument,
                        "cannot merge block " + std::to_string(x) + " while tokens are pending");
  }
  const BlockId m = create(std::move(name));
  Block& out = blocks_[static_cast<size_t>(m)];
  int64_t shift = 0;
  for (BlockId x : {a, b}) {
    const Block& src = blocks_[static_cast<size_t>(x)];
    for (const Extent& e : src.extents) {
      Extent copy;
      copy.first = shift + e.first;
      kv_.share_prefix(e.kv, e.kv.n_tokens, &copy.kv);
      out.extents.push_back(std::move(copy));
    }
    out.tokens.insert(out.tokens.end(), src.tokens.begin(), src.tokens.end());
    shift += static_cast<int64_t>(src.tokens.size());
  }
  return m;
}

Result<BlockId> BlockStore::fork(BlockId a, int64_t n, std::string name) {
  auto src = get(a);
  if (!src) return src.error();
  if (n < 0 || n > (*src)->n_cached())
    return make_error(Errc::out_of_range, "cannot fork " + std::to_string(n) + " tokens of block " +
                                              std::to_string(a) + ", which has " +
                                              std::to_string((*src)->n_cached()) + " cached");
  for (const Extent& e : (*src)->extents)
    if (e.kv.linear && e.first < n && n < e.first + e.kv.n_tokens)
      return make_error(
          Errc::unsupported,
          "cannot fork block " + std::to_string(a) + " at token " + std::to_string(n) +
              ": the cut falls inside a run of a hybrid model, whose linear layers keep one state per "
              "run, not per token (fork at the end of a run, or write the prefix to a new block)");
  const BlockId f = create(std::move(name));
  Block& out = blocks_[static_cast<size_t>(f)];
  const Block& in = blocks_[static_cast<size_t>(a)];
  for (const Extent& e : in.extents) {
    if (e.first >= n) break;
    Extent copy;
    copy.first = e.first;
    kv_.share_prefix(e.kv, std::min(e.kv.n_tokens, n - e.first), &copy.kv);
    out.extents.push_back(std::move(copy));
  }
  out.tokens.assign(in.tokens.begin(), in.tokens.begin() + n);
  return f;
}

Result<Extent*> BlockStore::prepare_write(BlockId id, int64_t n) {
  auto blk = get(id);
  if (!blk) return blk.error();
  Block& b = **blk;
  if (b.extents.empty()) b.extents.push_back(Extent{});
  Extent* e = &b.extents.back();
  const int64_t local = e->kv.n_tokens;
  // Keep appending to the last extent: its pages past `local` are new (private), and the page
  // holding `local` is copied first if another block shares it (invariant 3).
  if (Status s = kv_.reserve(e->kv, local + n); !s.ok()) return s.error();
  if (local % KvCache::page_size() != 0)
    if (Status s = kv_.copy_on_write(e->kv, local, n_layer_); !s.ok()) return s.error();
  return e;
}

size_t BlockStore::n_blocks() const {
  size_t n = 0;
  for (const Block& b : blocks_) n += b.live ? 1 : 0;
  return n;
}

}  // namespace chorus
