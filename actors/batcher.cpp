#include "actors/batcher.h"

#include <algorithm>
#include <caf/all.hpp>
#include <deque>
#include <functional>
#include <map>
#include <optional>

#include "actors/atoms.h"
#include "actors/memory/pool_view.h"
#include "actors/memory/program_table.h"
#include "actors/memory/room_gate.h"
#include "engine/forward/kv_cache.h"
#include "engine/step/engine.h"
#include "engine/tokenizer/detokenizer.h"
#include "net/codec.h"
#include "net/wire.h"

namespace chorus {
namespace {

struct Subscriber {
  caf::actor who;
  uint64_t correlation;
  std::unique_ptr<IncrementalDecoder> text;
};

// The batcher's state and rules, apart from how it waits: the detached actor (its own thread,
// sleeping on the mailbox when idle) and the cooperative one (a step per message, on the CAF
// scheduler) both drive this.
class BatcherCore {
 public:
  explicit BatcherCore(std::shared_ptr<Engine> engine)
      : engine_(std::move(engine)), pool_(engine_->blocks()) {}

  bool idle() const { return engine_->idle(); }

  // Delivers a reply later (a response promise of the actor that asked).
  using Deliver = std::function<void(Frame)>;
  // Makes a Deliver for the message being handled; called only when a request is held.
  using Defer = std::function<Deliver()>;

  // Applies one command frame from `sender`; returns the reply frame, or nothing when the
  // request is held (a program registered with `hold` is paused): `defer()` then gave what
  // answers it when the program is restored or terminated.
  std::optional<Frame> on_frame(const std::vector<uint8_t>& bytes, const caf::actor& sender,
                                const Defer& defer) {
    uint64_t rid = 0;
    auto cmd = decode_command(bytes, &rid, &engine_->model().tokenizer);
    if (!cmd) return encode_error_envelope(rid, cmd.error());
    if (auto* c = std::get_if<CreateBlockCmd>(&*cmd)) {
      ProgramRecord* owner = nullptr;
      if (c->program != 0) {  // the block joins a program: it is paused and restored with it
        owner = programs_.find(c->program);
        const std::string name = "program " + std::to_string(c->program);
        if (!owner)
          return encode_error_envelope(rid, make_error(Errc::not_found, name + " is not registered"));
        if (owner->state != ProgramState::active)
          return encode_error_envelope(
              rid, make_error(Errc::invalid_argument, name + " is paused: restore it before adding blocks"));
      }
      const BlockId id = engine_->blocks().create(c->name);
      if (owner) owner->blocks.push_back(id);
      return encode_block_info(rid, id, c->name, 0, 0);
    }
    if (auto* op = std::get_if<BlockOpCmd>(&*cmd)) {
      // On a paused program registered with `hold` (a source clearing its window, say), it waits
      // for the restore like a request.
      const BlockId touched[] = {op->block, op->second};
      if (const uint64_t p = programs_.hold_owner(touched, true))
        return hold(p, bytes, rid, sender, defer, 0);
      return on_block_op(rid, *op);
    }
    if (auto* v = std::get_if<SnapshotViewCmd>(&*cmd)) return snapshot(rid, v->view);
    if (auto* pc = std::get_if<ProgramCmd>(&*cmd)) return on_program(rid, *pc);
    const Request& req = std::get<Request>(*cmd);
    if (const uint64_t p = programs_.hold_owner(named(req), true))
      return hold(p, bytes, rid, sender, defer, gate_.growth_pages(req, pool_));
    // A request of a program registered with `hold` starts only with room in the pool for all
    // it may write; until then it waits, in arrival order (a scheduler makes the room).
    if (const uint64_t program = programs_.hold_owner(named(req), false)) {
      if (auto never = gate_.never_fits(req, programs_.find(program)->blocks, pool_))
        return encode_error_envelope(rid, *never);
      if (!waiting_.empty() || gate_.gate_pages(req, pool_) > gate_.room(pool_)) {
        waiting_.push_back(Held{bytes, rid, sender, defer(), gate_.growth_pages(req, pool_), program});
        notify(program);
        return std::nullopt;
      }
      return start(req, rid, sender, program);
    }
    return start(req, rid, sender, 0);
  }

  // Who hears when a request of a scheduled program waits (a ProgramManager's actor).
  void set_scheduler(caf::actor who) { scheduler_ = std::move(who); }

