#include "cluster/node_link.h"

#include <spdlog/spdlog.h>
#include <caf/all.hpp>
#include <chrono>
#include <map>
#include <set>
#include <vector>
#include <zmq.hpp>

#include "actors/atoms.h"
#include "net/codec.h"
#include "net/wire.h"
#include "schemas/envelope_generated.h"

namespace chorus::cluster {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The link's state and its three inputs: a command from this process, a frame from the node, the
// clock.
class Link {
 public:
  Link(caf::blocking_actor* self, std::shared_ptr<zmq::socket_t> sock, NodeLinkOptions opts,
       std::shared_ptr<NodeHealth> health)
      : self_(self), sock_(std::move(sock)), opts_(std::move(opts)), health_(std::move(health)) {}

  void run() {
    bool running = true;
    while (running) {
      for (bool more = true; more && running;) {
        more = false;
        self_->receive(
            [&](frame_atom, const std::vector<uint8_t>& f) {
              more = true;
              on_command(f);
            },
            // A program scheduler over the link asks to hear of waiting requests: the node tells
            // the link (WatchPrograms), the link tells it.
            [&](scheduler_atom) {
              scheduler_ = caf::actor_cast<caf::actor>(self_->current_sender());
              watching_ = false;
            },
            // A role that watches a block on this node (a probe's `watch`): the node tells the
            // link (WatchBlock), the link tells every role that asked.
            [&](subscribe_atom, BlockId block) {
              auto& who = block_watchers_[block];
              if (who.empty()) unsent_watches_.insert(block);
              who.push_back(caf::actor_cast<caf::actor>(self_->current_sender()));
              send_watches();
            },
            [&](stop_atom) { running = false; },
            [&](caf::exit_msg& m) {
              running = false;
              self_->fail_state(m.reason);
            },
            caf::after(std::chrono::seconds(0)) >> [] {});
      }
      if (!running) break;
      zmq::pollitem_t item{sock_->handle(), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&item, 1, std::chrono::milliseconds(1)) > 0)
        for (zmq::message_t m; sock_->recv(m, zmq::recv_flags::dontwait);)
          on_frame(std::span<const uint8_t>(m.data<uint8_t>(), m.size()));
      on_clock();
    }
    go_down("the link was stopped");
    sock_->close();
  }

 private:
  struct Pending {
    caf::response_promise promise;
    uint64_t their_id = 0;
    caf::actor requester;
    bool feed = false;  // a HostFeed or HostProbe: its Deliver or Relay frames stream after the answer
  };
  struct Stream {
    caf::actor requester;
    uint64_t their_id = 0;
  };

  void on_command(const std::vector<uint8_t>& frame) {
    // The sender first: making the promise moves it out of the message.
    const caf::actor requester = caf::actor_cast<caf::actor>(self_->current_sender());
    auto promise = self_->make_response_promise();
    auto summary = decode_envelope(frame);
    if (!summary) {
      promise.deliver(encode_error_envelope(0, summary.error()));
      return;
    }
    const uint64_t their = summary->request_id;
    if (down_) {
      promise.deliver(encode_error_envelope(their, down_error()));
      return;
    }
    const uint64_t id = next_id_++;
    auto mine =
        summary->payload_type == "WithdrawRequest" ? withdraw_here(frame, id) : with_request_id(frame, id);
    if (!mine || !sock_->send(zmq::buffer(*mine), zmq::send_flags::dontwait)) {
      promise.deliver(encode_error_envelope(
          their,
          mine ? make_error(Errc::io, "node `" + opts_.name + "` at " + opts_.endpoint + " cannot be reached")
               : mine.error()));
      return;
    }
    pending_[id] = Pending{std::move(promise), their, requester,
                           summary->payload_type == "HostFeed" || summary->payload_type == "HostProbe"};
    count();
  }

  // A WithdrawRequest names the waiting request by its requester's id; the node knows it by the
  // link's own: the command goes on under that one (unchanged when the request is not waiting
  // here: the node then finds nothing, as it would).
  Result<Frame> withdraw_here(const std::vector<uint8_t>& frame, uint64_t id) const {
    uint64_t rid = 0;
    auto cmd = decode_command(frame, &rid);
    const auto* pc = cmd ? std::get_if<ProgramCmd>(&*cmd) : nullptr;
    if (!pc || pc->op != ProgramCmd::Op::withdraw || pc->request == 0) return with_request_id(frame, id);
    for (const auto& [mine, p] : pending_)
      if (p.their_id == pc->request) {
        ProgramCmd c = *pc;
        c.request = mine;
        return encode_program(id, c);
      }
    return with_request_id(frame, id);
  }

