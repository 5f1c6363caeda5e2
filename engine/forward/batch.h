// The batch both runners take (engine/forward/runner.h): tokens of many sequences (blocks) at
// once, each with its position and the view it attends, and the planning every runner shares:
// the argument checks and which block segments each token's attention reads.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "engine/forward/kv_cache.h"
#include "engine/model/model_config.h"
#include "engine/tokenizer/tokenizer.h"

namespace chorus {

struct BatchToken {
  TokenId token = 0;
  int32_t pos = 0;      // position in the sequence (block) it is written to, block-local
  int32_t seq = 0;      // the sequence (block) it is written to: index into forward()'s seqs
  bool logits = false;  // compute next-token logits after this token
  int32_t view = -1;    // index into forward()'s views, or -1: the token sees its own sequence only
};

// A view: the sequences (blocks) a token attends to, in order, as indices into forward()'s
// seqs. The token's own sequence may appear anywhere in it (else it is attended after the
// others). Context blocks are seen as they were at the start of the step: tokens that other
// entries of the same batch write to them become visible on the next step.
using View = std::vector<int32_t>;

// The most blocks one view may hold (each is a segment of the attention call).
inline constexpr int kMaxViewBlocks = 64;

// One block a token attends: the block (index into forward()'s seqs), how many of its positions,
// and the rotation of the query for it (the token's view position minus the block's offset).
struct AttendSegment {
  int32_t block;
  int64_t n_kv;
  float rotation;
};

// The checks every runner's forward() makes: batch size, token ids, sequence and view indices,
// positions covered by their sequence's pages. Errors are Errc::invalid_argument, saying which.
Status check_forward_args(const ModelConfig& config, int max_tokens, std::span<const BatchToken> batch,
                          std::span<SequenceKv* const> seqs, std::span<const View> views);

// The segments each token of a batch attends, in view order. Context blocks are seen as they
// were at the start of the step; the token's own block up to and including its position.
// REQUIRES: forward()'s argument checks hold (indices in range).
std::vector<std::vector<AttendSegment>> plan_attention(std::span<const BatchToken> batch,
                                                       std::span<SequenceKv* const> seqs,
                                                       std::span<const View> views);

}  // namespace chorus