  void on_subscribe(BlockId b, const caf::actor& who) {
    watchers_[b].push_back(who);
    if (auto blk = engine_->blocks().get(b)) seen_[b] = (*blk)->n_cached();
  }

  // Runs one engine step and sends its events (and block growth) from `self`.
  template <class Self>
  Status step(Self* self) {
    auto events = engine_->step();
    if (!events) return events.error();
    const bool freed = dispatch(*events, [self](const caf::actor& who, Frame f) {
      self->send(who, event_atom::value, std::move(f));
    });
    for (auto& [b, who] : watchers_) {  // blocks that grew in this step
      auto blk = engine_->blocks().get(b);
      if (!blk) continue;
      const int64_t n = (*blk)->n_cached();
      if (n == seen_[b]) continue;
      seen_[b] = n;
      for (const caf::actor& w : who) self->send(w, grown_atom::value, b, n);
    }
    if (freed && !start_waiting()) notify(waiting_.front().program);  // still no room: the scheduler makes it
    return Status::success();
  }

 private:
  struct Held {  // a request that waits: for its program's restore, or for room
    std::vector<uint8_t> frame;
    uint64_t rid = 0;  // the requester's id for it
    caf::actor sender;
    Deliver deliver;
    int64_t growth = 0;    // pages its block may grow by (what it wants, for the status)
    uint64_t program = 0;  // waiting for room: whose it is
  };
  // The blocks a request names: its view, and the block it writes.
  static std::vector<BlockId> named(const Request& r) {
    std::vector<BlockId> v = r.view;
    if (r.kind != RequestKind::probe) v.push_back(r.write_to);
    return v;
  }

  // Keeps a command for the program's restore; its reply goes out then.
  std::optional<Frame> hold(uint64_t program, const std::vector<uint8_t>& bytes, uint64_t rid,
                            const caf::actor& sender, const Defer& defer, int64_t growth) {
    held_[program].push_back(Held{bytes, rid, sender, defer(), growth, 0});
    notify(program);
    return std::nullopt;
  }

  void notify(uint64_t program) const {
    if (scheduler_) caf::anon_send(scheduler_, waiting_atom::value, program);
  }

  // Sends each event to the request's subscriber (through `send(who, frame)`) and forgets the
  // finished requests; true when one of them had room kept for it.
  template <class Send>
  bool dispatch(const std::vector<Event>& events, Send send) {
    bool freed = false;
    for (const Event& e : events) {
      if (e.type == Event::Type::finished) freed |= gate_.release(e.request);
      auto it = subs_.find(e.request);
      if (it == subs_.end()) continue;
      std::string text;
      if (e.type == Event::Type::token) text = it->second.text->push(e.token);
      if (e.type == Event::Type::finished) text = it->second.text->flush();
      if (e.type == Event::Type::finished && !text.empty()) {  // the held-back tail, as a last token event
        Event tail = e;
        tail.type = Event::Type::token;
        tail.token = -1;
        send(it->second.who, encode_event(it->second.correlation, tail, text));
        text.clear();
      }
      send(it->second.who, encode_event(it->second.correlation, e, text));
      if (e.type == Event::Type::finished) subs_.erase(it);
    }
    return freed;
  }

  Frame start(const Request& r, uint64_t rid, const caf::actor& sender, uint64_t program) {
    const int64_t end = gate_.end_after(r, pool_);
    auto id = engine_->submit(r);
    if (!id) return encode_error_envelope(rid, id.error());
    subs_[*id] = Subscriber{sender, rid,
                            std::make_unique<IncrementalDecoder>(engine_->model().tokenizer,
                                                                 DecodeOptions{.render_special = false})};
    if (program != 0) gate_.reserve(*id, r, program, end);
    return encode_submitted(rid, *id);
  }

  // Requests waiting for room start, in order, while it is there; false when one is left.
  bool start_waiting() {
    while (!waiting_.empty()) {
      Held& h = waiting_.front();
      uint64_t rid = 0;
      auto cmd = decode_command(h.frame, &rid, &engine_->model().tokenizer);
      const Request* req = cmd ? &std::get<Request>(*cmd) : nullptr;  // it decoded when it came
      const ProgramRecord* owner = programs_.find(h.program);
      std::optional<Error> never = req && owner ? gate_.never_fits(*req, owner->blocks, pool_) : std::nullopt;
      const uint64_t paused =
          req ? programs_.hold_owner(named(*req), true) : 0;  // one it reads was paused meanwhile
      if (req && !never && !paused && gate_.gate_pages(*req, pool_) > gate_.room(pool_)) return false;
      Held go = std::move(h);
      waiting_.pop_front();
      if (!req) continue;
      if (never)
        go.deliver(encode_error_envelope(go.rid, *never));
      else if (paused)
        held_[paused].push_back(std::move(go));
      else
        go.deliver(start(*req, go.rid, go.sender, go.program));
    }
    return true;
  }

