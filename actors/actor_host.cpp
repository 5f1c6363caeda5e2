#include "actors/actor_host.h"

#include <spdlog/spdlog.h>
#include <caf/all.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <zmq.hpp>

#include "actors/atoms.h"
#include "actors/feeders.h"
#include "actors/node_port.h"
#include "actors/placed_actor.h"
#include "actors/program_roles.h"
#include "actors/role_messages.h"
#include "actors/sandbox.h"
#include "net/codec.h"
#include "net/role_codec.h"
#include "net/wire.h"
#include "topology/topology.h"

namespace chorus {
namespace {

topology::Tool tool_of(const ToolSpecData& d) {
  topology::Tool t;
  t.name = d.name;
  t.command = d.command;
  t.setup = d.setup;
  t.timeout_s = d.timeout_s;
  t.max_output_bytes = static_cast<size_t>(d.max_output_bytes);
  t.max_dir_bytes = d.max_dir_bytes;
  for (const std::string& kv : d.env)
    if (const size_t eq = kv.find('='); eq != std::string::npos) t.env[kv.substr(0, eq)] = kv.substr(eq + 1);
  t.network = d.network;
  t.read = d.read;
  t.write = d.write;
  return t;
}

// A sandbox's answer, on its way back: asks the sandbox, sends the answer to the port as the
// Deliver that answers the client's (a tool may run for seconds: the port does not wait).
caf::behavior ask_sandbox(caf::event_based_actor* self, caf::actor port, caf::actor sandbox,
                          std::string client, HostingMessage m) {
  self->request(sandbox, caf::infinite, role_ask_atom::value, m.frame)
      .then(
          [=](const Frame& reply) {
            self->send(port, answer_atom::value, client,
                       encode_deliver(m.request_id, m.program, m.actor, reply));
            self->quit();
          },
          [=](caf::error& e) {
            self->send(port, answer_atom::value, client,
                       encode_deliver(
                           m.request_id, m.program, m.actor,
                           encode_tool_result("error: the sandbox did not answer: " + caf::to_string(e))));
            self->quit();
          });
  return {};
}

// A hosted feed's lines, on their way to the asker: each frame the feeder sends it goes to the
// port as a Deliver under the HostFeed's request id.
caf::behavior feed_relay(caf::event_based_actor* self, caf::actor port, std::string client,
                         HostingMessage m) {
  return {
      [=](role_atom, const Frame& f) {
        self->send(port, answer_atom::value, client, encode_deliver(m.request_id, m.program, m.actor, f));
      },
      [=](stop_atom) { self->quit(); },
  };
}

// A hosted probe's end of its relay: the probe takes it for its controller and its batcher. What
// the probe sends goes up to its program as Relay frames under the HostProbe's request id (an
// engine request waits here for its answer to come down); what comes down (relay_atom) goes to
// the probe as if from its controller or its batcher. The probe is linked to it: they end together.
struct RoleRelayState {
  caf::actor role;
  uint64_t seq = 0;
  std::map<uint64_t, caf::response_promise> asked;  // engine requests up, by seq
};

caf::behavior role_relay(caf::stateful_actor<RoleRelayState>* self, caf::actor port, std::string client,
                         HostingMessage m, program_roles::ProbeRoleConfig probe) {
  self->state.role =
      program_roles::spawn_probe(self->system(), caf::actor_cast<caf::actor>(self), std::move(probe));
  self->link_to(self->state.role);
  auto up = [=](RelayTo to, uint64_t seq, const Frame& f, const std::string& text = {}) {
    self->send(port, answer_atom::value, client,
               encode_relay(m.request_id, m.program, m.actor, to, seq, f, text));
  };
  return {
      [=](frame_atom, const Frame& f, const std::string& asked) -> caf::result<Frame> {
        auto& st = self->state;
        auto promise = self->make_response_promise();
        st.asked.emplace(++st.seq, promise);
        up(RelayTo::engine, st.seq, f, asked);
        return promise;
      },
      [=](role_atom, const Frame& f) { up(RelayTo::role, 0, f); },
      [=](subscribe_atom, BlockId block) { up(RelayTo::watch, static_cast<uint64_t>(block), {}); },
      [=](relay_atom, int to, uint64_t seq, const Frame& f) {
        auto& st = self->state;
        switch (static_cast<RelayTo>(to)) {
          case RelayTo::role:
            if (auto r = decode_role(f); r && r->kind == RoleKind::start)
              self->send(st.role, start_atom::value, caf::actor_cast<caf::actor>(self), f);
            else
              self->send(st.role, role_atom::value, f);
            break;
          case RelayTo::answer:
            if (auto it = st.asked.find(seq); it != st.asked.end()) {
              it->second.deliver(f);
              st.asked.erase(it);
            }
            break;
          case RelayTo::event: self->send(st.role, event_atom::value, f); break;
          case RelayTo::engine:
          case RelayTo::watch: break;  // (up only)
        }
      },
  };
}

}  // namespace

ActorHost::ActorHost(caf::actor_system& sys, caf::actor port, zmq::context_t& context, ActorHostOptions opts)
    : sys_(sys), port_(std::move(port)), context_(context), opts_(std::move(opts)) {}

ActorHost::~ActorHost() {
  std::vector<uint64_t> programs;
  for (const auto& [key, h] : hosted_) programs.push_back(key.first);
  for (uint64_t p : programs) unhost(p, "");
  for (const caf::actor& c : consoles_)
    if (c) caf::anon_send(c, stop_atom::value);
}

std::vector<std::pair<uint64_t, std::string>> ActorHost::hosted() const {
  std::vector<std::pair<uint64_t, std::string>> out;
  for (const auto& [key, h] : hosted_) out.push_back(key);
  return out;
}

void ActorHost::answer(const std::string& client, Frame f) {
  caf::anon_send(port_, answer_atom::value, client, std::move(f));
}

caf::actor ActorHost::console(bool err) {
  caf::actor& c = consoles_[err ? 1 : 0];
  if (!c) {
    program_roles::SinkRoleConfig cc;
    cc.name = err ? "stderr" : "stdout";
    cc.kind = err ? topology::SinkKind::stderr_stream : topology::SinkKind::stdout_stream;
    c = program_roles::spawn_sink(sys_, std::move(cc));
  }
  return c;
}

Result<ActorHost::Hosted> ActorHost::host_sink(const HostingMessage& m) {
  const SinkSpecData& s = m.sink;
  const std::string at = "program " + m.program_name + ", actors." + s.name + ": ";
  program_roles::SinkRoleConfig sc;
  sc.name = s.name;
  sc.prefix = s.prefix;
  Hosted h;
  h.sink = true;
  switch (s.to) {
    case SinkSpecData::To::file: {
      sc.kind = topology::SinkKind::file;
      std::FILE* f = std::fopen(s.path.c_str(), "a");  // a sink hosted again after a loss appends
      if (!f) return make_error(Errc::io, at + "cannot open " + s.path + ": " + std::strerror(errno));
      sc.file = std::shared_ptr<std::FILE>(f, [](std::FILE* p) { std::fclose(p); });
      break;
    }
    case SinkSpecData::To::zmq: {
      sc.kind = topology::SinkKind::zmq;
      caf::actor pub;
      auto bound = spawn_zmq_pub_sink(sys_, context_, s.endpoint, s.topic, &pub);
      if (!bound) return make_error(bound.error().code, at + bound.error().message);
      sc.zmq = pub;
      h.own.push_back(pub);
      break;
    }
    case SinkSpecData::To::stdout_stream:
    case SinkSpecData::To::stderr_stream: {
      const bool err = s.to == SinkSpecData::To::stderr_stream;
      sc.kind = err ? topology::SinkKind::stderr_stream : topology::SinkKind::stdout_stream;
      sc.console = console(err);
      break;
    }
  }
  h.actor = program_roles::spawn_sink(sys_, std::move(sc));
  return h;
}

Result<ActorHost::Hosted> ActorHost::host_sandbox(const HostingMessage& m) {
  if (const std::string missing = Sandbox::missing_isolation(); !missing.empty() && !opts_.unsafe_tools)
    return make_error(Errc::unsupported, "node `" + opts_.node + "` cannot host program " + m.program_name +
                                             "'s tools: this machine lacks " + missing);
  std::vector<topology::Tool> tools;
  for (const ToolSpecData& d : m.tools) tools.push_back(tool_of(d));
  Hosted h;
  h.actor = program_roles::spawn_tools(sys_, opts_.sandbox_base,
                                       m.program_name + "-" + m.actor + "-" + std::to_string(++sandboxes_),
                                       std::move(tools));
  return h;
}

Result<ActorHost::Hosted> ActorHost::host_feed(const std::string& client, const HostingMessage& m) {
  Hosted h;
  h.actor = sys_.spawn(feed_relay, port_, client, m);
  const FeedSpecData& f = m.feed;
  if (f.from == FeedSpecData::From::zmq) {
    auto sub = spawn_zmq_sub_source(sys_, context_, f.endpoint, f.topic, h.actor);
    if (!sub) {
      caf::anon_send(h.actor, stop_atom::value);
      return make_error(sub.error().code,
                        "program " + m.program_name + ", actors." + m.actor + ": " + sub.error().message);
    }
    h.own.push_back(*sub);
  } else {
    h.own.push_back(f.follow ? spawn_file_tail(sys_, f.path, h.actor, true)
                             : program_roles::spawn_file_reader(sys_, f.path, h.actor, m.actor, h.actor));
  }
  h.own.push_back(h.actor);
  return h;
}

Result<ActorHost::Hosted> ActorHost::host_probe(const std::string& client, const HostingMessage& m) {
  auto pc = probe_config(m.probe);
  if (!pc)
    return make_error(pc.error().code,
                      "program " + m.program_name + ", actors." + m.probe.name + ": " + pc.error().message);
  Hosted h;
  h.actor = sys_.spawn(role_relay, port_, client, m, std::move(*pc));
  return h;
}

void ActorHost::handle(const std::string& client, const HostingMessage& m) {
  using Kind = HostingMessage::Kind;
  switch (m.kind) {
    case Kind::host_sink:
    case Kind::host_sandbox:
    case Kind::host_feed:
    case Kind::host_probe: {
      const std::pair key{m.program, m.actor};
      if (hosted_.count(key)) {  // the coordinator asks again (an answer it lost): it is here
        answer(client, encode_hosted(m.request_id, m.program, m.actor, opts_.node));
        return;
      }
      auto h = m.kind == Kind::host_sink    ? host_sink(m)
               : m.kind == Kind::host_feed  ? host_feed(client, m)
               : m.kind == Kind::host_probe ? host_probe(client, m)
                                            : host_sandbox(m);
      if (!h) {
        spdlog::warn("node `{}`: not hosting {}: {}", opts_.node, m.actor, h.error().message);
        answer(client, encode_error_envelope(m.request_id, h.error()));
        return;
      }
      hosted_[key] = std::move(*h);
      spdlog::info("node `{}`: hosting program {}'s {} `{}`", opts_.node, m.program_name,
                   m.kind == Kind::host_sink    ? "sink"
                   : m.kind == Kind::host_feed  ? "source's feed"
                   : m.kind == Kind::host_probe ? "probe"
                                                : "tool sandbox",
                   m.actor);
      answer(client, encode_hosted(m.request_id, m.program, m.actor, opts_.node));
      return;
    }
    case Kind::deliver: return deliver(client, m);
    case Kind::relay: {  // down to a hosted role: handed over in order, acknowledged at once
      auto it = hosted_.find({m.program, m.actor});
      if (it == hosted_.end() || it->second.sink) {
        answer(client,
               encode_error_envelope(m.request_id,
                                     make_error(Errc::not_found, "node `" + opts_.node + "` hosts no role `" +
                                                                     m.actor + "` of that program")));
        return;
      }
      caf::anon_send(it->second.actor, relay_atom::value, static_cast<int>(m.to), m.seq, m.frame);
      answer(client, encode_hosted(m.request_id, m.program, m.actor, opts_.node));
      return;
    }
    case Kind::unhost:
      unhost(m.program, m.actor);
      answer(client, encode_hosted(m.request_id, m.program, m.actor, opts_.node));
      return;
    case Kind::hosted:
      answer(client, encode_error_envelope(m.request_id, make_error(Errc::invalid_argument,
                                                                    "Hosted is an answer, not a command")));
      return;
  }
}

void ActorHost::deliver(const std::string& client, const HostingMessage& m) {
  auto it = hosted_.find({m.program, m.actor});
  if (it == hosted_.end()) {
    answer(client,
           encode_error_envelope(m.request_id,
                                 make_error(Errc::not_found, "node `" + opts_.node + "` hosts no actor `" +
                                                                 m.actor + "` of that program")));
    return;
  }
  if (it->second.sink) {  // handed over in order; acknowledged at once
    caf::anon_send(it->second.actor, role_atom::value, m.frame);
    answer(client, encode_deliver(m.request_id, m.program, m.actor, encode_tool_result("")));
    return;
  }
  sys_.spawn(ask_sandbox, port_, it->second.actor, client, m);
}

void ActorHost::unhost(uint64_t program, const std::string& actor) {
  for (auto it = hosted_.begin(); it != hosted_.end();) {
    if (it->first.first != program || (!actor.empty() && it->first.second != actor)) {
      ++it;
      continue;
    }
    if (it->second.sink)
      caf::anon_send(it->second.actor, stop_atom::value);  // after what it was given
    else
      caf::anon_send_exit(it->second.actor, caf::exit_reason::user_shutdown);
    for (const caf::actor& a : it->second.own) caf::anon_send(a, stop_atom::value);
    spdlog::info("node `{}`: program {} no longer hosts `{}` here", opts_.node, program, it->first.second);
    it = hosted_.erase(it);
  }
}

}  // namespace chorus
