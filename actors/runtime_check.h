// A self-test of the actor runtime's wiring: starts a CAF actor system with the given
// scheduler threads, spawns an actor that answers a hello request with an encoded envelope,
// and verifies the reply. Used by `chorus info --check-runtime` and the tests. CAF stays
// out of this header.
#pragma once

#include <string>

#include "base/status.h"

namespace chorus {

struct RuntimeCheck {
  std::string caf_version;  // e.g. "0.17.6"
  std::string reply;        // the node id that came back through the actor
};

Result<RuntimeCheck> check_actor_runtime(int scheduler_threads);

}  // namespace chorus
