// The atoms (message tags) chorus actors exchange in-process. Frames (std::vector<uint8_t>)
// carry schemas/envelope.fbs messages.
#pragma once

#include <caf/atom.hpp>

namespace chorus {

using frame_atom = caf::atom_constant<caf::atom("frame")>;  // a command frame -> reply frame
using event_atom = caf::atom_constant<caf::atom("event")>;  // an event frame, batcher -> requester
using stop_atom = caf::atom_constant<caf::atom("stop")>;    // end an actor's work
using subscribe_atom =
    caf::atom_constant<caf::atom("subscribe")>;  // (subscribe_atom, block): BlockGrown events as it grows
using step_atom = caf::atom_constant<caf::atom("step")>;  // a cooperative batcher: run one step
using tick_atom = caf::atom_constant<caf::atom("tick")>;  // an actor's own timer
// (answer_atom, client, frame): a frame for a node port's client (the port sends it on).
using answer_atom = caf::atom_constant<caf::atom("answer")>;
// (relay_atom, RelayTo as int, seq, frame): a Relay frame's content, down to a hosted role's relay
// end (actors/actor_host.cpp).
using relay_atom = caf::atom_constant<caf::atom("relay")>;

// A program (actors/program.h): its roles, its controller, its sandbox and patcher.
// (role_atom, frame): a message between a program's actors, a schemas/roles.fbs frame
// (net/role_codec.h). (role_ask_atom, frame) -> frame: one that asks for an answer (a tool
// call, edit_program, retiring a role, warming or removing a sandbox), which is one too.
using role_atom = caf::atom_constant<caf::atom("role")>;
using role_ask_atom = caf::atom_constant<caf::atom("roleask")>;
// (start_atom, controller, StartRole frame): a role may begin (its blocks are ready); the
// controller is where its events go.
using start_atom = caf::atom_constant<caf::atom("start")>;

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
