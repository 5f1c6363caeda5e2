// A program's sinks: each with its outlet (its file, its PUB socket, the hook, or its stream's one
// console) and its role actor (Program::Sinks, actors/program_impl.h).
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "actors/node_port.h"
#include "actors/program_impl.h"
#include "actors/program_journal.h"

namespace chorus {

using namespace program_roles;

Status Program::Sinks::outlet(caf::actor_system& sys, Program::Impl& im, const std::string& where,
                              const topology::Actor& a, SinkRoleConfig& sc) {
  const ProgramHooks& hooks = im.hooks;
  const std::string at = where + "actors." + a.name + ": ";
  switch (a.sink) {
    case topology::SinkKind::file: {
      // Truncated, unless an earlier run of the program wrote to it (ProgramHooks::journal).
      const bool wrote = hooks.journal && hooks.journal->delivered(a.name) > 0;
      std::FILE* f = std::fopen(a.path.c_str(), wrote ? "a" : "w");
      if (!f) return make_error(Errc::io, at + "cannot open " + a.path + ": " + std::strerror(errno));
      sc.file = std::shared_ptr<std::FILE>(f, [](std::FILE* p) { std::fclose(p); });
      break;
    }
    case topology::SinkKind::zmq: {
      if (!im.zmq_ctx) im.zmq_ctx = std::make_unique<zmq::context_t>(1);
      caf::actor pub;
      auto bound = spawn_zmq_pub_sink(sys, *im.zmq_ctx, a.endpoint, a.topic, &pub);
      if (!bound) return make_error(bound.error().code, at + bound.error().message);
      im.outlets.push_back(pub);
      sc.zmq = pub;
      break;
    }
    case topology::SinkKind::callback:
      if (!hooks.sink)
        return make_error(Errc::invalid_argument,
                          at + "a callback sink needs a sink hook (embedded use only)");
      sc.callback = hooks.sink;
      break;
    case topology::SinkKind::stdout_stream:
    case topology::SinkKind::stderr_stream: {
      caf::actor& console = im.consoles[a.sink];
      if (!console) {
        SinkRoleConfig cc;
        cc.name = a.sink == topology::SinkKind::stdout_stream ? "stdout" : "stderr";
        cc.kind = a.sink;
        cc.callback = hooks.console;  // null: the terminal
        console = spawn_sink(sys, std::move(cc));
        im.outlets.push_back(console);
      }
      sc.console = console;
      break;
    }
  }
  return Status::success();
}

Status Program::Sinks::make(caf::actor_system& sys, Program::Impl& im, const std::string& where,
                            const topology::Actor& a) {
  SinkRoleConfig sc;
  sc.name = a.name;
  sc.kind = a.sink;
  sc.prefix = a.prefix;
  if (Status s = outlet(sys, im, where, a, sc); !s.ok()) return s;
  if (!sc.console) sc.journal = im.hooks.journal;  // a file, a socket, a callback: the outside
  im.roles[a.name] = spawn_sink(sys, std::move(sc));
  im.sinks.push_back(im.roles[a.name]);
  return Status::success();
}

}  // namespace chorus
