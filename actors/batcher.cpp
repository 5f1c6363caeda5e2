#include "actors/batcher.h"

#include <caf/all.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <tuple>

#include "actors/atoms.h"
#include "actors/engine_side.h"
#include "actors/memory_side.h"
#include "engine/step/engine.h"
#include "net/wire.h"

namespace chorus {
namespace {

// A Deliver for the request `self` is handling now: the reply goes out when it is called.
template <class Self>
MemorySide::Deliver promise(Self* self) {
  auto rp = self->make_response_promise();
  return [rp](Frame f) mutable { rp.deliver(std::move(f)); };
}

// The batcher: the engine side on a thread of its own. Between steps it answers the memory
// actor's operations (and block subscriptions); before each step it waits until the memory
// actor has applied what it had; after each step it sends the memory actor a report (what
// finished, the pool as it is now). Sleeps on its mailbox when idle.
class BatcherLoop {
 public:
  BatcherLoop(caf::blocking_actor* self, std::shared_ptr<Engine> engine)
      : self_(self), side_(std::move(engine)) {}

  void run() {
    while (running_) {
      if (side_.idle()) {
        if (stopping_ && !side_.awaiting_release()) break;
        receive();  // sleep until there is work
      }
      do {  // then take everything already queued, without waiting
        got_ = false;
        receive(caf::after(std::chrono::seconds(0)) >> [] {});
      } while (got_ && running_);
      if (!running_ || side_.idle()) continue;
      if (memory_) {
        if (!wait_for_memory()) break;
        if (side_.idle()) continue;
      }
      if (!step()) break;
    }
  }

 private:
  // One message of the mailbox: the memory actor's operations and the batcher's controls, and
  // whatever `extra` handles.
  template <class... Extra>
  void receive(Extra&&... extra) {
    self_->receive(
        [this](link_atom, const LinkOp& op) {
          got_ = true;
          LinkResult r = side_.apply(op);
          r.pool.version = ++version_;
          return r;
        },
        [this](release_atom, const std::vector<RequestId>& ids) {
          got_ = true;
          for (RequestId id : ids)
            side_.release(id, [this](const caf::actor& who, Frame f) { send(who, std::move(f)); });
        },
        [this](memory_atom) { memory_ = caf::actor_cast<caf::actor>(self_->current_sender()); },
        [this](subscribe_atom, BlockId b, const caf::actor& who) {
          got_ = true;
          side_.subscribe(b, who);
        },
        [this](stop_atom) {  // finish what was accepted, then end
          got_ = true;
          stopping_ = true;
        },
        [this](caf::exit_msg& m) {
          running_ = false;
          self_->fail_state(m.reason);
        },
        std::forward<Extra>(extra)...);
  }

  // Before each step, every command the memory actor had when it was asked is applied: it
  // answers (go_atom) once it has handled what came before the question, and the batcher answers
  // its operations meanwhile (as when one actor held both sides, whatever the scheduling of the
  // memory actor's thread). False when the batcher is to end.
  bool wait_for_memory() {
    self_->send(memory_, ready_atom::value);
    for (bool go = false; !go && running_;) receive([&go](go_atom) { go = true; });
    return running_;
  }

  // The report goes to the memory actor before the step's events go out: whoever has seen an
  // event and then asks the memory actor is answered with the step counted. A step's messages
  // are its events, then the growth of watched blocks (EngineSide::step makes them in that
  // order), kept across steps (no allocation once warm). False when the step failed.
  bool step() {
    events_.clear();
    growth_.clear();
    auto finished =
        side_.step([this](const caf::actor& who, Frame f) { events_.emplace_back(who, std::move(f)); },
                   [this](const caf::actor& who, BlockId b, int64_t n) { growth_.emplace_back(who, b, n); });
    if (!finished) {
      self_->fail_state(caf::make_error(caf::sec::runtime_error, finished.error().to_string()));
      return false;
    }
    if (memory_) {
      PoolSnapshot pool = side_.snapshot_pool();
      pool.version = ++version_;
      self_->send(memory_, report_atom::value, StepReport{std::move(*finished), std::move(pool)});
    }
    for (auto& [who, f] : events_) send(who, std::move(f));
    for (const auto& [who, b, n] : growth_) send(who, encode_block_grown(b, n));
    return true;
  }

  void send(const caf::actor& who, Frame f) { self_->send(who, event_atom::value, std::move(f)); }

