#include "actors/node_port.h"

#include <spdlog/spdlog.h>
#include <caf/all.hpp>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <zmq.hpp>

#include "actors/actor_host.h"
#include "actors/atoms.h"
#include "actors/role_messages.h"
#include "net/codec.h"
#include "net/hosting_codec.h"
#include "net/role_codec.h"
#include "net/wire.h"

namespace chorus {
namespace {

void send_to(zmq::socket_t& s, const std::string& identity, const std::vector<uint8_t>& frame) {
  s.send(zmq::buffer(identity), zmq::send_flags::sndmore);
  s.send(zmq::buffer(frame), zmq::send_flags::dontwait);
}

// One command on its way: asks the memory actor, hands the reply to the port, then relays the
// request's events (a Submitted request's) until it finishes. The port itself never waits for
// an answer, so a request that waits in the memory actor (its program paused, no room) holds up
// nobody else.

caf::behavior forwarder(caf::event_based_actor* self, caf::actor port, caf::actor memory, std::string client,
                        std::vector<uint8_t> frame) {
  uint64_t ignored = 0;
  BlockId block = -1;  // the block a request writes, for the events' topic
  if (auto cmd = decode_command(frame, &ignored); cmd)
    if (const auto* req = std::get_if<Request>(&*cmd)) block = req->write_to;
  self->request(memory, caf::infinite, frame_atom::value, std::move(frame))
      .then(
          [=](std::vector<uint8_t>& reply) {
            auto r = decode_reply(reply);
            const bool streams = r && r->kind == ReplyKind::submitted;
            self->send(port, answer_atom::value, client, std::move(reply));
            if (!streams) self->quit();
          },
          [=](caf::error& e) {
            self->send(
                port, answer_atom::value, client,
                encode_error_envelope(0, make_error(Errc::internal, "memory actor: " + caf::to_string(e))));
            self->quit();
          });
  return {[=](event_atom, std::vector<uint8_t>& f) {
    auto r = decode_reply(f);
    const bool last = !r || r->kind == ReplyKind::finished;
    self->send(port, event_atom::value, client, std::move(f), block);
    if (last) self->quit();
  }};
}

// Handshakes that fail before the CURVE gate is asked (a client without CURVE, a bad key): one
// log line for the first, then one a minute with the count, as the gate does for refused keys.
class HandshakeWatch {
 public:
  HandshakeWatch(zmq::context_t& ctx, zmq::socket_t& watched) : pair_(ctx, zmq::socket_type::pair) {
    const std::string ep =
        "inproc://chorus-port-monitor-" + std::to_string(reinterpret_cast<uintptr_t>(this));
    if (zmq_socket_monitor(watched.handle(), ep.c_str(),
                           ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) == 0) {
      pair_.set(zmq::sockopt::linger, 0);
      pair_.connect(ep);
      on_ = true;
    }
  }
  void* handle() { return on_ ? pair_.handle() : nullptr; }
  void drain() {
    for (zmq::message_t event, address; on_ && pair_.recv(event, zmq::recv_flags::dontwait);) {
      if (event.more()) (void)pair_.recv(address, zmq::recv_flags::dontwait);
      uint16_t id = 0;
      uint32_t value = 0;
      if (event.size() >= 6) {
        std::memcpy(&id, event.data(), 2);
        std::memcpy(&value, event.data<uint8_t>() + 2, 4);
      }
      ++since_;
      const auto now = std::chrono::steady_clock::now();
      if (logged_ && now - last_ < std::chrono::seconds(60)) continue;
      spdlog::warn("node port: refused a peer that failed the handshake on {} ({}){}", address.to_string(),
                   id == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL
                       ? "protocol error 0x" + fmt::format("{:x}", value) +
                             ": a client without CURVE, or another mechanism"
                       : "error " + std::to_string(value),
                   logged_ ? " (" + std::to_string(since_) + " in the last minute)" : "");
      logged_ = true;
      last_ = now;
      since_ = 0;
    }
  }
  void close() { pair_.close(); }

 private:
  zmq::socket_t pair_;
  bool on_ = false, logged_ = false;
  int64_t since_ = 0;
  std::chrono::steady_clock::time_point last_;
};

// The node port's loop: the answers and events the actors have for clients, then the frames
// clients sent, each to a forwarder of its own.
class PortLoop {
 public:
  PortLoop(caf::blocking_actor* self, std::shared_ptr<zmq::socket_t> sock, std::shared_ptr<zmq::socket_t> pub,
           caf::actor batcher, size_t max_frame_bytes, std::shared_ptr<HandshakeWatch> watch,
           zmq::context_t& context, ActorHostOptions host)
      : self_(self),
        me_(caf::actor_cast<caf::actor>(self)),
        sock_(std::move(sock)),
        pub_(std::move(pub)),
        batcher_(std::move(batcher)),
        max_frame_bytes_(max_frame_bytes),
        watch_(std::move(watch)),
        host_name_(host.node),
        host_(self->home_system(), me_, context, std::move(host)) {}

