#include "engine/forward/batch.h"

#include <string>

namespace chorus {

Status check_forward_args(const ModelConfig& c, int max_tokens, std::span<const BatchToken> batch,
                          std::span<SequenceKv* const> seqs, std::span<const View> views) {
  const int64_t T = static_cast<int64_t>(batch.size());
  if (T > max_tokens)
    return make_error(
        Errc::invalid_argument,
        "batch of " + std::to_string(T) + " tokens exceeds the runner's " + std::to_string(max_tokens));
  for (const BatchToken& b : batch) {
    if (b.token < 0 || b.token >= c.n_vocab)
      return make_error(Errc::invalid_argument,
                        "token id " + std::to_string(b.token) + " is outside the vocabulary");
    if (b.seq < 0 || static_cast<size_t>(b.seq) >= seqs.size())
      return make_error(Errc::invalid_argument, "sequence index " + std::to_string(b.seq) + " out of range");
    const SequenceKv& s = *seqs[static_cast<size_t>(b.seq)];
    if (b.pos < 0 || static_cast<size_t>(b.pos / KvCache::page_size()) >= s.pages.size())
      return make_error(Errc::invalid_argument,
                        "position " + std::to_string(b.pos) + " is not covered by the sequence's KV pages");
    if (b.view >= 0 && static_cast<size_t>(b.view) >= views.size())
      return make_error(Errc::invalid_argument, "view index " + std::to_string(b.view) + " out of range");
  }
  for (const View& v : views)
    for (int32_t b : v)
      if (b < 0 || static_cast<size_t>(b) >= seqs.size())
        return make_error(Errc::invalid_argument,
                          "a view names sequence " + std::to_string(b) + ", out of range");
  return Status::success();
}

std::vector<std::vector<AttendSegment>> plan_attention(std::span<const BatchToken> batch,
                                                       std::span<SequenceKv* const> seqs,
                                                       std::span<const View> views) {
  // Lengths of context blocks are taken now, before this step writes anything (the same-step
  // rule).
  std::vector<int64_t> start_len(seqs.size()), written(seqs.size(), 0);
  for (size_t i = 0; i < seqs.size(); ++i) start_len[i] = seqs[i]->n_tokens;
  for (const BatchToken& b : batch) written[static_cast<size_t>(b.seq)] += 1;
  std::vector<std::vector<AttendSegment>> segs(batch.size());
  for (size_t t = 0; t < batch.size(); ++t) {
    const BatchToken& b = batch[t];
    auto& out = segs[t];
    if (b.view < 0) {
      out.push_back({b.seq, b.pos + 1, static_cast<float>(b.pos)});
      continue;
    }
    const View& v = views[static_cast<size_t>(b.view)];
    // Offsets through the view; the write block counts with what it holds after this step.
    auto length = [&](int32_t blk) {
      return blk == b.seq ? start_len[static_cast<size_t>(blk)] + written[static_cast<size_t>(blk)]
                          : start_len[static_cast<size_t>(blk)];
    };
    int64_t off = 0, own_off = -1;
    for (int32_t blk : v) {
      if (blk == b.seq) own_off = off;
      off += length(blk);
    }
    if (own_off < 0) own_off = off;  // the write block outside the view: attended last
    const int64_t i = own_off + b.pos;
    off = 0;
    bool own_seen = false;
    for (int32_t blk : v) {
      if (blk == b.seq) {
        out.push_back({blk, b.pos + 1, static_cast<float>(b.pos)});
        own_seen = true;
      } else if (length(blk) > 0) {
        out.push_back({blk, length(blk), static_cast<float>(i - off)});
      }
      off += length(blk);
    }
    if (!own_seen) out.push_back({b.seq, b.pos + 1, static_cast<float>(b.pos)});
  }
  return segs;
}

}  // namespace chorus
