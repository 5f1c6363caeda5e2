// The atoms (message tags) chorus actors exchange in-process. Frames (std::vector<uint8_t>)
// carry schemas/envelope.fbs messages.
#pragma once

#include <caf/atom.hpp>

namespace chorus {

using frame_atom = caf::atom_constant<caf::atom("frame")>;          // a command frame -> reply frame
using event_atom = caf::atom_constant<caf::atom("event")>;          // an event frame, batcher -> requester
using stop_atom = caf::atom_constant<caf::atom("stop")>;            // end an actor's work
using paragraph_atom = caf::atom_constant<caf::atom("paragraph")>;  // a thinker finished a paragraph
using done_atom = caf::atom_constant<caf::atom("done")>;            // a role has nothing more to do
using subscribe_atom =
    caf::atom_constant<caf::atom("subscribe")>;             // (subscribe_atom, block): tell me when it grows
using grown_atom = caf::atom_constant<caf::atom("grown")>;  // (grown_atom, block, cached tokens)
using text_atom = caf::atom_constant<caf::atom("text")>;    // (text_atom, string): text for a source or sink
using step_atom = caf::atom_constant<caf::atom("step")>;    // a cooperative batcher: run one step
using tick_atom = caf::atom_constant<caf::atom("tick")>;    // a role's own timer
using fired_atom =
    caf::atom_constant<caf::atom("fired")>;  // (fired_atom, candidate, probability): a probe fired
// A program (actors/program.h): its roles and its controller.
using signal_atom =
    caf::atom_constant<caf::atom("signal")>;                // (signal_atom, event, text): a named event fired
using start_atom = caf::atom_constant<caf::atom("start")>;  // a role may begin (its blocks are ready)
using tokens_atom = caf::atom_constant<caf::atom("tokens")>;  // (tokens_atom, n): a role generated n tokens
using fail_atom = caf::atom_constant<caf::atom("fail")>;      // (fail_atom, actor, what): a role cannot go on
// The scheduler of programs on a batcher (actors/program_manager.h).
using scheduler_atom =
    caf::atom_constant<caf::atom("scheduler")>;  // (scheduler_atom) to the batcher: tell me ...
using waiting_atom =
    caf::atom_constant<caf::atom("waiting")>;  // (waiting_atom, program): ... when its request waits

// Between a node's memory actor and its batcher (actors/engine_link.h).
using link_atom = caf::atom_constant<caf::atom("link")>;      // (link_atom, LinkOp) -> LinkResult
using report_atom = caf::atom_constant<caf::atom("report")>;  // (report_atom, StepReport): after a step
using memory_atom = caf::atom_constant<caf::atom("memory")>;  // (memory_atom) to the batcher: report to me
using ready_atom = caf::atom_constant<caf::atom("ready")>;  // (ready_atom) to the memory actor: a step is due
using go_atom = caf::atom_constant<caf::atom("go")>;  // ... its answer, once what came before is applied
using release_atom =
    caf::atom_constant<caf::atom("release")>;  // (release_atom, ids): their Submitted went out; send events

}  // namespace chorus