  void run() {
    while (running_) {
      drain_mailbox();
      zmq::pollitem_t items[] = {{sock_->handle(), 0, ZMQ_POLLIN, 0},
                                 {watch_ ? watch_->handle() : nullptr, 0, ZMQ_POLLIN, 0}};
      if (!running_ || zmq::poll(items, items[1].socket ? 2 : 1, std::chrono::milliseconds(1)) <= 0) continue;
      if (items[1].revents & ZMQ_POLLIN) watch_->drain();
      read_socket();
    }
    if (watch_) {
      zmq_socket_monitor(sock_->handle(), nullptr, 0);
      watch_->close();
    }
    sock_->close();
    if (pub_) pub_->close();
  }

 private:
  // Answers and events, without waiting.
  void drain_mailbox() {
    for (bool more = true; more && running_;) {
      more = false;
      self_->receive(
          [&](answer_atom, const std::string& client, const std::vector<uint8_t>& f) {
            more = true;
            send_to(*sock_, client, f);
          },
          [&](event_atom, const std::string& client, const std::vector<uint8_t>& f, BlockId block) {
            more = true;
            send_to(*sock_, client, f);
            publish(f, block);
          },
          [&](waiting_atom, uint64_t program) {
            more = true;
            if (!watcher_.empty()) send_to(*sock_, watcher_, encode_program_waiting(program));
          },
          [&](event_atom, const std::vector<uint8_t>& f) {  // a watched block grew (BlockGrown)
            more = true;
            auto r = decode_reply(f);
            if (!r || r->kind != ReplyKind::block_grown) return;
            if (auto w = block_watchers_.find(static_cast<BlockId>(r->id)); w != block_watchers_.end())
              for (const std::string& client : w->second) send_to(*sock_, client, f);
          },
          [this](stop_atom) { running_ = false; },
          [this](caf::exit_msg& m) {
            running_ = false;
            self_->fail_state(m.reason);
          },
          caf::after(std::chrono::seconds(0)) >> [] {});
    }
  }

  void publish(const std::vector<uint8_t>& frame, BlockId block) {
    if (!pub_) return;
    std::string topic;
    if (block >= 0) {
      topic = "block:" + std::to_string(block);
    } else {  // a probe's events: by request
      auto r = decode_reply(frame);
      if (!r) return;
      topic = "request:" + std::to_string(r->id);
    }
    pub_->send(zmq::buffer(topic), zmq::send_flags::sndmore);
    pub_->send(zmq::buffer(frame), zmq::send_flags::dontwait);
  }

  void read_socket() {
    for (zmq::message_t identity; running_ && sock_->recv(identity, zmq::recv_flags::dontwait);) {
      std::vector<zmq::message_t> parts;
      for (zmq::message_t part; identity.more() || (!parts.empty() && parts.back().more());) {
        if (!sock_->recv(part, zmq::recv_flags::dontwait)) break;
        const bool last = !part.more();
        parts.push_back(std::move(part));
        if (last) break;
      }
      if (parts.empty() || parts.back().size() == 0) continue;  // an empty delimiter alone: ignore
      const zmq::message_t& m = parts.back();                   // DEALER: [frame]; REQ-style: [empty, frame]
      handle(std::string(identity.data<char>(), identity.size()),
             std::span<const uint8_t>(m.data<uint8_t>(), m.size()));
    }
  }