  // Where a program stands: what it holds, its requests held or waiting, and the pages they and
  // its running requests may still take.
  Frame status(uint64_t rid, uint64_t id, const ProgramRecord& p) const {
    const ProgramTable::Holdings h = programs_.holdings(id, pool_);
    int64_t wanted = gate_.kept_for(id, p.blocks, pool_);
    size_t held = 0;
    if (auto it = held_.find(id); it != held_.end())
      for (const Held& x : it->second) {
        ++held;
        wanted += x.growth;
      }
    for (const Held& x : waiting_)
      if (x.program == id) {
        ++held;
        wanted += x.growth;
      }
    return encode_program_status(rid, id, p.state, static_cast<uint32_t>(h.pages),
                                 static_cast<uint64_t>(h.tokens), p.acting, static_cast<uint32_t>(h.pending),
                                 static_cast<uint32_t>(held), static_cast<uint32_t>(wanted));
  }

  // A block as a reader sees it now: its tokens, and how many of them are cached.
  Result<BlockSummary> summarize(BlockId id) {
    auto blk = engine_->blocks().get(id);
    if (!blk) return blk.error();
    return BlockSummary{id, (*blk)->name, static_cast<int64_t>((*blk)->tokens.size()), (*blk)->n_cached()};
  }

  Frame info(uint64_t rid, BlockId id) {
    auto b = summarize(id);
    if (!b) return encode_error_envelope(rid, b.error());
    return encode_block_info(rid, b->block, b->name, b->tokens, b->cached);
  }

  // Each block of the view as it is now; an unknown block is an error naming it.
  Frame snapshot(uint64_t rid, const std::vector<BlockId>& view) {
    std::vector<BlockSummary> out;
    for (BlockId id : view) {
      auto b = summarize(id);
      if (!b) return encode_error_envelope(rid, b.error());
      out.push_back(std::move(*b));
    }
    return encode_view_snapshot(rid, out);
  }

  // Free answers with the freed id; clear with the emptied block; merge and fork with the new one.
  Frame on_block_op(uint64_t rid, const BlockOpCmd& op) {
    BlockStore& store = engine_->blocks();
    using Op = BlockOpCmd::Op;
    std::vector<BlockId> touched = {op.block};
    if (op.op == Op::merge) touched.push_back(op.second);
    for (BlockId b : touched) {
      auto blk = store.get(b);
      if (blk && (*blk)->paused)
        return encode_error_envelope(
            rid, make_error(Errc::invalid_argument,
                            "block " + std::to_string(b) + " is paused: restore its program first"));
    }
    if (op.op == Op::free || op.op == Op::clear) {
      Status s = op.op == Op::free ? store.free(op.block) : store.clear(op.block);
      if (!s.ok()) return encode_error_envelope(rid, s.error());
      if (op.op == Op::free) programs_.forget_block(op.block);  // a freed block leaves its program
      start_waiting();                                          // its pages are free
      return op.op == Op::free ? encode_block_info(rid, op.block, "", 0, 0) : info(rid, op.block);
    }
    auto made = op.op == Op::merge ? store.merge(op.block, op.second, op.name)
                                   : store.fork(op.block, op.tokens, op.name);
    if (!made) return encode_error_envelope(rid, made.error());
    return info(rid, *made);
  }

