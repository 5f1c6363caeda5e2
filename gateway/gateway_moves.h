// How a program that moves to another node for room (the global waiting queue,
// gateway_backends.h) takes its conversation along: its block's KV pages sent from the node it
// leaves to the node it goes to (net/block_transfer.h), or its tokens recomputed there from the
// client's history. The choice is a cost model with measured constants (docs/cluster.md, like
// the scheduler's drop-or-offload): the image's bytes at the link's rate against its cached
// positions at the node's prefill rate.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engine/step/engine.h"

namespace chorus {

class GatewayPrograms;

struct MoveCost {
  enum class By { cost, recompute, kv } by = By::cost;  // cost: whichever the model says is cheaper
  // Measured on this project's machine (tools/bench/bench_migration.py, docs/cluster.md): KV
  // bytes a node link carries per second, and positions a node prefills per second.
  double transfer_bytes_per_s = 80e6;
  double recompute_tokens_per_s = 250;

  double transfer_s(uint64_t bytes) const { return static_cast<double>(bytes) / transfer_bytes_per_s; }
  double recompute_s(int64_t tokens) const { return static_cast<double>(tokens) / recompute_tokens_per_s; }
};

// A program's conversation on its way: its block's image and the text it stands for.
struct CarriedBlock {
  BlockImage image;
  std::string text;
  double export_s = 0;
};

// Takes the image of `block` (program `id`, whose conversation is `text`) from the node it
// leaves, where `cost` says the KV should travel: null when it should not, or cannot (why is
// logged: a dropped block, a hybrid model).
std::shared_ptr<CarriedBlock> carry_out(GatewayPrograms& from, const std::string& id, BlockId block,
                                        const std::string& text, const MoveCost& cost,
                                        const std::string& node);
// Loads it into `block`, the program's new empty block on the node it came to. False (logged)
// when that fails: the turn then recomputes.
bool carry_in(GatewayPrograms& to, const std::string& id, BlockId block, const CarriedBlock& carried,
              const std::string& node);

}  // namespace chorus
