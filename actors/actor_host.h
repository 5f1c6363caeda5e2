// A node's part in placing actors (docs/cluster.md, "Placing actors"): the node port hands it
// the hosting frames (schemas/hosting.fbs) a coordinator sends, and it hosts there the sinks,
// sources' feeds and tool sandboxes of programs that run elsewhere — their role actors made here from the
// specs the frames carry — and delivers them the programs' role messages. Every frame is answered under its
// request's id: HostSink / HostSandbox with Hosted or an Error, a Deliver with a Deliver (a sandbox's answer;
// a sink's empty ToolResult once the text is handed to it), Unhost with Hosted. A feed answers HostFeed with
// Hosted, then sends what it reads to the asker as Deliver frames under that request's id (RoleText lines,
// then FeedEnded; a file it cannot read: RoleFailed). A probe answers HostProbe with Hosted, then sends its
// Relay frames (to its controller, to the engine, a watch) the same way; a Relay down to it is answered
// with Hosted once handed over. Internal to actors/: the node port owns one, on its thread.
#pragma once

#include <caf/actor.hpp>
#include <caf/fwd.hpp>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "net/hosting_codec.h"

namespace zmq {
class context_t;
}

namespace chorus {

struct ActorHostOptions {
  std::string node;  // this node's name (Hosted says it)
  std::string sandbox_base = "/tmp/chorus-sandboxes";
  // Tool sandboxes without the isolation this machine lacks (Sandbox::missing_isolation());
  // refused otherwise, naming what is missing.
  bool unsafe_tools = false;
};

class ActorHost {
 public:
  // `port`: the node port's actor, which sends (answer_atom, client, frame) on to the client.
  // `context` (ZeroMQ sinks' sockets) must outlive it.
  ActorHost(caf::actor_system& sys, caf::actor port, zmq::context_t& context, ActorHostOptions opts);
  ~ActorHost();  // every hosted actor ends: sinks write out what they were given first

  // A hosting frame from `client`, already verified.
  void handle(const std::string& client, const HostingMessage& m);
  // The programs and actors hosted now: (program, actor) pairs.
  std::vector<std::pair<uint64_t, std::string>> hosted() const;

 private:
  struct Hosted {
    caf::actor actor;
    bool sink = false;            // takes one-way messages (acknowledged by the host)
    std::vector<caf::actor> own;  // what ends with it (a ZeroMQ socket's actor)
  };
  void answer(const std::string& client, Frame f);
  Result<Hosted> host_sink(const HostingMessage& m);
  Result<Hosted> host_sandbox(const HostingMessage& m);
  Result<Hosted> host_feed(const std::string& client, const HostingMessage& m);
  Result<Hosted> host_probe(const std::string& client, const HostingMessage& m);
  void deliver(const std::string& client, const HostingMessage& m);
  void unhost(uint64_t program, const std::string& actor);  // "": all of the program's
  caf::actor console(bool err);  // one per stream, shared by the hosted sinks that write there

  caf::actor_system& sys_;
  caf::actor port_;
  zmq::context_t& context_;
  ActorHostOptions opts_;
  std::map<std::pair<uint64_t, std::string>, Hosted> hosted_;
  caf::actor consoles_[2];
  int sandboxes_ = 0;
};

}  // namespace chorus