  Frame on_program(uint64_t rid, const ProgramCmd& pc) {
    auto bad = [&](Errc code, const std::string& m) {
      return encode_error_envelope(rid, make_error(code, m));
    };
    const std::string name = "program " + std::to_string(pc.program);
    if (pc.op == ProgramCmd::Op::register_program) {
      for (BlockId b : pc.blocks)
        if (!engine_->blocks().is_live(b))
          return bad(Errc::not_found, name + ": block " + std::to_string(b) + " does not exist");
      held_.erase(pc.program);
      return status(rid, pc.program,
                    programs_.add(pc.program, {pc.name, pc.blocks, ProgramState::active, pc.hold}));
    }
    ProgramRecord* found = programs_.find(pc.program);
    if (!found) return bad(Errc::not_found, name + " is not registered");
    ProgramRecord& p = *found;
    if (pc.op == ProgramCmd::Op::phase) {  // recorded; the answer is where the program stands
      p.acting = pc.acting;
      return status(rid, pc.program, p);
    }
    Status s = Status::success();
    if (pc.op == ProgramCmd::Op::pause) s = engine_->pause(p.blocks, pc.mode);
    if (pc.op == ProgramCmd::Op::restore) {
      // The pool's room is what running scheduled requests will not write: a restore that
      // takes it would make them run out.
      const int64_t need = programs_.restore_pages(pc.program, pool_);
      const int64_t free = pool_.n_free(), left = gate_.room(pool_);
      if (need > left && need <= free)
        s = make_error(Errc::out_of_memory, "KV cache full: restoring " + name + " needs " +
                                                std::to_string(need) + " pages; " + std::to_string(free) +
                                                " are free, " + std::to_string(free - left) +
                                                " of them kept for running requests; nothing was restored");
      else
        s = engine_->restore(p.blocks);
    }
    if (pc.op == ProgramCmd::Op::terminate) {
      if (pc.cancel)  // its requests in the engine end first, their subscribers told why
        dispatch(
            engine_->cancel(p.blocks, "cancelled: " + name + " was terminated"),
            [](const caf::actor& who, Frame f) { caf::anon_send(who, event_atom::value, std::move(f)); });
      // All or nothing: a block that a pending request still holds keeps every block (the caller
      // may try again once the request is done).
      for (BlockId b : p.blocks)
        if (auto blk = engine_->blocks().get(b); blk && (*blk)->holds > 0 && s.ok())
          s = make_error(Errc::invalid_argument, name + ": block " + std::to_string(b) + " has " +
                                                     std::to_string((*blk)->holds) + " pending request(s)");
      for (BlockId b : p.blocks)
        if (s.ok() && engine_->blocks().is_live(b)) s = engine_->blocks().free(b);
    }
    if (!s.ok()) return encode_error_envelope(rid, s.error());
    p.state = pc.op == ProgramCmd::Op::pause ? ProgramState::paused : ProgramState::active;
    // Its requests waiting for room: held for its restore now (paused), or ended with it.
    for (auto it = waiting_.begin(); it != waiting_.end();)
      if (it->program == pc.program) {
        it->program = 0;
        held_[pc.program].push_back(std::move(*it));
        it = waiting_.erase(it);
      } else {
        ++it;
      }
    std::vector<Held> held;
    if (pc.op != ProgramCmd::Op::pause) {
      held.swap(held_[pc.program]);
      held_.erase(pc.program);
    }
    if (pc.op == ProgramCmd::Op::terminate) {
      Frame f = encode_program_status(rid, pc.program, ProgramState::terminated, 0, 0);
      programs_.erase(pc.program);
      for (Held& h : held)  // they asked for blocks that are gone now
        h.deliver(encode_error_envelope(
            h.rid,
            make_error(Errc::not_found, name + " was terminated while this request waited for its restore")));
      start_waiting();  // its pages are free
      return f;
    }
    Frame f = status(rid, pc.program, p);
    if (pc.op == ProgramCmd::Op::pause) start_waiting();  // its pages are free
    // Restored: the held requests go in now, in the order they came (none is held again: the
    // program is active; one may wait for room, or be held by another paused program it names:
    // the same promise waits there).
    for (Held& h : held) {
      h.program = 0;
      if (auto reply = on_frame(h.frame, h.sender, [&h] { return h.deliver; })) h.deliver(std::move(*reply));
    }
    return f;
  }

