// The memory side of a node (internal to actors/): every command frame comes here first. It owns
// the program table, the room gate and the requests that wait — for their program's restore
// (a program registered with `hold`) or for room in the pool — and asks the engine side, through
// an EngineLink, for what touches the engine's blocks. The memory actor runs it on a thread of its
// own; the cooperative node runs it beside the engine side in one actor.
#pragma once

#include <caf/actor.hpp>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <vector>

#include "actors/engine_link.h"
#include "actors/memory/program_table.h"
#include "actors/memory/room_gate.h"

namespace chorus {

class MemorySide {
 public:
  explicit MemorySide(EngineLink& link) : link_(link) {}

  // Delivers a reply later (a response promise of the actor that asked).
  using Deliver = std::function<void(Frame)>;
  // Makes a Deliver for the message being handled; called only when a request is held.
  using Defer = std::function<Deliver()>;

  // Applies one command frame from `sender`; returns the reply frame, or nothing when the
  // request waits: `defer()` then gave what answers it when it starts, or when its program is
  // restored or terminated.
  std::optional<Frame> on_frame(const std::vector<uint8_t>& bytes, const caf::actor& sender,
                                const Defer& defer);

  // Requests ended in a step: the room kept for them goes, and requests waiting for room may
  // start (when still none fits, the scheduler hears of the first).
  void on_finished(const std::vector<RequestId>& finished);

  // Who hears when a request of a scheduled program waits (a ProgramManager's actor).
  void set_scheduler(caf::actor who) { scheduler_ = std::move(who); }

 private:
  struct Held {  // a request that waits: for its program's restore, or for room
    std::vector<uint8_t> frame;
    uint64_t rid = 0;  // the requester's id for it
    caf::actor sender;
    Deliver deliver;
    int64_t growth = 0;        // pages its block may grow by (what it wants, for the status)
    int64_t growth_slots = 0;  // ... and the linear-state slot it needs
    uint64_t program = 0;      // waiting for room: whose it is
  };
  static std::vector<BlockId> named(const Request& r);  // its view and the block it writes
  // The registered, active program a new block joins (null for program 0); an error saying why not.
  Result<ProgramRecord*> joining(uint64_t program);
  std::optional<Frame> on_create(uint64_t rid, const CreateBlockCmd& c);
  std::optional<Frame> on_request(const Request& req, const std::vector<uint8_t>& bytes, uint64_t rid,
                                  const caf::actor& sender, const Defer& defer);
  Frame on_block_op(uint64_t rid, const BlockOpCmd& op);
  std::optional<Frame> hold(uint64_t program, const std::vector<uint8_t>& bytes, uint64_t rid,
                            const caf::actor& sender, const Defer& defer, int64_t growth,
                            int64_t growth_slots);
  bool fits(const Request& r, const PoolView& pool) const;  // room for it: pages and slots
  void notify(uint64_t program) const;
  Frame start(const Request& r, uint64_t rid, const caf::actor& sender, uint64_t program);
  bool start_waiting();
  Frame status(uint64_t rid, uint64_t id, const ProgramRecord& p);

  Frame on_program(uint64_t rid, const ProgramCmd& pc);
  Frame withdraw(uint64_t rid, uint64_t program, uint64_t request);
  Status restore(uint64_t program, const ProgramRecord& p, const std::string& name);
  // After a pause, restore or terminate: its requests waiting for room are held for its restore
  // (paused); after a restore or terminate those held are handed back (to go in, or to end).
  std::vector<Held> take_held(uint64_t program, ProgramCmd::Op op);

  EngineLink& link_;
  ProgramTable programs_;
  std::map<uint64_t, std::vector<Held>> held_;  // per paused program: requests held for its restore
  std::deque<Held> waiting_;                    // requests of scheduled programs waiting for room
  RoomGate gate_;                               // ... and the room kept for those running
  caf::actor scheduler_;
};

}  // namespace chorus
