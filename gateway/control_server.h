// The control endpoint of `chorus run --control-port P`: a client lists the running programs and
// patches one (topologies/README.md, "Patches"), on 127.0.0.1 (or --control-host):
//   GET  /health                  {"status": "ok"}
//   GET  /programs                [{"name", "state", "blocks", "actors": [{"name", "kind"}]}, ...]
//   GET  /programs/NAME           one of them; 404 when there is none of that name
//   POST /programs/NAME/patch     the body is the patch (YAML or JSON; any Content-Type, but a
//                                 form-encoded one is cut at 8 KiB): 200 {"applied": SUMMARY};
//                                 400 {"error": {"message"}} for a patch refused (nothing changed),
//                                 404 no such program, 409 it has ended (or not started: waiting
//                                 to be admitted), 429 past the patch limit,
//                                 413 a body past 1 MiB
// There is no authentication: whoever reaches the port changes the programs. Bind it to loopback
// (the default) or to a network only trusted clients reach.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"

namespace chorus {

namespace topology {
struct Topology;
}

// What the server asks of the process that runs the programs (each call from a listener thread).
struct ProgramControl {
  struct Entry {
    std::string name;   // as `chorus run` labels it: the topology's name, NAME#k for copies
    std::string state;  // "waiting" (not admitted yet), "running", "ended"
  };
  std::function<std::vector<Entry>()> list;
  // The program's topology as it runs now; not_found when there is no such program, or it has
  // not started.
  std::function<Result<topology::Topology>(const std::string& name)> topology;
  // Program::patch of that program; not_found when there is none of that name.
  std::function<Result<std::string>(const std::string& name, const std::string& patch)> patch;
};

class ControlServer {
 public:
  // Listens on host:port (0: any free port) until destroyed. Errors (io): cannot bind.
  static Result<std::unique_ptr<ControlServer>> start(const std::string& host, int port,
                                                      ProgramControl control);
  ~ControlServer();
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;
  int port() const;

 private:
  struct Impl;
  explicit ControlServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace chorus