  // One client frame: refused when too large or malformed; WatchPrograms makes its client the
  // one told of waiting requests; anything else goes to a forwarder.
  void handle(const std::string& id, std::span<const uint8_t> bytes) {
    if (bytes.size() > max_frame_bytes_) {
      spdlog::warn("node port: refused a {}-byte frame (limit {})", bytes.size(), max_frame_bytes_);
      send_to(
          *sock_, id,
          encode_error_envelope(0, make_error(Errc::out_of_range, "frame of " + std::to_string(bytes.size()) +
                                                                      " bytes exceeds the limit of " +
                                                                      std::to_string(max_frame_bytes_))));
      return;
    }
    auto env = decode_envelope(bytes);
    if (!env) {
      spdlog::warn("node port: bad frame: {}", env.error().message);
      send_to(*sock_, id, encode_error_envelope(0, env.error()));
      return;
    }
    static const std::set<std::string> hosting = {"HostSink", "HostSandbox", "HostFeed", "HostProbe",
                                                  "Relay",    "Deliver",     "Unhost",   "Hosted"};
    if (hosting.count(env->payload_type)) {  // a program's actors hosted here (actors/actor_host.h)
      auto m = decode_hosting(bytes);
      if (!m)
        send_to(*sock_, id, encode_error_envelope(env->request_id, m.error()));
      else
        host_.handle(id, *m);
      return;
    }
    if (!batcher_) {  // an actors-only node: no engine behind it
      if (env->payload_type == "Heartbeat") {
        send_to(*sock_, id, encode_heartbeat(env->request_id, host_name(), 0, 0));
        return;
      }
      send_to(*sock_, id,
              encode_error_envelope(env->request_id,
                                    make_error(Errc::unsupported, "node `" + host_name() +
                                                                      "` hosts actors only (--no-model): it "
                                                                      "runs no engine for " +
                                                                      env->payload_type)));
      return;
    }
    if (env->payload_type == "WatchBlock") {  // this client hears of the block's growth from now on
      auto block = decode_watch_block(bytes);
      if (!block) {
        send_to(*sock_, id, encode_error_envelope(env->request_id, block.error()));
        return;
      }
      auto& clients = block_watchers_[*block];
      if (clients.empty()) self_->send(batcher_, subscribe_atom::value, static_cast<BlockId>(*block));
      clients.insert(id);
      self_->spawn(forwarder, me_, batcher_, id, encode_heartbeat(env->request_id, "", 0, 0));  // the answer
      return;
    }
    if (env->payload_type == "WatchPrograms") {  // this client hears of waiting requests from now on
      watcher_ = id;
      self_->send(batcher_, scheduler_atom::value);
      self_->spawn(forwarder, me_, batcher_, id, encode_heartbeat(env->request_id, "", 0, 0));  // the answer
      return;
    }
    self_->spawn(forwarder, me_, batcher_, id, std::vector<uint8_t>(bytes.begin(), bytes.end()));
  }

