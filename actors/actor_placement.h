// Where a program's placed actors run (docs/cluster.md, "Placing actors"): the nodes a topology's
// `node:` keys name, as the process that runs the program's roles sees them. The coordinator
// implements it over its cluster's members; a process with no cluster has none (ProgramHooks::
// placement null), and runs every actor itself.
#pragma once

#include <caf/actor.hpp>
#include <cstdint>
#include <string>

#include "base/status.h"
#include "topology/topology.h"

namespace chorus {

struct PlacedNode {
  std::string name;
  caf::actor link;  // carries frames to its node port (cluster/node_link.h)
};

class ActorPlacement {
 public:
  virtual ~ActorPlacement() = default;
  // A live node that satisfies `where`, other than `avoid` (""), waiting up to `wait_s` for one to
  // be up. Errors: none by then (Errc::not_found, naming the placement and the nodes there are).
  virtual Result<PlacedNode> find(const topology::Placement& where, const std::string& avoid,
                                  double wait_s) = 0;
  // What is hosted where, for GET /cluster: `actor` of program `program_name` is now on `node`
  // (`node` "": it is hosted nowhere any more).
  virtual void hosting(const std::string& program_name, const std::string& actor,
                       const std::string& node) = 0;
  // How long a placement waits for a node that satisfies it, at a program's start and after its
  // node was lost.
  virtual double wait_s() const { return 30; }
};

}  // namespace chorus