  caf::blocking_actor* self_;
  EngineSide side_;
  caf::actor memory_;
  uint64_t version_ = 0;
  bool running_ = true, got_ = false, stopping_ = false;
  std::vector<std::pair<caf::actor, Frame>> events_;
  std::vector<std::tuple<caf::actor, BlockId, int64_t>> growth_;
};

void batcher_main(caf::blocking_actor* self, std::shared_ptr<Engine> engine) {
  BatcherLoop(self, std::move(engine)).run();
}

// The memory actor's link: each operation asks the batcher and waits for its answer (the
// batcher answers between steps); the pool is the newest snapshot that came back with an
// answer or a step report.
class ActorLink final : public EngineLink {
 public:
  ActorLink(caf::blocking_actor* self, caf::actor batcher, const Tokenizer& tok)
      : self_(self), batcher_(std::move(batcher)), tok_(tok) {}
  const Tokenizer& tokenizer() const override { return tok_; }
  const PoolView& pool() override { return pool_; }
  void update(PoolSnapshot p) {
    if (p.version > pool_.version) pool_ = std::move(p);
  }

  BlockId create_block(const std::string& name) override {
    LinkOp o = op(LinkOp::Kind::create);
    o.name = name;
    return ask(std::move(o)).block;
  }
  bool is_live(BlockId b) override {
    LinkOp o = op(LinkOp::Kind::is_live);
    o.block = b;
    return ask(std::move(o)).live;
  }
  Frame block_op(uint64_t rid, const BlockOpCmd& cmd) override {
    LinkOp o = op(LinkOp::Kind::block_op, rid);
    o.op = cmd;
    return ask(std::move(o)).reply;
  }
  Frame snapshot(uint64_t rid, const std::vector<BlockId>& view, bool logs) override {
    LinkOp o = op(LinkOp::Kind::snapshot, rid);
    o.logs = logs;
    o.blocks = view;
    return ask(std::move(o)).reply;
  }
  // The request's events wait in the batcher until release_started(), called once its
  // Submitted has gone out.
  Result<RequestId> submit(const Request& r, const caf::actor& subscriber, uint64_t rid) override {
    LinkOp o = op(LinkOp::Kind::submit, rid);
    o.request = r;
    o.subscriber = subscriber;
    o.hold_events = true;
    LinkResult res = ask(std::move(o));
    if (!res.status.ok()) return res.status.error();
    started_.push_back(res.id);
    return res.id;
  }
  void release_started() {
    if (started_.empty()) return;
    self_->send(batcher_, release_atom::value, std::move(started_));
    started_.clear();
  }
  Status pause(const std::vector<BlockId>& blocks, PauseMode mode) override {
    LinkOp o = op(LinkOp::Kind::pause);
    o.blocks = blocks;
    o.mode = mode;
    return ask(std::move(o)).status;
  }
  Status restore(const std::vector<BlockId>& blocks) override {
    LinkOp o = op(LinkOp::Kind::restore);
    o.blocks = blocks;
    return ask(std::move(o)).status;
  }
  Status end_blocks(const std::vector<BlockId>& blocks, bool cancel, const std::string& name,
                    std::vector<RequestId>* cancelled) override {
    LinkOp o = op(LinkOp::Kind::end_blocks);
    o.blocks = blocks;
    o.cancel = cancel;
    o.name = name;
    LinkResult res = ask(std::move(o));
    if (cancelled) *cancelled = std::move(res.cancelled);
    return res.status;
  }

 private:
  static LinkOp op(LinkOp::Kind k, uint64_t rid = 0) {
    LinkOp o;
    o.kind = k;
    o.rid = rid;
    return o;
  }
  LinkResult ask(LinkOp op) {
    LinkResult out;
    out.status = make_error(Errc::internal, "no answer from the batcher");
    out.reply = encode_error_envelope(op.rid, out.status.error());
    self_->request(batcher_, caf::infinite, link_atom::value, std::move(op))
        .receive([&](LinkResult& r) { out = std::move(r); },
                 [&](caf::error& e) {
                   out.status = make_error(Errc::internal, "batcher: " + caf::to_string(e));
                   out.reply = encode_error_envelope(0, out.status.error());
                 });
    update(std::move(out.pool));  // the callers read the rest
    return out;
  }