  caf::blocking_actor* self_;
  const caf::actor me_;
  std::shared_ptr<zmq::socket_t> sock_, pub_;
  caf::actor batcher_;
  size_t max_frame_bytes_;
  std::shared_ptr<HandshakeWatch> watch_;
  bool running_ = true;
  std::string watcher_;  // the client told when a request waits (WatchPrograms)
  std::map<BlockId, std::set<std::string>> block_watchers_;  // WatchBlock: block -> clients
  const std::string host_name_;                              // this node's name in the cluster ("" alone)
  ActorHost host_;                                           // what this node hosts of others' programs
  const std::string& host_name() const { return host_name_; }
};

void port_main(caf::blocking_actor* self, std::shared_ptr<zmq::socket_t> sock,
               std::shared_ptr<zmq::socket_t> pub, caf::actor batcher, size_t max_frame_bytes,
               std::shared_ptr<CurveGate> gate, std::shared_ptr<HandshakeWatch> watch,
               zmq::context_t* context, ActorHostOptions host) {
  PortLoop(self, std::move(sock), std::move(pub), std::move(batcher), max_frame_bytes, std::move(watch),
           *context, std::move(host))
      .run();
  gate.reset();  // after the sockets it answers for
}

void sub_main(caf::blocking_actor* self, std::shared_ptr<zmq::socket_t> sock, caf::actor target) {
  for (bool running = true; running;) {
    self->receive([&](stop_atom) { running = false; }, [&](caf::exit_msg&) { running = false; },
                  caf::after(std::chrono::seconds(0)) >> [] {});
    zmq::pollitem_t item{sock->handle(), 0, ZMQ_POLLIN, 0};
    if (!running || zmq::poll(&item, 1, std::chrono::milliseconds(20)) <= 0) continue;
    for (zmq::message_t part; sock->recv(part, zmq::recv_flags::dontwait);) {
      if (part.more()) continue;  // the topic: the text is the last part
      self->send(target, role_atom::value, encode_role_text(std::string(part.data<char>(), part.size())));
    }
  }
  sock->close();
}

void pub_main(caf::blocking_actor* self, std::shared_ptr<zmq::socket_t> sock, std::string topic) {
  for (bool running = true; running;)
    self->receive(
        [&](role_atom, const Frame& f) {
          auto m = read_role("ZeroMQ sink " + topic, f);
          if (!m) return;
          if (m->kind != RoleKind::text) return unexpected_role("ZeroMQ sink " + topic, *m);
          sock->send(zmq::buffer(topic), zmq::send_flags::sndmore);
          sock->send(zmq::buffer(m->text), zmq::send_flags::dontwait);
        },
        [&](stop_atom) { running = false; }, [&](caf::exit_msg&) { running = false; });
  sock->close();
}

}  // namespace

Result<caf::actor> spawn_zmq_sub_source(caf::actor_system& sys, zmq::context_t& context,
                                        const std::string& endpoint, const std::string& topic,
                                        caf::actor target) {
  auto sock = std::make_shared<zmq::socket_t>(context, zmq::socket_type::sub);
  sock->set(zmq::sockopt::linger, 0);
  try {
    sock->connect(endpoint);
    sock->set(zmq::sockopt::subscribe, topic);
  } catch (const zmq::error_t& e) {
    return make_error(Errc::io, "cannot subscribe to " + endpoint + ": " + e.what());
  }
  return sys.spawn<caf::detached>(sub_main, std::move(sock), std::move(target));
}

Result<std::string> spawn_zmq_pub_sink(caf::actor_system& sys, zmq::context_t& context,
                                       const std::string& endpoint, const std::string& topic,
                                       caf::actor* out) {
  auto sock = std::make_shared<zmq::socket_t>(context, zmq::socket_type::pub);
  sock->set(zmq::sockopt::linger, 0);
  try {
    sock->bind(endpoint);
  } catch (const zmq::error_t& e) {
    return make_error(Errc::io, "cannot bind " + endpoint + ": " + e.what());
  }
  std::string bound = sock->get(zmq::sockopt::last_endpoint);
  *out = sys.spawn<caf::detached>(pub_main, std::move(sock), topic);
  return bound;
}

Result<NodePortEndpoints> spawn_node_port(caf::actor_system& sys, caf::actor batcher, zmq::context_t& context,
                                          const NodePortOptions& opts, caf::actor* out) {
  const bool curve = !opts.curve.secret_key.empty();
  if (!curve)
    for (const auto& ep : {opts.endpoint, opts.events_endpoint})
      if (!ep.empty() && !is_loopback_endpoint(ep))
        return make_error(
            Errc::invalid_argument,
            "the node port would speak plaintext on " + ep +
                ", which other machines reach: give it a CURVE key pair (--curve-key FILE, from "
                "`chorus keygen`) and the clients it accepts (--allow-keys FILE); plaintext is for "
                "loopback only");
  if (curve && opts.allowed.empty())
    return make_error(Errc::invalid_argument,
                      "the node port has a CURVE key but allows no client key (--allow-keys)");
  std::shared_ptr<CurveGate> gate;
  if (curve) {
    auto g = CurveGate::start(context, "chorus-node", opts.allowed, "node port");
    if (!g) return g.error();
    gate = std::move(*g);
  }
  auto sock = std::make_shared<zmq::socket_t>(context, zmq::socket_type::router);
  sock->set(zmq::sockopt::linger, 0);
  sock->set(zmq::sockopt::router_mandatory, 0);
  if (curve)
    if (auto s = curve_server(*sock, opts.curve, "chorus-node"); !s) return s.error();
  try {
    sock->bind(opts.endpoint);
  } catch (const zmq::error_t& e) {
    return make_error(Errc::io, "cannot bind the node port to " + opts.endpoint + ": " + e.what());
  }
  NodePortEndpoints eps;
  eps.requests = sock->get(zmq::sockopt::last_endpoint);
  std::shared_ptr<zmq::socket_t> pub;
  if (!opts.events_endpoint.empty()) {
    pub = std::make_shared<zmq::socket_t>(context, zmq::socket_type::pub);
    pub->set(zmq::sockopt::linger, 0);
    if (curve)
      if (auto s = curve_server(*pub, opts.curve, "chorus-node"); !s) return s.error();
    try {
      pub->bind(opts.events_endpoint);
    } catch (const zmq::error_t& e) {
      return make_error(Errc::io,
                        "cannot bind the events socket to " + opts.events_endpoint + ": " + e.what());
    }
    eps.events = pub->get(zmq::sockopt::last_endpoint);
  }
  eps.gate = gate;
  if (curve) eps.curve_key = opts.curve.public_key;
  auto watch = curve ? std::make_shared<HandshakeWatch>(context, *sock) : nullptr;
  ActorHostOptions host;
  host.node = opts.node_name;
  host.unsafe_tools = opts.unsafe_tools;
  host.sandbox_base = opts.sandbox_base;
  *out = sys.spawn<caf::detached>(port_main, std::move(sock), std::move(pub), std::move(batcher),
                                  opts.max_frame_bytes, std::move(gate), std::move(watch), &context,
                                  std::move(host));
  return eps;
}

}  // namespace chorus
