// A program's sinks: each with its outlet (its file, its PUB socket, the hook, or its stream's one
// console) and its role actor (Program::Sinks, actors/program_impl.h).
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <random>

#include "actors/atoms.h"
#include "actors/node_port.h"
#include "actors/placed_actor.h"
#include "actors/program_impl.h"
#include "actors/program_journal.h"
#include "net/role_codec.h"

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

uint64_t Program::Impl::new_host_key() {
  static std::mutex m;
  static std::mt19937_64 rng{std::random_device{}()};
  std::lock_guard<std::mutex> l(m);
  return rng() | 1;  // never 0
}

std::function<void(const std::string&)> Program::Impl::lost(const std::string& actor) const {
  // The report says so whenever it happens — also while the program ends, when a sink is given its
  // last text — and a program still running ends with the error.
  return [slot = ctl_slot, out = outcome, actor](const std::string& why) {
    {
      std::lock_guard<std::mutex> l(out->m);
      if (out->report.ended_by != "error") {
        out->report.ended_by = "error";
        out->report.error = actor + ": " + why;
      }
    }
    std::lock_guard<std::mutex> l(slot->m);
    if (slot->ctl) caf::anon_send(slot->ctl, role_atom::value, encode_role_failed(actor, why));
  };
}

Result<caf::actor> Program::Impl::place(const std::string& where, const std::string& actor,
                                        const topology::Placement& at, std::function<Frame(uint64_t)> host) {
  PlacedActorConfig pc;
  pc.program = host_key;
  pc.program_name = topo.name;
  pc.actor = actor;
  pc.where = at;
  pc.host = std::move(host);
  pc.placement = hooks.placement;
  const std::string named = actor == "sandbox" ? std::string("tools") : "actors." + actor;  // in messages
  pc.on_lost = lost(named);
  auto h = spawn_placed_actor(*sys, std::move(pc));
  if (!h) return make_error(h.error().code, where + named + ": " + h.error().message);
  return h;
}

Status Program::Sinks::make(caf::actor_system& sys, Program::Impl& im, const std::string& where,
                            const topology::Actor& a) {
  if (!a.node.empty() && im.hooks.placement) {  // on another node: its stand-in here
    if (a.sink == topology::SinkKind::callback)
      return make_error(Errc::invalid_argument,
                        where + "actors." + a.name +
                            ": a callback sink runs in its program's process: it cannot "
                            "be placed on " +
                            a.node.describe());
    const SinkSpecData spec = sink_spec(a);
    auto h = im.place(where, a.name, a.node, [key = im.host_key, name = im.topo.name, spec](uint64_t id) {
      return encode_host_sink(id, key, name, spec);
    });
    if (!h) return h.error();
    im.roles[a.name] = *h;
    im.sinks.push_back(*h);
    return Status::success();
  }
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
