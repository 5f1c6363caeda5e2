// The batcher actor: owns an Engine and runs its step loop on a thread of its own (a detached
// actor), so every forward pass batches the work of all actors that talk to it.
//
// Protocol (in-process CAF messages; frames are schemas/envelope.fbs):
//   request (frame_atom, frame)  -> reply frame: BlockInfo (CreateBlock, FreeBlock, ClearBlock,
//                                    MergeBlocks and ForkBlock: the new block),
//                                    ViewSnapshot (SnapshotView),
//                                    Submitted (Forward, Generate, Probe, AppendTokens),
//                                    ProgramStatus (RegisterProgram, PauseProgram, RestoreProgram,
//                                    TerminateProgram) or Error
// The batcher also plays the memory actor's part for now: it owns the blocks (the engine's block
// store), serializes every write (one writer per block, FIFO) and pauses/restores programs. A
// request naming a block of a paused program is refused, unless the program was registered with
// `hold`: then its reply (Submitted, or Error) waits until the program is restored — the request
// goes in then, in arrival order — or terminated (an Error).
//   then, to the sender of a Submitted request: (event_atom, frame) with TokenEvent (text is
//   whole UTF-8 characters), ProbeResult, and last RequestFinished
//   (subscribe_atom, block) -> after each step in which the block's cached length changed,
//   (grown_atom, block, cached tokens) to the subscriber (a probe watching a log, say)
//   (stop_atom) ends the actor once the work it has accepted is done; an exit message ends it
//   at once.
// Commands are applied in mailbox order before each step; when the engine is idle the actor
// sleeps on its mailbox.
#pragma once

#include <caf/fwd.hpp>
#include <memory>

namespace chorus {

class Engine;

caf::actor spawn_batcher(caf::actor_system& sys, std::unique_ptr<Engine> engine);
// The same, keeping shared ownership (the caller may read the engine once the actor is gone).
caf::actor spawn_batcher(caf::actor_system& sys, std::shared_ptr<Engine> engine);
// The same protocol on the CAF scheduler instead of a thread of its own: one engine step per
// message it sends itself, commands that arrived meanwhile applied first. Steps then share the
// scheduler's threads with other actors; its use is deterministic tests (CAF's test
// coordinator) and embedding where a thread per batcher is not wanted.
caf::actor spawn_batcher_cooperative(caf::actor_system& sys, std::shared_ptr<Engine> engine);

}  // namespace chorus
