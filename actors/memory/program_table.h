// The programs a node knows (ThunderAgent's program table): each one's blocks, status, whether
// its requests wait while it is paused (`hold`), and its last reported phase. Plain state; the
// memory side (actors/batcher.cpp today) applies pauses and restores to the engine and keeps
// the requests that wait for a program.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "actors/memory/pool_view.h"
#include "engine/sched/program_state.h"

namespace chorus {

struct ProgramRecord {
  std::string name;
  std::vector<BlockId> blocks;
  ProgramState state = ProgramState::active;  // active or paused; a terminated program is erased
  bool hold = false;    // requests naming its blocks wait while it is paused (else are refused)
  bool acting = false;  // its last reported phase (ProgramPhase::acting)
};

class ProgramTable {
 public:
  // Registers `id` (again: its record is replaced).
  ProgramRecord& add(uint64_t id, ProgramRecord r) { return programs_[id] = std::move(r); }
  ProgramRecord* find(uint64_t id);
  const ProgramRecord* find(uint64_t id) const;
  void erase(uint64_t id) { programs_.erase(id); }
  const std::map<uint64_t, ProgramRecord>& all() const { return programs_; }

  // The program registered with `hold` (and paused, when `paused_only`) that owns one of
  // `blocks`; 0 when none does.
  uint64_t hold_owner(std::span<const BlockId> blocks, bool paused_only) const;
  // A freed block leaves the program that had it.
  void forget_block(BlockId b);

  // What a program holds now: pages, tokens in its blocks, the requests that hold them, and
  // (hybrid models with counted slots) the linear-state slots its blocks hold.
  struct Holdings {
    int64_t pages = 0, tokens = 0, pending = 0, slots = 0;
  };
  Holdings holdings(uint64_t id, const PoolView& pool) const;
  // The pages a restore of its paused blocks takes.
  int64_t restore_pages(uint64_t id, const PoolView& pool) const;
  int64_t restore_slots(uint64_t id, const PoolView& pool) const;  // ... and slots

 private:
  std::map<uint64_t, ProgramRecord> programs_;
};

}  // namespace chorus
