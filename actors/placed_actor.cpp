#include "actors/placed_actor.h"

#include <spdlog/spdlog.h>
#include <caf/all.hpp>
#include <chrono>
#include <future>
#include <set>
#include <thread>

#include "actors/atoms.h"
#include "actors/program_roles.h"
#include "net/codec.h"
#include "net/role_codec.h"
#include "net/wire.h"

namespace chorus {
namespace {

using Clock = std::chrono::steady_clock;

// The node's answer to `frame` through its link, as a hosting message; a refusal, or the link's
// word that the node is out of reach, as an error (its code says which: Errc::io is a lost node).
Result<HostingMessage> ask_node(caf::blocking_actor* self, const caf::actor& link, Frame frame) {
  Result<HostingMessage> out = make_error(Errc::io, "no answer");
  self->request(link, caf::infinite, frame_atom::value, std::move(frame))
      .receive(
          [&](const Frame& reply) {
            if (auto r = decode_reply(reply); r && r->kind == ReplyKind::error)
              out = make_error(r->code, r->text);
            else
              out = decode_hosting(reply);
          },
          [&](caf::error& e) { out = make_error(Errc::io, caf::to_string(e)); });
  return out;
}

// A node that satisfies the placement hosts the actor: found and asked, again while nodes are
// out of reach, until the placement's wait is over. A node's refusal ends the search at once.
Result<PlacedNode> host_somewhere(caf::blocking_actor* self, const PlacedActorConfig& c, double wait_s) {
  const auto until = Clock::now() + std::chrono::duration<double>(wait_s);
  std::string last;
  for (;;) {
    const double left = std::chrono::duration<double>(until - Clock::now()).count();
    auto node = c.placement->find(c.where, "", std::max(0.0, left));
    if (!node)
      return make_error(node.error().code, "placed on " + c.where.describe() + ": " + node.error().message +
                                               (last.empty() ? "" : "; " + last));
    auto hosted = ask_node(self, node->link, c.host(0));
    if (hosted && hosted->kind == HostingMessage::Kind::hosted) {
      c.placement->hosting(c.program_name, c.actor, node->name);
      return *node;
    }
    const Error e = hosted ? make_error(Errc::internal, "an answer that is not Hosted") : hosted.error();
    if (e.code != Errc::io)  // refused (no isolation there, a file it cannot open...): say so
      return make_error(e.code, "on node `" + node->name + "`: " + e.message);
    last = "node `" + node->name + "` is out of reach";
    if (Clock::now() >= until)
      return make_error(Errc::not_found, "placed on " + c.where.describe() + ": " + last);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// Its first hosting, which `started` hears of.
Result<PlacedNode> host_first(caf::blocking_actor* self, const PlacedActorConfig& c,
                              std::promise<Status>& started) {
  auto node = host_somewhere(self, c, c.placement->wait_s());
  started.set_value(node ? Status::success() : Status(node.error()));
  return node;
}

// No node satisfies the placement any more: `lost` says why, and the program hears it.
void lost_for_good(const PlacedActorConfig& c, std::string& lost, const std::string& why) {
  lost = why;
  c.placement->hosting(c.program_name, c.actor, "");
  spdlog::error("program {}: {}", c.program_name, lost);
  if (c.on_lost) c.on_lost(lost);
}

// It ends: its node (while it still had one) ends what it hosts of it.
void leave(caf::blocking_actor* self, const PlacedActorConfig& c, const caf::actor& link,
           const std::string& lost) {
  if (!lost.empty()) return;
  (void)ask_node(self, link, encode_unhost(0, c.program, c.actor));
  c.placement->hosting(c.program_name, c.actor, "");
}

void placed_main(caf::blocking_actor* self, PlacedActorConfig c, PlacedNode node) {
  std::string lost;  // why it is hosted nowhere ("" : it is)
  // One role message to the node, sent again after the actor is hosted again wherever its node
  // was lost; the node's answer (the role frame inside its Deliver), or why there is none.
  auto deliver = [&](const Frame& f) -> Result<Frame> {
    for (;;) {
      if (!lost.empty()) return make_error(Errc::io, lost);
      auto r = ask_node(self, node.link, encode_deliver(0, c.program, c.actor, f));
      if (r && r->kind == HostingMessage::Kind::deliver) return r->frame;
      const Error e = r ? make_error(Errc::internal, "an answer that is not a Deliver") : r.error();
      if (e.code != Errc::io && e.code != Errc::not_found) return e;  // its own refusal
      spdlog::warn("program {}: actors.{} on node `{}`: {}: hosting it again ({})", c.program_name, c.actor,
                   node.name, e.message, c.where.describe());
      auto again = host_somewhere(self, c, c.placement->wait_s());
      if (!again) {
        lost_for_good(c, lost, again.error().message);
        return again.error();
      }
      node = *again;
    }
  };
  for (bool running = true; running;)
    self->receive([&](role_atom, const Frame& f) { (void)deliver(f); },
                  [&](role_ask_atom, const Frame& f) -> Frame {
                    auto r = deliver(f);
                    return r ? *r : encode_tool_result("error: " + r.error().message);
                  },
                  [&](stop_atom) { running = false; },  // after what came before it
                  [&](caf::exit_msg&) { running = false; });
  leave(self, c, node.link, lost);
}

// A placed feed's stand-in: it asks for the feed itself (the node link streams the feed's
// Deliver frames to whoever asked), tells `started` how that went, then relays.
void feed_main(caf::blocking_actor* self, PlacedActorConfig c, caf::actor source,
               std::shared_ptr<std::promise<Status>> started) {
  auto node = host_first(self, c, *started);
  if (!node) return;
  std::string lost;
  for (bool running = true; running;)
    self->receive(
        [&](event_atom, const Frame& f) {
          if (auto r = decode_reply(f); r && r->kind == ReplyKind::error) {  // its node is lost
            spdlog::warn("program {}: actors.{}'s feed on node `{}`: {}: hosting it again ({})",
                         c.program_name, c.actor, node->name, r->text, c.where.describe());
            auto again = host_somewhere(self, c, c.placement->wait_s());
            if (!again) {
              lost_for_good(c, lost, again.error().message);
              running = false;
              return;
            }
            node = *again;
            return;
          }
          auto m = decode_hosting(f);
          if (!m || m->kind != HostingMessage::Kind::deliver) return;
          if (auto inner = decode_role(m->frame); inner && inner->kind == RoleKind::failed) {
            if (c.on_lost) c.on_lost(inner->text);  // its file cannot be read there
            return;
          }
          self->send(source, role_atom::value, std::move(m->frame));
        },
        [&](stop_atom) { running = false; }, [&](caf::exit_msg&) { running = false; });
  leave(self, c, node->link, lost);
}

// A placed probe's stand-in (spawn_placed_probe).
void probe_main(caf::blocking_actor* self, PlacedActorConfig c, caf::actor batcher,
                std::shared_ptr<std::promise<Status>> started) {
  auto node = host_first(self, c, *started);
  if (!node) return;
  caf::actor ctl;
  bool began = false;         // its StartRole came
  std::vector<Frame> shaped;  // Upstream and `.done` signals, in order: a new host gets them after its start
  // Its questions out, in the order asked: (engine request id, what it asks about). A probe hosted
  // anew asks them again first (its StartRole carries them); the lost one's answers are its own.
  std::vector<std::pair<int64_t, std::string>> out;
  std::set<BlockId> watched;  // subscribed here once, whichever host asked
  std::string lost;
  bool running = true;
  auto relay = [&](RelayTo to, uint64_t seq, const Frame& f) {
    return ask_node(self, node->link, encode_relay(0, c.program, c.actor, to, seq, f));
  };
  // Its node was lost: hosted again where the placement allows, and given what shaped it.
  auto rehost = [&](const std::string& why) {
    const auto until = Clock::now() + std::chrono::duration<double>(c.placement->wait_s());
    for (std::string reason = why;;) {
      spdlog::warn("program {}: actors.{} on node `{}`: {}: hosting it again ({})", c.program_name, c.actor,
                   node->name, reason, c.where.describe());
      const double left = std::chrono::duration<double>(until - Clock::now()).count();
      auto again = left > 0
                       ? host_somewhere(self, c, left)
                       : Result<PlacedNode>(make_error(Errc::not_found, "placed on " + c.where.describe() +
                                                                            ": hosted again, but " + reason));
      if (!again) {
        lost_for_good(c, lost, again.error().message);
        running = false;
        return false;
      }
      node = *again;
      bool whole = true;
      std::vector<std::string> asked;
      for (const auto& q : out) asked.push_back(q.second);
      std::vector<Frame> frames;
      if (began) frames.push_back(encode_start_role(asked));
      frames.insert(frames.end(), shaped.begin(), shaped.end());
      for (const Frame& f : frames)
        if (auto r = relay(RelayTo::role, 0, f); !r || r->kind != HostingMessage::Kind::hosted) {
          reason = r ? "an answer that is not Hosted" : r.error().message;
          whole = false;
          break;
        }
      if (!whole) std::this_thread::sleep_for(std::chrono::milliseconds(100));  // (then it tries again)
      if (whole) {
        spdlog::info(
            "program {}: actors.{} hosted again on node `{}`; it asks again the {} question(s) its lost "
            "self had out",
            c.program_name, c.actor, node->name, out.size());
        out.clear();
        return true;
      }
    }
  };
  // Down to the role. The engine's answers and events are the host's they were asked from: after
  // a loss they are dropped; a role message goes to the new host.
  auto down = [&](RelayTo to, uint64_t seq, const Frame& f) {
    while (running && lost.empty()) {
      auto r = relay(to, seq, f);
      if (r && r->kind == HostingMessage::Kind::hosted) return;
      const Error e = r ? make_error(Errc::internal, "an answer that is not Hosted") : r.error();
      if (e.code != Errc::io && e.code != Errc::not_found) {
        spdlog::warn("program {}: actors.{}: {}", c.program_name, c.actor, e.message);
        return;
      }
      if (!rehost(e.message) || to != RelayTo::role) return;
    }
  };
  // Up from the role: to its controller, to the engine (its answer comes down), a watch.
  auto up = [&](const HostingMessage& m) {
    switch (m.to) {
      case RelayTo::role:
        if (ctl) self->send(ctl, role_atom::value, m.frame);
        break;
      case RelayTo::engine: {
        Frame answer;
        self->request(batcher, caf::infinite, frame_atom::value, m.frame)
            .receive([&](const Frame& reply) { answer = reply; },
                     [&](caf::error& e) {
                       answer = encode_error_envelope(0, make_error(Errc::io, caf::to_string(e)));
                     });
        if (auto r = decode_reply(answer); r && r->kind == ReplyKind::submitted)
          out.emplace_back(r->id, m.text);
        down(RelayTo::answer, m.seq, answer);
        break;
      }
      case RelayTo::watch:
        if (watched.insert(static_cast<BlockId>(m.seq)).second)
          self->send(batcher, subscribe_atom::value, static_cast<BlockId>(m.seq));
        break;
      case RelayTo::answer:
      case RelayTo::event: break;  // (down only)
    }
  };
  auto shapes = [](const Frame& f) {
    auto m = decode_role(f);
    return m &&
           (m->kind == RoleKind::upstream || (m->kind == RoleKind::signal && m->event.ends_with(".done")));
  };
  while (running)
    self->receive(
        [&](start_atom, const caf::actor& who, const Frame& f) {
          ctl = who;
          began = true;
          down(RelayTo::role, 0, f);
        },
        [&](role_atom, const Frame& f) {
          if (shapes(f)) shaped.push_back(f);
          down(RelayTo::role, 0, f);
        },
        [&](role_ask_atom, const Frame& f) -> Frame {  // retired by a patch: it hands nothing on
          running = false;
          if (auto m = decode_role(f); !m || m->kind != RoleKind::retire)
            return encode_error_envelope(
                0, make_error(Errc::invalid_argument, "a probe answers RetireRole only"));
          return encode_retired({});
        },
        [&](event_atom, const Frame& f) {
          if (auto m = decode_hosting(f); m && m->kind == HostingMessage::Kind::relay) return up(*m);
          auto r = decode_reply(f);
          if (r && r->kind == ReplyKind::error &&
              self->current_sender() == caf::actor_cast<caf::strong_actor_ptr>(node->link)) {
            rehost(r->text);  // the link to its node is down
            return;
          }
          if (!r) return;
          if (r->kind == ReplyKind::finished)
            std::erase_if(out, [&](const auto& q) { return q.first == r->id; });
          down(RelayTo::event, 0, f);  // its questions' answers, its watched block's growth
        },
        [&](stop_atom) { running = false; }, [&](caf::exit_msg&) { running = false; });
  leave(self, c, node->link, lost);
}

}  // namespace

caf::actor spawn_placed_probe(caf::actor_system& sys, PlacedActorConfig cfg, caf::actor batcher,
                              std::shared_ptr<std::promise<Status>> started) {
  return sys.spawn<caf::detached>(probe_main, std::move(cfg), std::move(batcher), std::move(started));
}

Result<caf::actor> spawn_placed_feed(caf::actor_system& sys, PlacedActorConfig cfg, caf::actor source) {
  auto started = std::make_shared<std::promise<Status>>();
  auto done = started->get_future();
  caf::actor a = sys.spawn<caf::detached>(feed_main, std::move(cfg), std::move(source), started);
  if (Status s = done.get(); !s.ok()) return s.error();
  return a;
}

Result<caf::actor> spawn_placed_actor(caf::actor_system& sys, PlacedActorConfig cfg) {
  PlacedNode node;
  {
    caf::scoped_actor self{sys};
    auto hosted = host_somewhere(self.ptr(), cfg, cfg.placement->wait_s());
    if (!hosted) return hosted.error();
    node = *hosted;
  }
  return sys.spawn<caf::detached>(placed_main, std::move(cfg), std::move(node));
}

ProbeSpecData probe_spec(const program_roles::ProbeRoleConfig& pc) {
  ProbeSpecData d;
  d.name = pc.name;
  d.request = encode_request(0, pc.request);
  if (pc.question.dynamic()) d.question = pc.question.tmpl;
  d.fire_on = pc.fire_on;
  d.threshold = pc.threshold;
  d.edge = pc.edge;
  d.fires = pc.fires;
  d.watch = pc.watch;
  d.every_new_tokens = pc.every_new_tokens;
  d.every_ms = pc.every_ms;
  d.on = {pc.triggers.on.begin(), pc.triggers.on.end()};
  d.after = {pc.triggers.after.begin(), pc.triggers.after.end()};
  d.upstream = {pc.triggers.upstream.begin(), pc.triggers.upstream.end()};
  return d;
}

Result<program_roles::ProbeRoleConfig> probe_config(const ProbeSpecData& d) {
  uint64_t rid = 0;
  auto cmd = decode_command(d.request, &rid);
  const Request* req = cmd ? std::get_if<Request>(&*cmd) : nullptr;
  if (!req || req->kind != RequestKind::probe)
    return make_error(Errc::bad_format, "its question is not a Probe frame" +
                                            (cmd ? std::string() : ": " + cmd.error().message));
  program_roles::ProbeRoleConfig pc;
  pc.name = d.name;
  pc.triggers.on = {d.on.begin(), d.on.end()};
  pc.triggers.after = {d.after.begin(), d.after.end()};
  pc.triggers.upstream = {d.upstream.begin(), d.upstream.end()};
  pc.request = *req;
  pc.question = program_roles::RunText{d.question, req->tokens, nullptr};
  pc.fire_on = d.fire_on;
  pc.threshold = d.threshold;
  pc.edge = d.edge;
  pc.fires = d.fires;
  pc.watch = d.watch;
  pc.every_new_tokens = d.every_new_tokens;
  pc.every_ms = d.every_ms;
  pc.relayed = true;
  return pc;
}

SinkSpecData sink_spec(const topology::Actor& a) {
  SinkSpecData s;
  s.name = a.name;
  s.prefix = a.prefix;
  s.path = a.path;
  s.endpoint = a.endpoint;
  s.topic = a.topic;
  switch (a.sink) {
    case topology::SinkKind::stdout_stream: s.to = SinkSpecData::To::stdout_stream; break;
    case topology::SinkKind::stderr_stream: s.to = SinkSpecData::To::stderr_stream; break;
    case topology::SinkKind::file: s.to = SinkSpecData::To::file; break;
    case topology::SinkKind::zmq:
    case topology::SinkKind::callback: s.to = SinkSpecData::To::zmq; break;  // (a callback is refused first)
  }
  return s;
}

FeedSpecData feed_spec(const topology::Actor& a) {
  FeedSpecData f;
  f.from = a.from == topology::SourceKind::zmq ? FeedSpecData::From::zmq : FeedSpecData::From::file;
  f.path = a.path;
  f.follow = a.follow;
  f.endpoint = a.endpoint;
  f.topic = a.topic;
  return f;
}

ToolSpecData tool_spec(const topology::Tool& t) {
  ToolSpecData d;
  d.name = t.name;
  d.command = t.command;
  d.setup = t.setup;
  d.timeout_s = t.timeout_s;
  d.max_output_bytes = t.max_output_bytes;
  d.max_dir_bytes = t.max_dir_bytes;
  for (const auto& [k, v] : t.env) d.env.push_back(k + "=" + v);
  d.network = t.network;
  d.read = t.read;
  d.write = t.write;
  return d;
}

}  // namespace chorus