  void on_frame(std::span<const uint8_t> bytes) {
    if (bytes.size() > opts_.max_frame_bytes) {
      spdlog::warn("node link `{}`: dropped a {}-byte frame (limit {})", opts_.name, bytes.size(),
                   opts_.max_frame_bytes);
      return;
    }
    auto reply = decode_reply(bytes);  // verifies the frame: readdressed() below may read it
    if (!reply) {
      spdlog::warn("node link `{}`: dropped a bad frame: {}", opts_.name, reply.error().message);
      return;
    }
    answered();
    const uint64_t id = wire::GetEnvelope(bytes.data())->request_id();
    if (reply->kind == ReplyKind::program_waiting) {
      if (scheduler_) self_->send(scheduler_, waiting_atom::value, static_cast<uint64_t>(reply->id));
      return;
    }
    if (reply->kind == ReplyKind::block_grown) {
      const auto block = static_cast<BlockId>(reply->id);
      if (auto w = block_watchers_.find(block); w != block_watchers_.end())
        for (const caf::actor& who : w->second)  // the same frame
          self_->send(who, event_atom::value, std::vector<uint8_t>(bytes.begin(), bytes.end()));
      return;
    }
    if (auto b = beats_.find(id); b != beats_.end() && reply->kind == ReplyKind::heartbeat) {
      health_->rtt_us = static_cast<int64_t>(seconds_since(b->second) * 1e6);
      health_->pages_used = reply->pages;
      health_->pages_total = reply->pages_total;
      beats_.erase(b);
      return;
    }
    if (auto f = feeds_.find(id);
        f != feeds_.end() && pending_.find(id) == pending_.end()) {  // a feed's line
      self_->send(f->second.requester, event_atom::value, readdressed(bytes, f->second.their_id));
      return;
    }
    // A hosted feed or probe may send its first frames before its Hosted answer has come (the node
    // starts it, then answers): they go to its requester as stream frames, not as the answer.
    if (auto p = pending_.find(id); p != pending_.end() && p->second.feed) {
      const auto type = wire::GetEnvelope(bytes.data())->payload_type();
      if (type == wire::Payload::Deliver || type == wire::Payload::Relay) {
        self_->send(p->second.requester, event_atom::value, readdressed(bytes, p->second.their_id));
        return;
      }
    }
    const bool event = reply->kind == ReplyKind::token || reply->kind == ReplyKind::probe_result ||
                       reply->kind == ReplyKind::finished;
    if (!event) {
      auto p = pending_.find(id);
      if (p == pending_.end()) return;  // an answer to a command given up on when the node was down
      if (reply->kind == ReplyKind::submitted)
        streams_[reply->id] = Stream{p->second.requester, p->second.their_id};
      if (p->second.feed && reply->kind != ReplyKind::error)
        feeds_[id] = Stream{p->second.requester, p->second.their_id};
      p->second.promise.deliver(readdressed(bytes, p->second.their_id));
      pending_.erase(p);
    } else if (auto s = streams_.find(reply->id); s != streams_.end()) {
      if (s->second.requester)
        self_->send(s->second.requester, event_atom::value, readdressed(bytes, s->second.their_id));
      if (reply->kind == ReplyKind::finished) streams_.erase(s);
    }
    count();
  }

  void on_clock() {
    if (seconds_since(last_beat_) >= opts_.heartbeat_s) {
      last_beat_ = Clock::now();
      const uint64_t id = next_id_++;
      const Frame hb = encode_heartbeat(id, opts_.name, 0, 0);
      if (sock_->send(zmq::buffer(hb), zmq::send_flags::dontwait)) beats_[id] = Clock::now();
      for (auto it = beats_.begin(); it != beats_.end();)  // answers this late count as silence
        it = seconds_since(it->second) > opts_.dead_after_s ? beats_.erase(it) : std::next(it);
    }
    if (scheduler_ && !watching_ && !down_ && health_->up.load()) {  // (again, after the node was down)
      const uint64_t id = next_id_++;
      const Frame w = encode_watch_programs(id);
      if (sock_->send(zmq::buffer(w), zmq::send_flags::dontwait)) {
        beats_[id] = Clock::now();  // answered with a Heartbeat
        watching_ = true;
      }
    }
    send_watches();
    if (!down_ && seconds_since(last_answer_) > opts_.dead_after_s) {
      char why[96];
      std::snprintf(why, sizeof why, "no answer for %.1f s", seconds_since(last_answer_));
      go_down(why);
    }
  }

