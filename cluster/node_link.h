// A link to one node: an actor that stands for a remote node's memory actor in this process.
// Whoever would talk to a local memory actor — (frame_atom, frame) answered by a reply frame,
// events as (event_atom, frame) to the requester — talks to the link the same way, and the link
// carries the frames over one ZeroMQ DEALER connection to the node port (actors/node_port.h).
//
// - Each command is sent under an envelope id of the link's own and its reply matched by that id
//   (the node may answer a waiting request long after later ones), then handed back under the
//   requester's id. Events are routed by the engine request id of the Submitted reply.
// - The link sends a Heartbeat frame every heartbeat_s and reads the node's answer (its pool);
//   ZeroMQ's own ZMTP heartbeats run on the connection too. A node that has not answered for
//   dead_after_s is **down**: every command waiting for it is answered with an Errc::io error
//   naming the node, every request in flight ends with reason `error` and `node_lost` set
//   (encode_node_lost, net/codec.h: a gateway resumes such a turn elsewhere), and new commands are
//   refused at once until the node answers again.
// - A HostFeed (a source's feed hosted on the node, actors/actor_host.h) streams too: after its
//   Hosted answer, the Deliver frames the node sends under its id go to its requester as
//   (event_atom, frame) — and so do those the node sends before that answer (it starts the feed,
//   then answers); when the node goes down the requester gets an Error frame (Errc::io).
//   A HostProbe (a probe's role hosted there) streams its Relay frames the same way.
// - Frames from the node are verified (FlatBuffers verifier, size) before anything reads them; a
//   bad one is logged and dropped.
// - With CURVE keys the connection is encrypted and the node checks this process's public key; a
//   node that refuses it never answers, so the link stays down (and the node logs the refusal).
#pragma once

#include <atomic>
#include <caf/fwd.hpp>
#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "net/curve.h"

namespace zmq {
class context_t;
}

namespace chorus::cluster {

struct NodeLinkOptions {
  std::string name;      // the node's name, in messages
  std::string endpoint;  // its node port
  double heartbeat_s = 0.5;
  double dead_after_s = 2.0;
  size_t max_frame_bytes = 64u << 20;
  // CURVE (net/curve.h): the node's public key and this process's key pair; both empty: plaintext.
  std::string server_key;
  CurveKeys curve;
};

// What the link knows of its node's health, for the coordinator (written by the link only).
struct NodeHealth {
  std::atomic<bool> up{false};         // answered within dead_after_s
  std::atomic<int64_t> last_ms{0};     // unix ms of the last answer
  std::atomic<int64_t> rtt_us{0};      // the last heartbeat's round trip
  std::atomic<int64_t> pages_used{0};  // the node's KV pool at the last heartbeat
  std::atomic<int64_t> pages_total{0};
  std::atomic<int64_t> in_flight{0};  // commands waiting for an answer + requests streaming
};

// Connects (ZeroMQ connects lazily: an absent node is simply down until it answers) and spawns
// the link, a detached actor that owns the socket. `context` must outlive it.
Result<caf::actor> spawn_node_link(caf::actor_system& sys, zmq::context_t& context,
                                   const NodeLinkOptions& opts, std::shared_ptr<NodeHealth> health);

}  // namespace chorus::cluster
