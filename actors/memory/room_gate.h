// The room gate of a node's KV pool (the memory side of ThunderAgent's program scheduling): a
// request of a scheduled program starts only with room for everything it may write, and that
// room stays kept for it until it ends, so the pool never runs out under a running program.
// Plain numbers in, decisions out; the memory side (actors/batcher.cpp today) applies them.
//
// Per block written by reserved requests: the length (tokens) it may reach once each of them
// has written all it may — kept until the last of them ends (several writers of one block are
// counted together); a probe's scratch block apart.
//   reserved_end(b)   max(the block's log, what its reserved writers may take it to)
//   outstanding(b)    pages b may still take beyond those it holds, for its reserved writers
//   growth_pages(r)   pages r's block may grow by (what r wants, for a program's status)
//   gate_pages(r)     the room r needs to start: pages its block may take once r has written all
//                     it may (after its reserved writers), beyond those held and those kept
//   room()            free pages less everything kept (outstanding, probes' scratch)
// Hybrid models with counted linear-state slots (PoolView::n_slots() > 0) count slots the same
// way: a request needs one for a block that holds none yet (and none is kept for it) and a probe
// one for its scratch block; slot_room() is the free slots less those kept for reserved requests
// whose blocks have not taken theirs yet.
// Thread-compatible (the memory side's own state).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>

#include "actors/memory/pool_view.h"
#include "base/status.h"
#include "engine/step/engine.h"

namespace chorus {

class RoomGate {
 public:
  static int64_t adds(const Request& r);         // tokens r may add to its block
  static int64_t probe_pages(const Request& r);  // a probe's scratch block

  int64_t reserved_end(BlockId b, const PoolView& pool) const;
  int64_t outstanding(BlockId b, const PoolView& pool) const;
  int64_t growth_pages(const Request& r, const PoolView& pool) const;
  int64_t gate_pages(const Request& r, const PoolView& pool) const;
  int64_t room(const PoolView& pool) const;
  int64_t gate_slots(const Request& r, const PoolView& pool) const;  // 0 or 1
  int64_t slot_room(const PoolView& pool) const;

  // A request that could never start: what it may write beside its program's pages (those of
  // `program_blocks` now, or as far as their reserved writers may take them, which stay while
  // it runs) is more than the pool. Errc::out_of_memory, saying so.
  std::optional<Error> never_fits(const Request& r, std::span<const BlockId> program_blocks,
                                  const PoolView& pool) const;

  // `r` is about to be submitted: the block length it may reach, to pass to reserve().
  int64_t end_after(const Request& r, const PoolView& pool) const;
  // It was submitted as `id` for `program`: its room is kept from now on (`slot`: a slot too,
  // gate_slots() before it was submitted).
  void reserve(RequestId id, const Request& r, uint64_t program, int64_t end, bool slot = false);
  // It ended: its block's room goes when the block's last reserved writer does. False when it
  // was not reserved.
  bool release(RequestId id);

  // Pages kept for `program`'s running requests: its blocks' outstanding and its probes'.
  int64_t kept_for(uint64_t program, std::span<const BlockId> program_blocks, const PoolView& pool) const;
  int64_t slots_kept_for(uint64_t program, std::span<const BlockId> program_blocks,
                         const PoolView& pool) const;
  bool empty() const { return reserved_.empty(); }

 private:
  struct BlockReservation {
    int64_t end = 0;
    int writers = 0;
    bool slot = false;  // a slot is kept for the block until it holds one
  };
  bool slot_kept(BlockId b, const BlockReservation& br, const PoolView& pool) const {
    return br.slot && pool.slots(b) == 0;
  }
  // How many of `blocks` have a slot kept for them by a reserved writer.
  int64_t blocks_slot_kept(std::span<const BlockId> blocks, const PoolView& pool) const;
  struct Reservation {
    BlockId block = -1;       // the block it writes (-1: a probe)
    int64_t probe_pages = 0;  // a probe's scratch block
    bool probe_slot = false;  // ... and its slot
    uint64_t program = 0;
  };
  std::map<RequestId, Reservation> reserved_;
  std::map<BlockId, BlockReservation> block_res_;
};

}  // namespace chorus
