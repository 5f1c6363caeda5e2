// Linear-state slots: how many blocks of a hybrid model may keep their Gated DeltaNet state where
// the runner computes with it. On a GPU a slot is a fixed share of one device allocation
// (engine/forward/cuda/cuda_linear.h; 237 MB for a Qwen3.5-9B shape), so slots, not KV pages,
// bound how many hybrid blocks are resident; on the CPU the state lives in host memory anyway
// and a limit (EngineOptions::linear_slots) is a count only, so that the scheduling that slots
// need is the same, and tested, on both.
//
// A block being written or read holds one; a paused block holds none (dropped: its state is
// rebuilt at its restore; offloaded: the state waits in host memory and takes a slot again at
// the restore). The program scheduler counts them like pages (docs/scheduling.md).
//
// Thread-safe: a slot is given back by the state's deleter, wherever the last holder lets go.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/status.h"

namespace chorus {

struct LinearState;

class LinearSlots {
 public:
  explicit LinearSlots(int n);
  LinearSlots(const LinearSlots&) = delete;
  LinearSlots& operator=(const LinearSlots&) = delete;

  int capacity() const;
  int in_use() const;
  int free() const { return capacity() - in_use(); }

  // Gives `s` a slot: its number in s.slot (returned to the pool when the last holder of that
  // pointer lets go, even after the pool's owner is gone), s.slot_owner = this.
  // Errc::out_of_memory when all are in use, naming the option that sets their number.
  Status acquire(LinearState& s);
  // Whether `s` holds a slot of this pool.
  bool holds(const LinearState& s) const;
  // What acquire says when none is free: how many there are and the option that sets that.
  std::string exhausted_message() const;

 private:
  struct Free {
    std::mutex mu;
    std::vector<int32_t> ids;
    int n = 0;
  };
  std::shared_ptr<Free> free_;
};

}  // namespace chorus
