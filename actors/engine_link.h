// Between the node's memory actor and its batcher (internal to actors/: memory_actor.cpp and
// batcher.cpp). The memory side decides — which command runs, which request waits for room or
// for its program's restore, which program pauses — and asks the engine side, through an
// EngineLink, only for what touches the engine's blocks. Two links: a local one over the
// engine side itself (the cooperative node, one actor), and one that asks the batcher actor and
// waits for its answer (the node's two actors).
#pragma once

#include <caf/actor.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actors/memory/pool_view.h"
#include "engine/step/engine.h"
#include "net/codec.h"

namespace chorus {

class EngineLink {
 public:
  virtual ~EngineLink() = default;
  virtual const Tokenizer& tokenizer() const = 0;
  // The pool as last known: live on the local link; after the last step or command on the
  // actor link (a consistent snapshot: free pages and block pages from the same moment).
  virtual const PoolView& pool() = 0;

  virtual BlockId create_block(const std::string& name) = 0;
  virtual bool is_live(BlockId b) = 0;
  // FreeBlock, ClearBlock, MergeBlocks, ForkBlock and SnapshotView, answered as frames.
  virtual Frame block_op(uint64_t rid, const BlockOpCmd& op) = 0;
  virtual Frame snapshot(uint64_t rid, const std::vector<BlockId>& view,
                         bool logs) = 0;  // logs: the tokens too
  // Submits `r`; its events go to `subscriber` under the requester's id `rid`.
  virtual Result<RequestId> submit(const Request& r, const caf::actor& subscriber, uint64_t rid) = 0;
  virtual Status pause(const std::vector<BlockId>& blocks, PauseMode mode) = 0;
  virtual Status restore(const std::vector<BlockId>& blocks) = 0;
  // With `cancel`, ends the requests that use `blocks` first (their subscribers are told; their
  // ids go to `cancelled`); then frees every block, or none when a pending request still holds
  // one (the error names it and `name`).
  virtual Status end_blocks(const std::vector<BlockId>& blocks, bool cancel, const std::string& name,
                            std::vector<RequestId>* cancelled) = 0;
};

// One operation of the engine side, as a message (the actor link), and its answer with the pool
// as it is after it.
struct LinkOp {
  enum class Kind {
    create,
    is_live,
    block_op,
    snapshot,
    submit,
    pause,
    restore,
    end_blocks
  } kind = Kind::create;
  std::string name;
  BlockId block = -1;
  BlockOpCmd op;
  std::vector<BlockId> blocks;
  Request request;
  caf::actor subscriber;
  uint64_t rid = 0;
  PauseMode mode = PauseMode::drop;
  bool cancel = false;
  bool logs = false;         // snapshot: each block's token log too
  bool hold_events = false;  // submit: its events wait for (release_atom, ids)
};
struct LinkResult {
  Frame reply;
  Status status;
  std::vector<RequestId> cancelled;
  RequestId id = -1;
  BlockId block = -1;
  bool live = false;
  PoolSnapshot pool;
};
// After each step, from the batcher to the memory actor: the requests that finished in it, and
// the pool as the step left it.
struct StepReport {
  std::vector<RequestId> finished;
  PoolSnapshot pool;
};

}  // namespace chorus

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(chorus::LinkOp)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(chorus::LinkResult)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(chorus::StepReport)
