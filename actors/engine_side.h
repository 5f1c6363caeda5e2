// The engine side of a node (internal to actors/): the Engine, its requests' subscribers, who
// watches which block grow, and one step with its events sent out. The batcher actor runs it
// on a thread of its own; the cooperative node runs it beside the memory side in one actor.
#pragma once

#include <caf/actor.hpp>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "actors/engine_link.h"
#include "engine/tokenizer/detokenizer.h"

namespace chorus {

class EngineSide {
 public:
  explicit EngineSide(std::shared_ptr<Engine> engine)
      : engine_(std::move(engine)), pool_(engine_->blocks()) {}

  // Sends a frame to an actor (the actor's own send, so the order of its messages holds).
  using Send = std::function<void(const caf::actor& who, Frame f)>;

  bool idle() const { return engine_->idle(); }
  const Tokenizer& tokenizer() const { return engine_->model().tokenizer; }
  const PoolView& pool() const { return pool_; }
  PoolSnapshot snapshot_pool() const;  // every live block's numbers

  BlockId create_block(const std::string& name) { return engine_->blocks().create(name); }
  bool is_live(BlockId b) const { return engine_->blocks().is_live(b); }
  Frame block_op(uint64_t rid, const BlockOpCmd& op);
  Frame snapshot(uint64_t rid, const std::vector<BlockId>& view, bool logs = false);
  // With `hold_events`, the request's events wait in the engine side until `release(id)`: the
  // memory actor answers `Submitted` first, then releases, so its requester sees the answer
  // before the events (they come from two actors).
  Result<RequestId> submit(const Request& r, const caf::actor& subscriber, uint64_t rid,
                           bool hold_events = false);
  void release(RequestId id, const Send& send);
  bool awaiting_release() const { return unreleased_ > 0; }
  Status pause(const std::vector<BlockId>& blocks, PauseMode mode) { return engine_->pause(blocks, mode); }
  Status restore(const std::vector<BlockId>& blocks) { return engine_->restore(blocks); }
  Status end_blocks(const std::vector<BlockId>& blocks, bool cancel, const std::string& name,
                    std::vector<RequestId>* cancelled);
  LinkResult apply(const LinkOp& op);  // any of the above, as a message asked it

  void subscribe(BlockId b, const caf::actor& who);

  // Runs one engine step; sends its events, and the growth of watched blocks, through `send`
  // (grown: `grown(who, block, cached)`). Returns the requests that finished in it.
  Result<std::vector<RequestId>> step(const Send& send,
                                      const std::function<void(const caf::actor&, BlockId, int64_t)>& grown);

 private:
  struct Subscriber {
    caf::actor who;
    uint64_t correlation = 0;
    std::unique_ptr<IncrementalDecoder> text;
    bool released = true;
    bool ended = false;        // finished while not yet released
    std::vector<Frame> early;  // its events before the release
  };
  void emit(Subscriber& s, Frame f, const Send& send);
  std::vector<RequestId> dispatch(const std::vector<Event>& events, const Send& send);
  Result<BlockSummary> summarize(BlockId id, bool log = false);
  // KV transfer (BlockOpCmd export_part / load_part): images being sent, part by part, and
  // being received, by block.
  Frame export_part(uint64_t rid, const BlockOpCmd& op);
  Frame load_part(uint64_t rid, const BlockOpCmd& op);
  void forget_transfers(BlockId b);  // the block is gone
  struct Loading {
    uint64_t total = 0;
    BlockImage image;
  };
  std::map<BlockId, std::shared_ptr<const BlockImage>> exports_;
  std::map<BlockId, Loading> loads_;
  Frame info(uint64_t rid, BlockId id);

  std::shared_ptr<Engine> engine_;
  StoreView pool_;
  std::map<RequestId, Subscriber> subs_;
  std::map<BlockId, std::vector<caf::actor>> watchers_;  // block -> who wants to know it grew
  std::map<BlockId, int64_t> seen_;                      // cached length last reported
  int64_t unreleased_ = 0;  // requests submitted with hold_events, not yet released
};

// The local link: the engine side called directly (same thread).
class LocalLink final : public EngineLink {
 public:
  explicit LocalLink(EngineSide& e) : e_(e) {}
  const Tokenizer& tokenizer() const override { return e_.tokenizer(); }
  const PoolView& pool() override { return e_.pool(); }
  BlockId create_block(const std::string& name) override { return e_.create_block(name); }
  bool is_live(BlockId b) override { return e_.is_live(b); }
  Frame block_op(uint64_t rid, const BlockOpCmd& op) override { return e_.block_op(rid, op); }
  Frame snapshot(uint64_t rid, const std::vector<BlockId>& view, bool logs) override {
    return e_.snapshot(rid, view, logs);
  }
  Result<RequestId> submit(const Request& r, const caf::actor& subscriber, uint64_t rid) override {
    return e_.submit(r, subscriber, rid);  // one actor: its answer goes out before the events
  }
  Status pause(const std::vector<BlockId>& blocks, PauseMode mode) override { return e_.pause(blocks, mode); }
  Status restore(const std::vector<BlockId>& blocks) override { return e_.restore(blocks); }
  Status end_blocks(const std::vector<BlockId>& blocks, bool cancel, const std::string& name,
                    std::vector<RequestId>* cancelled) override {
    return e_.end_blocks(blocks, cancel, name, cancelled);
  }

 private:
  EngineSide& e_;
};

}  // namespace chorus
