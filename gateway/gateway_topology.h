// POST /programs/run (gateway/gateway.h): a topology program (topologies/README.md) sent over HTTP,
// run on a backend — the node with the most room behind a coordinator (`chorus run --cluster`),
// or `chorus serve`'s own engine — under that node's program scheduler, beside its HTTP
// programs. Its roles run in the gateway's process; their frames go to the node's memory actor
// (through the node's link in a cluster). The request returns when the program ends. Internal to
// the gateway library.
//
// Body: {"topology": YAML text, "name": file name for messages (optional), "set": {KEY: VALUE}
// (parameters and key paths, as `chorus run --set`), "input": the parameter input (optional)}.
// Answer: {"program", "node", "ended_by", "error", "seconds", "generated_tokens", "events":
// {event: count}, "blocks": {block: tokens}, "output": [{"stream", "text"}...]} — what its
// stdout and stderr sinks wrote, as `chorus run` shows it, in order (here, not on the server's
// terminal). Its other sinks (file, zmq) and sources act in the server's process.
// "restarts": [{"node", "error"}...] — a program that failed while its node was down (the
// node's link stopped hearing it) starts again from the topology on another node, up to 3 times: nothing of
// it had reached the client. Refused (400) where the body is not the JSON above or the topology
// does not load (its error names file, line and key). A probe that watches a block grow runs too:
// the node tells the gateway's roles of the block's growth (WatchBlock, schemas/blocks.fbs).
#pragma once

#include <caf/fwd.hpp>
#include <memory>
#include <string>

#include "gateway/gateway_backends.h"

namespace chorus {

struct Model;

class ActorPlacement;

// Throws HttpError. `model`: the backends' (tokenizer, templates); `unsafe_tools` and
// `placement` as ProgramHooks's (null: every actor runs here, whatever its `node:` says).
std::string run_topology_request(caf::actor_system& sys, const Model& model, GatewayBackends& backends,
                                 const std::string& body, bool unsafe_tools,
                                 std::shared_ptr<ActorPlacement> placement);

}  // namespace chorus