  caf::blocking_actor* self_;
  caf::actor batcher_;
  const Tokenizer& tok_;
  PoolSnapshot pool_;
  std::vector<RequestId> started_;  // submitted; their answers not yet out
};

// The memory actor: the node's front door. Every command frame comes here; the memory side
// answers it, asking the batcher for what touches the engine. On a thread of its own (it waits
// for the batcher's answers), linked to the batcher, and gone once the batcher is.
void memory_main(caf::blocking_actor* self, caf::actor batcher, const Tokenizer* tok) {
  self->link_to(batcher);
  self->monitor(batcher);
  self->send(batcher, memory_atom::value);
  ActorLink link(self, batcher, *tok);
  (void)link.is_live(-1);  // brings the pool's first snapshot: its size is known before any step
  MemorySide side(link);
  bool running = true;
  self->receive_while([&] { return running; })(
      // Every answer goes out (a promise delivered at once, or later for a request that waits)
      // before the batcher may send the events of the requests it started.
      [&](frame_atom, const std::vector<uint8_t>& bytes) -> caf::result<std::vector<uint8_t>> {
        std::optional<MemorySide::Deliver> rp;
        auto once = [&] {
          if (!rp) rp = promise(self);
          return *rp;
        };
        if (auto reply = side.on_frame(bytes, caf::actor_cast<caf::actor>(self->current_sender()), once))
          once()(std::move(*reply));
        link.release_started();
        return caf::delegated<std::vector<uint8_t>>{};
      },
      [&](report_atom, StepReport& r) {
        link.update(std::move(r.pool));
        side.on_finished(r.finished);  // may start requests that waited for room
        link.release_started();
      },
      [&](subscribe_atom, BlockId b) {
        self->send(batcher, subscribe_atom::value, b, caf::actor_cast<caf::actor>(self->current_sender()));
      },
      [&](scheduler_atom) { side.set_scheduler(caf::actor_cast<caf::actor>(self->current_sender())); },
      [&](ready_atom) { self->send(batcher, go_atom::value); },  // what came before is applied
      [&](stop_atom) {
        self->send(batcher, stop_atom::value);
      },  // it ends once its work is done; then so does this
      [&](caf::down_msg&) { running = false; },
      [&](caf::exit_msg& m) {
        running = false;
        self->fail_state(m.reason);
      });
}

struct CooperativeState {
  std::unique_ptr<EngineSide> engine;
  std::unique_ptr<LocalLink> link;
  std::unique_ptr<MemorySide> memory;
  bool step_queued = false;  // a step_atom is in the mailbox
  bool stopping = false;
};

// The cooperative node: both sides in one actor on the CAF scheduler, one step per step_atom
// sent to itself; commands that arrive meanwhile queue ahead of the next step, so they are
// applied before it, as in the two-actor node.
caf::behavior node_cooperative(caf::stateful_actor<CooperativeState>* self, std::shared_ptr<Engine> engine) {
  auto& st = self->state;
  st.engine = std::make_unique<EngineSide>(std::move(engine));
  st.link = std::make_unique<LocalLink>(*st.engine);
  st.memory = std::make_unique<MemorySide>(*st.link);
  auto kick = [self] {
    auto& s = self->state;
    if (!s.step_queued && !s.engine->idle()) {
      s.step_queued = true;
      self->send(self, step_atom::value);
    } else if (s.stopping && s.engine->idle()) {
      self->quit();
    }
  };
  return {
      [=](frame_atom, const std::vector<uint8_t>& bytes) -> caf::result<std::vector<uint8_t>> {
        auto reply = self->state.memory->on_frame(bytes, caf::actor_cast<caf::actor>(self->current_sender()),
                                                  [self] { return promise(self); });
        kick();
        if (reply) return std::move(*reply);
        return caf::delegated<std::vector<uint8_t>>{};
      },
      [=](subscribe_atom, BlockId b) {
        self->state.engine->subscribe(b, caf::actor_cast<caf::actor>(self->current_sender()));
      },
      [=](scheduler_atom) {
        self->state.memory->set_scheduler(caf::actor_cast<caf::actor>(self->current_sender()));
      },
      [=](stop_atom) {
        self->state.stopping = true;
        kick();
      },
      [=](step_atom) {
        self->state.step_queued = false;
        auto finished = self->state.engine->step(
            [self](const caf::actor& who, Frame f) { self->send(who, event_atom::value, std::move(f)); },
            [self](const caf::actor& who, BlockId b, int64_t n) {
              self->send(who, event_atom::value, encode_block_grown(b, n));
            });
        if (!finished) {
          self->quit(caf::make_error(caf::sec::runtime_error, finished.error().to_string()));
          return;
        }
        self->state.memory->on_finished(*finished);
        kick();
      },
  };
}

}  // namespace

NodeActors spawn_node_actors(caf::actor_system& sys, std::shared_ptr<Engine> engine) {
  const Tokenizer* tok = &engine->model().tokenizer;
  caf::actor batcher = sys.spawn<caf::detached>(batcher_main, std::move(engine));
  caf::actor memory = sys.spawn<caf::detached>(memory_main, batcher, tok);
  return {memory, batcher};
}

caf::actor spawn_batcher(caf::actor_system& sys, std::unique_ptr<Engine> engine) {
  return spawn_batcher(sys, std::shared_ptr<Engine>(std::move(engine)));
}

caf::actor spawn_batcher(caf::actor_system& sys, std::shared_ptr<Engine> engine) {
  return spawn_node_actors(sys, std::move(engine)).memory;
}

caf::actor spawn_batcher_cooperative(caf::actor_system& sys, std::shared_ptr<Engine> engine) {
  return sys.spawn(node_cooperative, std::move(engine));
}

}  // namespace chorus
