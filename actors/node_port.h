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
// as the memory actor's scheduler to hear it. A client that sends WatchBlock is told (BlockGrown
// frames) after each step in which the block's cached length changed — a probe that watches a
// block from another process (the coordinator's topology programs). The same event frames are also published
// on a PUB socket as two-part messages [topic, frame] with topic "block:<id>" (or "request:<id>" for events
// without a block), so other processes can follow a block being written.
//
// Security (docs/security.md): with a CURVE key pair both sockets are CURVE servers and only the
// allowed client keys get in (a CurveGate, net/curve.h, answers the handshakes; refusals are
// logged); a client without CURVE fails the handshake and is logged too. Without keys the port
// speaks plaintext, which is refused unless both endpoints are loopback (is_loopback_endpoint).
#pragma once

#include <caf/fwd.hpp>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "net/curve.h"

namespace zmq {
class context_t;
}

namespace chorus {

struct NodePortOptions {
  std::string endpoint = "tcp://127.0.0.1:5555";  // "tcp://127.0.0.1:*" picks a free port
  // Hosting actors of programs run elsewhere (HostSink, HostSandbox, Deliver, Unhost:
  // actors/actor_host.h): this node's name in those answers, and its tool sandboxes' settings.
  std::string node_name;
  bool unsafe_tools = false;
  std::string sandbox_base = "/tmp/chorus-sandboxes";
  std::string events_endpoint = "tcp://127.0.0.1:*";  // the PUB socket; empty: none
  size_t max_frame_bytes = 64u << 20;                 // larger frames are refused with an error
  CurveKeys curve;                  // the node's key pair; empty: plaintext, on loopback only
  std::vector<AllowedKey> allowed;  // with `curve`: the clients let in (at least one)
};

struct NodePortEndpoints {
  std::string requests;                   // ROUTER, ports resolved
  std::string events;                     // PUB ("" if none)
  std::string curve_key;                  // with CURVE: the node's public key (z85), else ""
  std::shared_ptr<const CurveGate> gate;  // with CURVE: its counts of accepted and refused peers
};

// Binds the sockets and spawns the port's actor (a detached actor that owns them) into *out.
// `batcher` null: an actors-only node (`chorus node --no-model`) — it answers heartbeats and
// hosting frames, and refuses every engine command naming itself.
// `context` must outlive the actor. Errors: Errc::io naming the endpoint; Errc::invalid_argument
// for plaintext on an endpoint other machines reach, or CURVE with nobody allowed.
Result<NodePortEndpoints> spawn_node_port(caf::actor_system& sys, caf::actor batcher, zmq::context_t& context,
                                          const NodePortOptions& opts, caf::actor* out);

// The ZeroMQ feeders of a program's source and sink roles (actors/feeders.h has the others),
// each a detached actor that owns its socket:
//  - a SUB source: connects to `endpoint`, subscribes to `topic`, and sends the text of each
//    message's last part to `target` as a RoleText (schemas/roles.fbs) — point it at a source
//    role;
//  - a PUB sink: binds `endpoint` and publishes the text of each RoleText it receives as
//    [topic, text]. Returns the bound endpoint.
Result<caf::actor> spawn_zmq_sub_source(caf::actor_system& sys, zmq::context_t& context,
                                        const std::string& endpoint, const std::string& topic,
                                        caf::actor target);
Result<std::string> spawn_zmq_pub_sink(caf::actor_system& sys, zmq::context_t& context,
                                       const std::string& endpoint, const std::string& topic,
                                       caf::actor* out);

}  // namespace chorus
