// Moving a block's image between nodes over their command frames (ExportBlock, BlockPart,
// LoadBlock in schemas/blocks.fbs): the client side of a migration by KV transfer
// (docs/cluster.md). `call` sends one command frame to a node and returns its decoded reply
// (an Error reply an error): the node's memory actor, a node link, or a gateway backend.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "base/status.h"
#include "net/codec.h"

namespace chorus {

using FrameCall = std::function<Result<Reply>(const Frame&)>;

// The image of `block` (its log and KV), in parts of at most `part_bytes` of KV each. `first`:
// the export's part at offset 0, already asked for (its size decides whether to go on); else
// this asks for it. Errors are the node's (the block cannot travel alone, say) or a part that
// does not follow.
Result<BlockImage> fetch_block(const FrameCall& call, BlockId block, uint64_t part_bytes = kBlockPartBytes,
                               std::shared_ptr<BlockPartData> first = nullptr);
// Loads `image` into `block` — paused, never written — in parts of at most `part_bytes`.
Status send_block(const FrameCall& call, BlockId block, const BlockImage& image,
                  uint64_t part_bytes = kBlockPartBytes);

}  // namespace chorus
