#include "actors/engine_side.h"

#include <caf/all.hpp>
#include <string>

#include "actors/atoms.h"
#include "net/wire.h"

namespace chorus {

PoolSnapshot EngineSide::snapshot_pool() const {
  PoolSnapshot p;
  const BlockStore& store = engine_->blocks();
  p.pool_pages = store.kv().n_pages();
  p.free_pages = store.kv().n_free();
  p.pool_slots = pool_.n_slots();
  p.free_slots = pool_.n_free_slots();
  for (BlockId b = 0; b < store.n_ids(); ++b)
    if (auto s = pool_.stat(b)) p.blocks[b] = *s;
  return p;
}

Result<BlockSummary> EngineSide::summarize(BlockId id, bool log) {
  auto blk = engine_->blocks().get(id);
  if (!blk) return blk.error();
  return BlockSummary{id, (*blk)->name, static_cast<int64_t>((*blk)->tokens.size()), (*blk)->n_cached(),
                      log ? (*blk)->tokens : std::vector<TokenId>{}};
}

Frame EngineSide::info(uint64_t rid, BlockId id) {
  auto b = summarize(id);
  if (!b) return encode_error_envelope(rid, b.error());
  return encode_block_info(rid, b->block, b->name, b->tokens, b->cached);
}

// Each block of the view as it is now; an unknown block is an error naming it.
Frame EngineSide::snapshot(uint64_t rid, const std::vector<BlockId>& view, bool logs) {
  std::vector<BlockSummary> out;
  for (BlockId id : view) {
    auto b = summarize(id, logs);
    if (!b) return encode_error_envelope(rid, b.error());
    out.push_back(std::move(*b));
  }
  return encode_view_snapshot(rid, out);
}

// Free answers with the freed id; clear with the emptied block; merge and fork with the new one.
Frame EngineSide::block_op(uint64_t rid, const BlockOpCmd& op) {
  BlockStore& store = engine_->blocks();
  using Op = BlockOpCmd::Op;
  if (op.op == Op::export_part) return export_part(rid, op);  // paused blocks too: their host copy
  if (op.op == Op::load_part) return load_part(rid, op);
  std::vector<BlockId> touched = {op.block};
  if (op.op == Op::merge) touched.push_back(op.second);
  for (BlockId b : touched) {
    auto blk = store.get(b);
    if (blk && (*blk)->paused)
      return encode_error_envelope(
          rid, make_error(Errc::invalid_argument,
                          "block " + std::to_string(b) + " is paused: restore its program first"));
  }
  if (op.op == Op::free || op.op == Op::clear) {
    Status s = op.op == Op::free ? store.free(op.block) : store.clear(op.block);
    if (!s.ok()) return encode_error_envelope(rid, s.error());
    forget_transfers(op.block);
    return op.op == Op::free ? encode_block_info(rid, op.block, "", 0, 0) : info(rid, op.block);
  }
  auto made = op.op == Op::merge ? store.merge(op.block, op.second, op.name)
                                 : store.fork(op.block, op.tokens, op.name);
  if (!made) return encode_error_envelope(rid, made.error());
  return info(rid, *made);
}

Result<RequestId> EngineSide::submit(const Request& r, const caf::actor& subscriber, uint64_t rid,
                                     bool hold_events) {
  CHORUS_ASSIGN_OR_RETURN(const RequestId id, engine_->submit(r));
  Subscriber s;
  s.who = subscriber;
  s.correlation = rid;
  s.text = std::make_unique<IncrementalDecoder>(tokenizer(), DecodeOptions{.render_special = false});
  s.released = !hold_events;
  unreleased_ += hold_events;
  subs_[id] = std::move(s);
  return id;
}

void EngineSide::release(RequestId id, const Send& send) {
  auto it = subs_.find(id);
  if (it == subs_.end() || it->second.released) return;
  it->second.released = true;
  --unreleased_;
  for (Frame& f : it->second.early) send(it->second.who, std::move(f));
  if (it->second.ended)
    subs_.erase(it);
  else
    it->second.early.clear();
}

void EngineSide::emit(Subscriber& s, Frame f, const Send& send) {
  if (s.released)
    send(s.who, std::move(f));
  else
    s.early.push_back(std::move(f));
}

Status EngineSide::end_blocks(const std::vector<BlockId>& blocks, bool cancel, const std::string& name,
                              std::vector<RequestId>* cancelled) {
  if (cancel) {  // its requests in the engine end first, their subscribers told why
    auto ended = dispatch(
        engine_->cancel(blocks, "cancelled: " + name + " was terminated"),
        [](const caf::actor& who, Frame f) { caf::anon_send(who, event_atom::value, std::move(f)); });
    if (cancelled) cancelled->insert(cancelled->end(), ended.begin(), ended.end());
  }
  // All or nothing: a block that a pending request still holds keeps every block (the caller
  // may try again once the request is done).
  for (BlockId b : blocks)
    if (auto blk = engine_->blocks().get(b); blk && (*blk)->holds > 0)
      return make_error(Errc::invalid_argument, name + ": block " + std::to_string(b) + " has " +
                                                    std::to_string((*blk)->holds) + " pending request(s)");
  for (BlockId b : blocks) {
    if (engine_->blocks().is_live(b)) CHORUS_TRY(engine_->blocks().free(b));
    forget_transfers(b);
  }
  return Status::success();
}

void EngineSide::forget_transfers(BlockId b) {
  exports_.erase(b);
  loads_.erase(b);
}

// The part at offset 0 takes the image (Engine::export_block); the others are cut from it.
Frame EngineSide::export_part(uint64_t rid, const BlockOpCmd& op) {
  const std::string name = "block " + std::to_string(op.block);
  if (op.offset == 0) {
    auto image = engine_->export_block(op.block);
    if (!image) return encode_error_envelope(rid, image.error());
    exports_[op.block] = std::make_shared<const BlockImage>(std::move(*image));
  }
  auto it = exports_.find(op.block);
  if (it == exports_.end())
    return encode_error_envelope(
        rid, make_error(Errc::invalid_argument, "no export of " + name + " is under way: start at offset 0"));
  const BlockImage& im = *it->second;
  if (op.offset > im.kv.size())
    return encode_error_envelope(
        rid, make_error(Errc::invalid_argument, "offset " + std::to_string(op.offset) + " is past the " +
                                                    std::to_string(im.kv.size()) + " bytes of " + name));
  const uint64_t size =
      std::min<uint64_t>(op.max_bytes == 0 ? kBlockPartBytes : std::min(op.max_bytes, kBlockPartBytes),
                         im.kv.size() - op.offset);
  BlockPartData part;
  part.block = op.block;
  if (op.offset == 0) {
    part.tokens = im.tokens;
    part.cached = im.cached;
    part.format = im.format;
  }
  part.total = im.kv.size();
  part.offset = op.offset;
  Frame f = encode_block_part(rid, part, std::span<const std::byte>(im.kv).subspan(op.offset, size));
  if (op.offset + size == im.kv.size()) exports_.erase(it);  // the last part
  return f;
}

// Parts gather in order; the last one loads the image into the block (Engine::load_block).
Frame EngineSide::load_part(uint64_t rid, const BlockOpCmd& op) {
  const std::string name = "block " + std::to_string(op.block);
  const BlockPartData& part = *op.part;
  auto fail = [&](Errc code, const std::string& why) {
    loads_.erase(op.block);
    return encode_error_envelope(rid, make_error(code, "loading " + name + ": " + why));
  };
  if (part.offset == 0) {
    // No more than the whole pool could hold: a frame cannot make the node reserve more.
    const KvCache& kv = engine_->blocks().kv();
    const uint64_t most = static_cast<uint64_t>(kv.n_pages()) * kv.page_bytes();
    if (part.total > most)
      return fail(Errc::invalid_argument, std::to_string(part.total) + " bytes of KV are more than the " +
                                              std::to_string(most) + " of the whole pool");
    auto blk = engine_->blocks().get(op.block);
    if (!blk) return fail(blk.error().code, blk.error().message);
    if (!(*blk)->paused || !(*blk)->tokens.empty())
      return fail(Errc::invalid_argument, "only a paused block that was never written can be loaded");
    Loading& l = loads_[op.block];
    l.total = part.total;
    l.image = BlockImage{part.tokens, part.cached, part.format, {}};
    l.image.kv.reserve(part.total);
  }
  auto it = loads_.find(op.block);
  if (it == loads_.end()) return fail(Errc::invalid_argument, "no load is under way: start at offset 0");
  Loading& l = it->second;
  if (part.offset != l.image.kv.size() || part.total != l.total ||
      part.kv.size() > l.total - l.image.kv.size())
    return fail(Errc::invalid_argument,
                "a part of " + std::to_string(part.kv.size()) + " bytes at " + std::to_string(part.offset) +
                    " of " + std::to_string(part.total) + " does not follow the " +
                    std::to_string(l.image.kv.size()) + " of " + std::to_string(l.total) + " bytes received");
  l.image.kv.insert(l.image.kv.end(), part.kv.begin(), part.kv.end());
  if (l.image.kv.size() < l.total) return encode_block_info(rid, op.block, "", 0, 0);
  BlockImage image = std::move(l.image);
  loads_.erase(it);
  const auto n = static_cast<int64_t>(image.tokens.size());
  if (Status s = engine_->load_block(op.block, std::move(image)); !s.ok())
    return encode_error_envelope(rid, s.error());
  return encode_block_info(rid, op.block, "", n, 0);  // paused: nothing cached until its restore
}

LinkResult EngineSide::apply(const LinkOp& op) {
  LinkResult r;
  using K = LinkOp::Kind;
  switch (op.kind) {
    case K::create: r.block = create_block(op.name); break;
    case K::is_live: r.live = is_live(op.block); break;
    case K::block_op: r.reply = block_op(op.rid, op.op); break;
    case K::snapshot: r.reply = snapshot(op.rid, op.blocks, op.logs); break;
    case K::submit: {
      auto id = submit(op.request, op.subscriber, op.rid, op.hold_events);
      if (id)
        r.id = *id;
      else
        r.status = id.error();
      break;
    }
    case K::pause: r.status = pause(op.blocks, op.mode); break;
    case K::restore: r.status = restore(op.blocks); break;
    case K::end_blocks: r.status = end_blocks(op.blocks, op.cancel, op.name, &r.cancelled); break;
  }
  r.pool = snapshot_pool();
  return r;
}

void EngineSide::subscribe(BlockId b, const caf::actor& who) {
  watchers_[b].push_back(who);
  if (auto blk = engine_->blocks().get(b)) seen_[b] = (*blk)->n_cached();
}

// Sends each event to the request's subscriber and forgets the finished requests; returns them.
std::vector<RequestId> EngineSide::dispatch(const std::vector<Event>& events, const Send& send) {
  std::vector<RequestId> finished;
  for (const Event& e : events) {
    if (e.type == Event::Type::finished) finished.push_back(e.request);
    auto it = subs_.find(e.request);
    if (it == subs_.end()) continue;
    std::string text;
    if (e.type == Event::Type::token) text = it->second.text->push(e.token);
    if (e.type == Event::Type::finished) text = it->second.text->flush();
    if (e.type == Event::Type::finished && !text.empty()) {  // the held-back tail, as a last token event
      Event tail = e;
      tail.type = Event::Type::token;
      tail.token = -1;
      emit(it->second, encode_event(it->second.correlation, tail, text), send);
      text.clear();
    }
    emit(it->second, encode_event(it->second.correlation, e, text), send);
    if (e.type != Event::Type::finished) continue;
    if (it->second.released)
      subs_.erase(it);
    else
      it->second.ended = true;  // its events go out at the release
  }
  return finished;
}

Result<std::vector<RequestId>> EngineSide::step(
    const Send& send, const std::function<void(const caf::actor&, BlockId, int64_t)>& grown) {
  CHORUS_ASSIGN_OR_RETURN(const std::vector<Event> events, engine_->step());
  std::vector<RequestId> finished = dispatch(events, send);
  for (auto& [b, who] : watchers_) {  // blocks that grew in this step
    auto blk = engine_->blocks().get(b);
    if (!blk) continue;
    const int64_t n = (*blk)->n_cached();
    if (n == seen_[b]) continue;
    seen_[b] = n;
    for (const caf::actor& w : who) grown(w, b, n);
  }
  return finished;
}

}  // namespace chorus
