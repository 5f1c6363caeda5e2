// A node's two actors: the memory actor, its front door, and the batcher, which owns an Engine
// and runs its step loop on a thread of its own (a detached actor), so every forward pass
// batches the work of all actors that talk to the node.
//  - The memory actor (actors/memory_side.h) owns the program table, the room gate (pages kept
//    for running scheduled requests) and the requests that wait — for their program's restore or
//    for room — and decides what runs; it asks the batcher (actors/engine_link.h) for what
//    touches the engine's blocks, and waits for the answer.
//  - The batcher (actors/engine_side.h) answers those operations between steps, sends each
//    request's events to its requester, and after each step reports to the memory actor what
//    finished and the pool as it is (the numbers the room gate counts with).
// Clients talk to the memory actor only; spawn_batcher returns it.
//
// Protocol (in-process CAF messages; frames are schemas/envelope.fbs):
//   request (frame_atom, frame)  -> reply frame: BlockInfo (CreateBlock, FreeBlock, ClearBlock,
//                                    MergeBlocks and ForkBlock: the new block),
//                                    ViewSnapshot (SnapshotView),
//                                    Submitted (Forward, Generate, Probe, AppendTokens),
//                                    ProgramStatus (RegisterProgram, PauseProgram, RestoreProgram,
//                                    TerminateProgram) or Error
// The memory actor pauses and restores programs (the engine serializes the writes of a block,
// one writer at a time, FIFO). A request naming a block of a paused program is refused, unless
// the program was registered with `hold`: then its reply (Submitted, or Error) waits until the
// program is restored — the request goes in then, in arrival order — or terminated (an Error).
//   then, to the sender of a Submitted request: (event_atom, frame) with TokenEvent (text is
//   whole UTF-8 characters), ProbeResult, and last RequestFinished
//   (subscribe_atom, block) -> after each step in which the block's cached length changed,
//   (event_atom, frame) with a BlockGrown (the block, its cached tokens) to the subscriber (a
//   probe watching a log, say)
//   (stop_atom) ends the actor once the work it has accepted is done; an exit message ends it
//   at once.
// Commands are applied in mailbox order before each step; when the engine is idle the actor
// sleeps on its mailbox.
#pragma once

#include <caf/actor.hpp>
#include <caf/fwd.hpp>
#include <memory>

namespace chorus {

class Engine;

struct NodeActors {
  caf::actor memory;   // the front door: every command frame goes here
  caf::actor batcher;  // the step loop (clients need not know it)
};
// Both actors, each on a thread of its own, linked: an exit of one ends the other.
NodeActors spawn_node_actors(caf::actor_system& sys, std::shared_ptr<Engine> engine);

// The node's memory actor (in front of its batcher): what clients talk to.
caf::actor spawn_batcher(caf::actor_system& sys, std::unique_ptr<Engine> engine);
// The same, keeping shared ownership (the caller may read the engine once the actors are gone).
caf::actor spawn_batcher(caf::actor_system& sys, std::shared_ptr<Engine> engine);
// The same protocol from one actor on the CAF scheduler, both sides in it: one engine step per
// message it sends itself, commands that arrived meanwhile applied first. Steps then share the
// scheduler's threads with other actors; its use is deterministic tests (CAF's test
// coordinator) and embedding where threads of their own are not wanted.
caf::actor spawn_batcher_cooperative(caf::actor_system& sys, std::shared_ptr<Engine> engine);

}  // namespace chorus
