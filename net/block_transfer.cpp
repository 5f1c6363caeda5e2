#include "net/block_transfer.h"

#include <algorithm>
#include <string>
#include <utility>

namespace chorus {

Result<BlockImage> fetch_block(const FrameCall& call, BlockId block, uint64_t part_bytes,
                               std::shared_ptr<BlockPartData> first) {
  BlockImage image;
  uint64_t total = 0;
  for (uint64_t offset = 0;;) {
    std::shared_ptr<BlockPartData> part = std::exchange(first, nullptr);
    if (!part) {
      CHORUS_ASSIGN_OR_RETURN(const Reply r, call(encode_export_block(0, block, offset, part_bytes)));
      if (r.kind != ReplyKind::block_part)
        return make_error(Errc::internal, "exporting block " + std::to_string(block) +
                                              ": the node answered a " + reply_kind_name(r.kind));
      part = r.part;
    }
    if (!part || part->block != block || part->offset != offset)
      return make_error(Errc::internal, "exporting block " + std::to_string(block) +
                                            ": the node's answer is not its part at " +
                                            std::to_string(offset));
    BlockPartData& p = *part;
    if (offset == 0) {
      total = p.total;
      image.tokens = std::move(p.tokens);
      image.cached = p.cached;
      image.format = std::move(p.format);
      image.kv.reserve(total);
    }
    if (p.total != total || p.kv.size() > total - offset || (p.kv.empty() && offset < total))
      return make_error(Errc::internal, "exporting block " + std::to_string(block) + ": a part of " +
                                            std::to_string(p.kv.size()) + " bytes at " +
                                            std::to_string(offset) + " does not fit " +
                                            std::to_string(total));
    image.kv.insert(image.kv.end(), p.kv.begin(), p.kv.end());
    offset += p.kv.size();
    if (offset == total) return image;
  }
}

Status send_block(const FrameCall& call, BlockId block, const BlockImage& image, uint64_t part_bytes) {
  const uint64_t total = image.kv.size();
  part_bytes = std::max<uint64_t>(1, std::min(part_bytes, kBlockPartBytes));
  for (uint64_t offset = 0;;) {
    BlockPartData p;
    p.block = block;
    if (offset == 0) {
      p.tokens = image.tokens;
      p.cached = image.cached;
      p.format = image.format;
    }
    p.total = total;
    p.offset = offset;
    const uint64_t n = std::min(part_bytes, total - offset);
    p.kv.assign(image.kv.begin() + static_cast<long>(offset),
                image.kv.begin() + static_cast<long>(offset + n));
    CHORUS_ASSIGN_OR_RETURN(const Reply r, call(encode_load_block(0, p)));
    if (r.kind != ReplyKind::block_info)
      return make_error(Errc::internal, "loading block " + std::to_string(block) + ": the node answered a " +
                                            reply_kind_name(r.kind));
    offset += n;
    if (offset == total) return Status::success();
  }
}

}  // namespace chorus
