// An actor of a program placed on another node (actors/actor_placement.h): in the program's
// process it stands for the actor — a sink, or the program's tool sandbox — so the roles talk to
// it as to a local one; on its node the node port hosts the real one (actors/actor_host.h).
//
// - Made: a node that satisfies the placement is found (waiting up to the placement's wait) and
//   asked to host the actor (HostSink / HostSandbox); an error names the placement.
// - Each role message it gets goes to the node inside a Deliver, one at a time and in order; a
//   sink's text counts as delivered once the node acknowledges it, a sandbox's answer (ToolResult)
//   comes back to the asker.
// - The node lost (its link down, its answer an error): the actor is hosted again on another node
//   that satisfies the placement — or the same one once it is back — and what was not acknowledged
//   goes again, in order: nothing is lost, and a text whose acknowledgement was lost with the node
//   may be written twice, once in each place. When no node satisfies it within the wait,
//   `on_lost` says why (the program ends with an error naming the placement) and the actor drops
//   what comes after (a tool call then answers with that error).
// - When it ends (the program's teardown) it asks its node to end what it hosts of the program
//   (Unhost).
// A detached actor: it waits for its node's answers.
#pragma once

#include <caf/actor.hpp>
#include <caf/fwd.hpp>
#include <functional>
#include <future>
#include <memory>
#include <string>

#include "actors/actor_placement.h"
#include "net/hosting_codec.h"

namespace chorus {
namespace program_roles {
struct ProbeRoleConfig;
}

struct PlacedActorConfig {
  uint64_t program = 0;      // the program's id (what the node keys its hosted actors by)
  std::string program_name;  // for messages and GET /cluster
  std::string actor;         // the sink's name, or the sandbox's
  topology::Placement where;
  // The frame that asks a node to host it (encode_host_sink / encode_host_sandbox), under `id`.
  std::function<Frame(uint64_t id)> host;
  std::shared_ptr<ActorPlacement> placement;
  std::function<void(const std::string& why)> on_lost;
};

// Hosts the actor on a node and spawns its stand-in. Errors: no node satisfies the placement
// within its wait, or the node refused to host it (its reason).
Result<caf::actor> spawn_placed_actor(caf::actor_system& sys, PlacedActorConfig cfg);

// A source's feed placed on another node (HostFeed: its file or ZeroMQ socket read there): what
// it reads comes back to `source` as it would from a local feeder (RoleText lines, FeedEnded).
// When its node is lost the feed is hosted again on a node that satisfies the placement (what
// was read there meanwhile is the new node's: a feed is live input), or `on_lost` says why none
// does. Errors: as spawn_placed_actor's, for its first hosting.
Result<caf::actor> spawn_placed_feed(caf::actor_system& sys, PlacedActorConfig cfg, caf::actor source);

// A probe's role placed on another node (HostProbe: its triggers, threshold and firing run
// there): the stand-in here is the probe to its controller and stands for it at `batcher` —
// what the role sends its controller and the engine comes up as Relay frames and goes on from
// here (the controller hears it from the stand-in), the engine's answers and events and the
// controller's messages go down. When its node is lost the probe is hosted again on a node that
// satisfies the placement and given again what shaped it (its start, its upstream, the `.done`
// events it heard), its start carrying what the lost one's questions out asked about: it asks
// them again first (the lost one's answers are dropped; one judged just as its node was lost may
// fire twice). A patch retiring it ends it at once (a probe hands nothing on). `started` says how
// its first hosting went (an error names the placement); the actor is returned either way, and
// has ended after a failed start.
caf::actor spawn_placed_probe(caf::actor_system& sys, PlacedActorConfig cfg, caf::actor batcher,
                              std::shared_ptr<std::promise<Status>> started);

// A probe's role as HostProbe carries it (its question as a Probe frame, a {{event}} question's
// template), and back as the role a node hosts (relayed; no tokenizer: the blocks' node tokenizes
// the filled-in question). Errors: a question that is not a Probe frame.
ProbeSpecData probe_spec(const program_roles::ProbeRoleConfig& pc);
Result<program_roles::ProbeRoleConfig> probe_config(const ProbeSpecData& d);

// The specs of a topology's sink, tools and source feed, as hosting frames carry them.
SinkSpecData sink_spec(const topology::Actor& sink);
ToolSpecData tool_spec(const topology::Tool& tool);
FeedSpecData feed_spec(const topology::Actor& source);

}  // namespace chorus