  std::shared_ptr<Engine> engine_;
  StoreView pool_;  // the engine's blocks, as the memory side counts them
  std::map<RequestId, Subscriber> subs_;
  ProgramTable programs_;
  std::map<uint64_t, std::vector<Held>> held_;  // per paused program: requests held for its restore
  std::deque<Held> waiting_;                    // requests of scheduled programs waiting for room
  RoomGate gate_;                               // ... and the room kept for those running
  caf::actor scheduler_;
  std::map<BlockId, std::vector<caf::actor>> watchers_;  // block -> who wants to know it grew
  std::map<BlockId, int64_t> seen_;                      // cached length last reported
};

// A Deliver for the request `self` is handling now: the reply goes out when it is called.
template <class Self>
BatcherCore::Deliver promise(Self* self) {
  auto rp = self->make_response_promise();
  return [rp](Frame f) mutable { rp.deliver(std::move(f)); };
}

void batcher_main(caf::blocking_actor* self, std::shared_ptr<Engine> engine) {
  BatcherCore core(std::move(engine));
  bool running = true;
  bool got = false;
  bool stopping = false;  // stop_atom: finish what was accepted, then end
  auto on_frame = [&](frame_atom, const std::vector<uint8_t>& bytes) -> caf::result<std::vector<uint8_t>> {
    got = true;
    auto reply = core.on_frame(bytes, caf::actor_cast<caf::actor>(self->current_sender()),
                               [self] { return promise(self); });
    if (reply) return std::move(*reply);
    return caf::delegated<std::vector<uint8_t>>{};
  };
  auto on_subscribe = [&](subscribe_atom, BlockId b) {
    got = true;
    core.on_subscribe(b, caf::actor_cast<caf::actor>(self->current_sender()));
  };
  auto on_scheduler = [&](scheduler_atom) {
    got = true;
    core.set_scheduler(caf::actor_cast<caf::actor>(self->current_sender()));
  };
  auto on_stop = [&](stop_atom) {
    got = true;
    stopping = true;
  };
  auto on_exit = [&](caf::exit_msg& m) {
    running = false;
    self->fail_state(m.reason);
  };
  while (running) {
    if (stopping && core.idle()) break;
    if (core.idle() && !stopping)
      self->receive(on_frame, on_subscribe, on_scheduler, on_stop, on_exit);  // sleep until there is work
    do {  // then take everything already queued, without waiting
      got = false;
      self->receive(
          on_frame, on_subscribe, on_scheduler, on_stop, on_exit,
          caf::after(std::chrono::seconds(0)) >> [] {});
    } while (got && running);
    if (!running || core.idle()) continue;
    if (Status s = core.step(self); !s.ok()) {
      self->fail_state(caf::make_error(caf::sec::runtime_error, s.error().to_string()));
      break;
    }
  }
}

struct CooperativeState {
  std::unique_ptr<BatcherCore> core;
  bool step_queued = false;  // a step_atom is in the mailbox
  bool stopping = false;
};

// One step per step_atom, sent to itself: commands that arrive meanwhile queue ahead of the next
// step, so they are applied before it, as in the detached loop.
caf::behavior batcher_cooperative(caf::stateful_actor<CooperativeState>* self,
                                  std::shared_ptr<Engine> engine) {
  self->state.core = std::make_unique<BatcherCore>(std::move(engine));
  auto kick = [self] {
    auto& st = self->state;
    if (!st.step_queued && !st.core->idle()) {
      st.step_queued = true;
      self->send(self, step_atom::value);
    } else if (st.stopping && st.core->idle()) {
      self->quit();
    }
  };
  return {
      [=](frame_atom, const std::vector<uint8_t>& bytes) -> caf::result<std::vector<uint8_t>> {
        auto reply = self->state.core->on_frame(bytes, caf::actor_cast<caf::actor>(self->current_sender()),
                                                [self] { return promise(self); });
        kick();
        if (reply) return std::move(*reply);
        return caf::delegated<std::vector<uint8_t>>{};
      },
      [=](subscribe_atom, BlockId b) {
        self->state.core->on_subscribe(b, caf::actor_cast<caf::actor>(self->current_sender()));
      },
      [=](scheduler_atom) {
        self->state.core->set_scheduler(caf::actor_cast<caf::actor>(self->current_sender()));
      },
      [=](stop_atom) {
        self->state.stopping = true;
        kick();
      },
      [=](step_atom) {
        self->state.step_queued = false;
        if (Status s = self->state.core->step(self); !s.ok()) {
          self->quit(caf::make_error(caf::sec::runtime_error, s.error().to_string()));
          return;
        }
        kick();
      },
  };
}

}  // namespace

caf::actor spawn_batcher(caf::actor_system& sys, std::unique_ptr<Engine> engine) {
  return spawn_batcher(sys, std::shared_ptr<Engine>(std::move(engine)));
}

caf::actor spawn_batcher(caf::actor_system& sys, std::shared_ptr<Engine> engine) {
  return sys.spawn<caf::detached>(batcher_main, std::move(engine));
}

caf::actor spawn_batcher_cooperative(caf::actor_system& sys, std::shared_ptr<Engine> engine) {
  return sys.spawn(batcher_cooperative, std::move(engine));
}

}  // namespace chorus
