#include "actors/batcher.h"

#include <caf/all.hpp>
#include <map>

#include "actors/atoms.h"
#include "actors/codec.h"
#include "actors/wire.h"
#include "engine/detokenizer.h"
#include "engine/engine.h"

namespace chorus {
namespace {

struct Subscriber {
  caf::actor who;
  uint64_t correlation;
  std::unique_ptr<IncrementalDecoder> text;
};

void batcher_main(caf::blocking_actor* self, std::shared_ptr<Engine> engine) {
  std::map<RequestId, Subscriber> subs;
  struct Program {
    std::string name;
    std::vector<BlockId> blocks;
    int state = 0;  // 0 active, 1 paused
  };
  std::map<uint64_t, Program> programs;
  auto status = [&](uint64_t rid, uint64_t id, const Program& p) {
    int64_t pages = 0, tokens = 0;
    for (BlockId b : p.blocks)
      if (auto blk = engine->blocks().get(b)) {
        for (const Extent& e : (*blk)->extents) pages += static_cast<int64_t>(e.kv.pages.size());
        tokens += static_cast<int64_t>((*blk)->tokens.size());
      }
    return encode_program_status(rid, id, p.state, static_cast<uint32_t>(pages), static_cast<uint64_t>(tokens));
  };
  bool running = true;
  bool got = false;
  auto on_frame = [&](frame_atom, const std::vector<uint8_t>& bytes) -> std::vector<uint8_t> {
    got = true;
    uint64_t rid = 0;
    auto cmd = decode_command(bytes, &rid, &engine->model().tokenizer);
    if (!cmd) return encode_error_envelope(rid, cmd.error());
    if (auto* c = std::get_if<CreateBlockCmd>(&*cmd)) {
      const BlockId id = engine->blocks().create(c->name);
      return encode_block_info(rid, id, c->name, 0, 0);
    }
    if (auto* f = std::get_if<FreeBlockCmd>(&*cmd)) {
      if (Status s = engine->blocks().free(f->block); !s.ok()) return encode_error_envelope(rid, s.error());
      return encode_block_info(rid, f->block, "", 0, 0);
    }
    if (auto* pc = std::get_if<ProgramCmd>(&*cmd)) {
      auto bad = [&](Errc code, const std::string& m) { return encode_error_envelope(rid, make_error(code, m)); };
      if (pc->op == ProgramCmd::Op::register_program) {
        for (BlockId b : pc->blocks)
          if (!engine->blocks().is_live(b)) return bad(Errc::not_found, "program " + std::to_string(pc->program) + ": block " + std::to_string(b) + " does not exist");
        programs[pc->program] = Program{pc->name, pc->blocks, 0};
        return status(rid, pc->program, programs[pc->program]);
      }
      auto it = programs.find(pc->program);
      if (it == programs.end()) return bad(Errc::not_found, "program " + std::to_string(pc->program) + " is not registered");
      Program& p = it->second;
      Status s = Status::success();
      if (pc->op == ProgramCmd::Op::pause) s = engine->pause(p.blocks, pc->mode);
      if (pc->op == ProgramCmd::Op::restore) s = engine->restore(p.blocks);
      if (pc->op == ProgramCmd::Op::terminate)
        for (BlockId b : p.blocks)
          if (s.ok()) s = engine->blocks().free(b);
      if (!s.ok()) return encode_error_envelope(rid, s.error());
      p.state = pc->op == ProgramCmd::Op::pause ? 1 : 0;
      if (pc->op == ProgramCmd::Op::terminate) {
        Frame f = encode_program_status(rid, pc->program, 2, 0, 0);
        programs.erase(it);
        return f;
      }
      return status(rid, pc->program, p);
    }
    auto id = engine->submit(std::get<Request>(*cmd));
    if (!id) return encode_error_envelope(rid, id.error());
    subs[*id] = Subscriber{caf::actor_cast<caf::actor>(self->current_sender()), rid,
                           std::make_unique<IncrementalDecoder>(engine->model().tokenizer,
                                                                DecodeOptions{.render_special = false})};
    return encode_submitted(rid, *id);
  };
  bool stopping = false;  // stop_atom: finish what was accepted, then end
  std::map<BlockId, std::vector<caf::actor>> watchers;  // block -> who wants to know it grew
  std::map<BlockId, int64_t> seen;                       // cached length last reported
  auto on_subscribe = [&](subscribe_atom, BlockId b) {
    got = true;
    watchers[b].push_back(caf::actor_cast<caf::actor>(self->current_sender()));
    if (auto blk = engine->blocks().get(b)) seen[b] = (*blk)->n_cached();
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
    if (stopping && engine->idle()) break;
    if (engine->idle() && !stopping) self->receive(on_frame, on_subscribe, on_stop, on_exit);  // sleep until there is work
    do {  // then take everything already queued, without waiting
      got = false;
      self->receive(on_frame, on_subscribe, on_stop, on_exit, caf::after(std::chrono::seconds(0)) >> [] {});
    } while (got && running);
    if (!running || engine->idle()) continue;
    auto events = engine->step();
    if (!events) {
      running = false;
      self->fail_state(caf::make_error(caf::sec::runtime_error, events.error().to_string()));
      break;
    }
    for (const Event& e : *events) {
      auto it = subs.find(e.request);
      if (it == subs.end()) continue;
      std::string text;
      if (e.type == Event::Type::token) text = it->second.text->push(e.token);
      if (e.type == Event::Type::finished) text = it->second.text->flush();
      if (e.type == Event::Type::finished && !text.empty()) {  // the held-back tail, as a last token event
        Event tail = e;
        tail.type = Event::Type::token;
        tail.token = -1;
        self->send(it->second.who, event_atom::value, encode_event(it->second.correlation, tail, text));
        text.clear();
      }
      self->send(it->second.who, event_atom::value, encode_event(it->second.correlation, e, text));
      if (e.type == Event::Type::finished) subs.erase(it);
    }
    for (auto& [b, who] : watchers) {  // blocks that grew in this step
      auto blk = engine->blocks().get(b);
      if (!blk) continue;
      const int64_t n = (*blk)->n_cached();
      if (n == seen[b]) continue;
      seen[b] = n;
      for (const caf::actor& w : who) self->send(w, grown_atom::value, b, n);
    }
  }
}

}  // namespace

caf::actor spawn_batcher(caf::actor_system& sys, std::unique_ptr<Engine> engine) {
  return spawn_batcher(sys, std::shared_ptr<Engine>(std::move(engine)));
}

caf::actor spawn_batcher(caf::actor_system& sys, std::shared_ptr<Engine> engine) {
  return sys.spawn<caf::detached>(batcher_main, std::move(engine));
}

}  // namespace chorus