  // WatchBlock for each watched block the node has not been asked about yet (once it answers).
  void send_watches() {
    if (down_ || !health_->up.load()) return;
    for (auto it = unsent_watches_.begin(); it != unsent_watches_.end();) {
      const uint64_t id = next_id_++;
      const Frame w = encode_watch_block(id, *it);
      if (!sock_->send(zmq::buffer(w), zmq::send_flags::dontwait)) return;
      beats_[id] = Clock::now();  // answered with a Heartbeat
      it = unsent_watches_.erase(it);
    }
  }

  void answered() {
    last_answer_ = Clock::now();
    health_->last_ms = wall_clock_ms();
    if (down_) spdlog::info("node link `{}`: {} answers again", opts_.name, opts_.endpoint);
    down_ = false;
    health_->up = true;
  }

  // Everyone waiting for the node is told it is gone.
  void go_down(const std::string& why) {
    if (!down_ && health_->up.load())
      spdlog::warn("node link `{}`: {} is down: {}", opts_.name, opts_.endpoint, why);
    down_ = true;
    down_reason_ = why;
    watching_ = false;  // a node that comes back is asked again
    health_->up = false;
    const Error err = down_error();
    for (auto& [id, p] : pending_) p.promise.deliver(encode_error_envelope(p.their_id, err));
    for (auto& [request, s] : streams_)
      if (s.requester)
        self_->send(s.requester, event_atom::value, encode_node_lost(s.their_id, request, err.message));
    for (auto& [id, f] : feeds_)
      if (f.requester) self_->send(f.requester, event_atom::value, encode_error_envelope(f.their_id, err));
    pending_.clear();
    streams_.clear();
    feeds_.clear();
    beats_.clear();
    count();
  }

  Error down_error() const {
    return make_error(Errc::io, "node `" + opts_.name + "` is down (" + down_reason_ + ")");
  }

  void count() { health_->in_flight = static_cast<int64_t>(pending_.size() + streams_.size()); }

  caf::blocking_actor* self_;
  std::shared_ptr<zmq::socket_t> sock_;
  NodeLinkOptions opts_;
  std::shared_ptr<NodeHealth> health_;
  uint64_t next_id_ = 1;
  std::map<uint64_t, Pending> pending_;  // by the link's envelope id
  std::map<int64_t, Stream> streams_;    // by the node's engine request id
  // Hosted feeds, by the link's envelope id of their HostFeed: one small entry each, kept until the
  // link goes down (a feed unhosted sends nothing more; a dead requester's frames are dropped).
  std::map<uint64_t, Stream> feeds_;
  std::map<uint64_t, Clock::time_point> beats_;
  Clock::time_point last_beat_{};
  Clock::time_point last_answer_ = Clock::now();
  bool down_ = false;
  std::string down_reason_;
  caf::actor scheduler_;  // told of the node's waiting requests
  bool watching_ = false;
  std::map<BlockId, std::vector<caf::actor>> block_watchers_;  // told when the block grows
  std::set<BlockId> unsent_watches_;                           // WatchBlock not sent yet
};

}  // namespace

Result<caf::actor> spawn_node_link(caf::actor_system& sys, zmq::context_t& context,
                                   const NodeLinkOptions& opts, std::shared_ptr<NodeHealth> health) {
  if (!(opts.heartbeat_s > 0) || !(opts.dead_after_s > opts.heartbeat_s))
    return make_error(Errc::invalid_argument, "a node link needs 0 < heartbeat_s < dead_after_s");
  auto sock = std::make_shared<zmq::socket_t>(context, zmq::socket_type::dealer);
  if (!opts.server_key.empty() || !opts.curve.secret_key.empty()) {
    if (opts.server_key.empty() || opts.curve.secret_key.empty())
      return make_error(Errc::invalid_argument, "node `" + opts.name +
                                                    "`: a CURVE link needs the node's public key " +
                                                    "and a key pair of this process");
    if (auto s = curve_client(*sock, opts.curve, opts.server_key); !s)
      return make_error(Errc::invalid_argument, "node `" + opts.name + "`: " + s.error().message);
  }
  try {
    sock->set(zmq::sockopt::linger, 0);
    sock->set(zmq::sockopt::immediate, 1);  // no queue for a node that is not connected: refuse at once
    sock->set(zmq::sockopt::heartbeat_ivl, static_cast<int>(opts.heartbeat_s * 1000));
    sock->set(zmq::sockopt::heartbeat_timeout, static_cast<int>(opts.dead_after_s * 1000));
    sock->connect(opts.endpoint);
  } catch (const zmq::error_t& e) {
    return make_error(Errc::io,
                      "cannot connect to node `" + opts.name + "` at " + opts.endpoint + ": " + e.what());
  }
  return sys.spawn<caf::detached>([sock, opts, health](caf::blocking_actor* self) mutable {
    Link(self, std::move(sock), std::move(opts), std::move(health)).run();
  });
}

}  // namespace chorus::cluster
