// The node port: a node's memory and batcher exposed on a ZeroMQ ROUTER socket, so clients in
// other processes (any language with ZeroMQ and FlatBuffers: see clients/python) can create
// blocks, submit requests and read their events.
//
// Wire: a client (DEALER) sends one frame per message, an envelope (schemas/envelope.fbs). Each
// frame is checked (size, identifier, FlatBuffers verifier, version) before anything reads it; a
// bad frame gets an Error frame back and a log line, and the node keeps serving. A command's
// reply frame comes back to the client, then its events (TokenEvent, ProbeResult,
// RequestFinished) as further frames. Commands run side by side: one that waits in the memory
// actor (its program paused, or short of room) holds up no other; so replies may come in
// another order than their commands — each carries its command's envelope request id. A client
// that sends WatchPrograms is told (ProgramWaiting frames) whenever a request of a `hold` program
// waits in the memory actor — a remote program scheduler's wake-up; the port registers itself
// as the memory actor's scheduler to hear it. The same event frames are also published on a PUB socket
// as two-part messages [topic, frame] with topic "block:<id>" (or "request:<id>" for events
// without a block), so other processes can follow a block being written.
#pragma once

#include <caf/fwd.hpp>
#include <string>

#include "base/status.h"

namespace zmq {
class context_t;
}

namespace chorus {

struct NodePortOptions {
  std::string endpoint = "tcp://127.0.0.1:5555";      // "tcp://127.0.0.1:*" picks a free port
  std::string events_endpoint = "tcp://127.0.0.1:*";  // the PUB socket; empty: none
  size_t max_frame_bytes = 64u << 20;                 // larger frames are refused with an error
};

struct NodePortEndpoints {
  std::string requests;  // ROUTER, ports resolved
  std::string events;    // PUB ("" if none)
};

// Binds the sockets and spawns the port's actor (a detached actor that owns them) into *out.
// `context` must outlive the actor. Errors: Errc::io naming the endpoint.
Result<NodePortEndpoints> spawn_node_port(caf::actor_system& sys, caf::actor batcher, zmq::context_t& context,
                                          const NodePortOptions& opts, caf::actor* out);

// The ZeroMQ feeders of a program's source and sink roles (actors/feeders.h has the others),
// each a detached actor that owns its socket:
//  - a SUB source: connects to `endpoint`, subscribes to `topic`, and sends the text of each
//    message's last part to `target` as (text_atom, text) — point it at a source role;
//  - a PUB sink: binds `endpoint` and publishes each (text_atom, text) it receives as
//    [topic, text]. Returns the bound endpoint.
Result<caf::actor> spawn_zmq_sub_source(caf::actor_system& sys, zmq::context_t& context,
                                        const std::string& endpoint, const std::string& topic,
                                        caf::actor target);
Result<std::string> spawn_zmq_pub_sink(caf::actor_system& sys, zmq::context_t& context,
                                       const std::string& endpoint, const std::string& topic,
                                       caf::actor* out);

}  // namespace chorus
