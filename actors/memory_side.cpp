#include "actors/memory_side.h"

#include <caf/all.hpp>
#include <string>

#include "actors/atoms.h"
#include "net/wire.h"

namespace chorus {

std::vector<BlockId> MemorySide::named(const Request& r) {
  std::vector<BlockId> v = r.view;
  if (r.kind != RequestKind::probe) v.push_back(r.write_to);
  return v;
}

std::optional<Frame> MemorySide::on_frame(const std::vector<uint8_t>& bytes, const caf::actor& sender,
                                          const Defer& defer) {
  uint64_t rid = 0;
  auto cmd = decode_command(bytes, &rid, &link_.tokenizer());
  if (!cmd) return encode_error_envelope(rid, cmd.error());
  if (auto* c = std::get_if<CreateBlockCmd>(&*cmd)) return on_create(rid, *c);
  if (auto* op = std::get_if<BlockOpCmd>(&*cmd)) {
    // On a paused program registered with `hold` (a source clearing its window, say), it waits
    // for the restore like a request.
    // A block's image moves while its program is paused (exported from its host copy, loaded
    // into a paused program's new block): those do not wait.
    const bool transfer = op->op == BlockOpCmd::Op::export_part || op->op == BlockOpCmd::Op::load_part;
    const BlockId touched[] = {op->block, op->second};
    if (const uint64_t p = transfer ? 0 : programs_.hold_owner(touched, true))
      return hold(p, bytes, rid, sender, defer, 0, 0);
    return on_block_op(rid, *op);
  }
  if (auto* v = std::get_if<SnapshotViewCmd>(&*cmd)) return link_.snapshot(rid, v->view, v->logs);
  if (std::holds_alternative<ListProgramsCmd>(*cmd)) {
    std::vector<ProgramEntryData> out;
    for (const auto& [id, p] : programs_.all()) out.push_back({id, p.name, p.blocks, p.state, p.hold});
    return encode_program_list(rid, out);
  }
  if (auto* pc = std::get_if<ProgramCmd>(&*cmd)) return on_program(rid, *pc);
  if (std::holds_alternative<HeartbeatCmd>(*cmd)) {
    const PoolView& pool = link_.pool();
    return encode_heartbeat(
        rid, "", static_cast<uint32_t>(pool.n_pages() - pool.n_free()), static_cast<uint32_t>(pool.n_pages()),
        static_cast<uint32_t>(pool.n_slots() - pool.n_free_slots()), static_cast<uint32_t>(pool.n_slots()));
  }
  return on_request(std::get<Request>(*cmd), bytes, rid, sender, defer);
}

Result<ProgramRecord*> MemorySide::joining(uint64_t program) {
  if (program == 0) return static_cast<ProgramRecord*>(nullptr);
  ProgramRecord* owner = programs_.find(program);
  const std::string name = "program " + std::to_string(program);
  if (!owner) return make_error(Errc::not_found, name + " is not registered");
  if (owner->state != ProgramState::active)
    return make_error(Errc::invalid_argument, name + " is paused: restore it before adding blocks");
  return owner;
}

std::optional<Frame> MemorySide::on_create(uint64_t rid, const CreateBlockCmd& c) {
  auto joins = joining(c.program);  // the block joins a program: it is paused and restored with it
  if (!joins) return encode_error_envelope(rid, joins.error());
  ProgramRecord* owner = *joins;
  const BlockId id = link_.create_block(c.name);
  if (owner) owner->blocks.push_back(id);
  return encode_block_info(rid, id, c.name, 0, 0);
}

std::optional<Frame> MemorySide::on_request(const Request& req, const std::vector<uint8_t>& bytes,
                                            uint64_t rid, const caf::actor& sender, const Defer& defer) {
  const PoolView& pool = link_.pool();
  if (const uint64_t p = programs_.hold_owner(named(req), true))
    return hold(p, bytes, rid, sender, defer, gate_.growth_pages(req, pool), gate_.gate_slots(req, pool));
  // A request of a program registered with `hold` starts only with room in the pool for all it
  // may write; until then it waits, in arrival order (a scheduler makes the room).
  if (const uint64_t program = programs_.hold_owner(named(req), false)) {
    if (auto never = gate_.never_fits(req, programs_.find(program)->blocks, pool))
      return encode_error_envelope(rid, *never);
    if (!waiting_.empty() || !fits(req, pool)) {
      waiting_.push_back(Held{bytes, rid, sender, defer(), gate_.growth_pages(req, pool),
                              gate_.gate_slots(req, pool), program});
      notify(program);
      return std::nullopt;
    }
    return start(req, rid, sender, program);
  }
  return start(req, rid, sender, 0);
}

Frame MemorySide::on_block_op(uint64_t rid, const BlockOpCmd& op) {
  // A fork may join a program, as CreateBlock's block does.
  auto joins = joining(op.op == BlockOpCmd::Op::fork ? op.program : 0);
  if (!joins) return encode_error_envelope(rid, joins.error());
  Frame f = link_.block_op(rid, op);
  if (*joins)
    if (auto r = decode_reply(f); r && r->kind == ReplyKind::block_info) (*joins)->blocks.push_back(r->id);
  if (op.op == BlockOpCmd::Op::free || op.op == BlockOpCmd::Op::clear) {
    auto r = decode_reply(f);
    if (r && r->kind != ReplyKind::error) {
      if (op.op == BlockOpCmd::Op::free)
        programs_.forget_block(op.block);  // a freed block leaves its program
      start_waiting();                     // its pages are free
    }
  }
  return f;
}

bool MemorySide::fits(const Request& r, const PoolView& pool) const {
  return gate_.gate_pages(r, pool) <= gate_.room(pool) && gate_.gate_slots(r, pool) <= gate_.slot_room(pool);
}

// Keeps a command for the program's restore; its reply goes out then.
std::optional<Frame> MemorySide::hold(uint64_t program, const std::vector<uint8_t>& bytes, uint64_t rid,
                                      const caf::actor& sender, const Defer& defer, int64_t growth,
                                      int64_t growth_slots) {
  held_[program].push_back(Held{bytes, rid, sender, defer(), growth, growth_slots, 0});
  notify(program);
  return std::nullopt;
}

void MemorySide::notify(uint64_t program) const {
  if (scheduler_) caf::anon_send(scheduler_, waiting_atom::value, program);
}

Frame MemorySide::start(const Request& r, uint64_t rid, const caf::actor& sender, uint64_t program) {
  const int64_t end = gate_.end_after(r, link_.pool());
  const bool slot = gate_.gate_slots(r, link_.pool()) > 0;
  auto id = link_.submit(r, sender, rid);
  if (!id) return encode_error_envelope(rid, id.error());
  if (program != 0) gate_.reserve(*id, r, program, end, slot);
  return encode_submitted(rid, *id);
}

void MemorySide::on_finished(const std::vector<RequestId>& finished) {
  bool freed = false;
  for (RequestId id : finished) freed |= gate_.release(id);
  if (freed && !start_waiting()) notify(waiting_.front().program);  // still no room: the scheduler makes it
}

// Requests waiting for room start, in order, while it is there; false when one is left.
bool MemorySide::start_waiting() {
  while (!waiting_.empty()) {
    const PoolView& pool = link_.pool();
    Held& h = waiting_.front();
    uint64_t rid = 0;
    auto cmd = decode_command(h.frame, &rid, &link_.tokenizer());
    const Request* req = cmd ? &std::get<Request>(*cmd) : nullptr;  // it decoded when it came
    const ProgramRecord* owner = programs_.find(h.program);
    std::optional<Error> never = req && owner ? gate_.never_fits(*req, owner->blocks, pool) : std::nullopt;
    const uint64_t paused =
        req ? programs_.hold_owner(named(*req), true) : 0;  // one it reads was paused meanwhile
    if (req && !never && !paused && !fits(*req, pool)) return false;
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
Frame MemorySide::status(uint64_t rid, uint64_t id, const ProgramRecord& p) {
  const PoolView& pool = link_.pool();
  const ProgramTable::Holdings h = programs_.holdings(id, pool);
  int64_t wanted = gate_.kept_for(id, p.blocks, pool),
          wanted_slots = gate_.slots_kept_for(id, p.blocks, pool);
  size_t held = 0;
  auto count = [&](const Held& x) {
    ++held;
    wanted += x.growth;
    wanted_slots += x.growth_slots;
  };
  if (auto it = held_.find(id); it != held_.end())
    for (const Held& x : it->second) count(x);
  for (const Held& x : waiting_)
    if (x.program == id) count(x);
  // Paused: the slots its restore takes back, as its pages are counted by the scheduler.
  const int64_t slots = p.state == ProgramState::paused ? programs_.restore_slots(id, pool) : h.slots;
  return encode_program_status(rid, id, p.state, static_cast<uint32_t>(h.pages),
                               static_cast<uint64_t>(h.tokens), p.acting, static_cast<uint32_t>(h.pending),
                               static_cast<uint32_t>(held), static_cast<uint32_t>(wanted),
                               static_cast<uint32_t>(slots), static_cast<uint32_t>(wanted_slots));
}

Frame MemorySide::on_program(uint64_t rid, const ProgramCmd& pc) {
  auto bad = [&](Errc code, const std::string& m) { return encode_error_envelope(rid, make_error(code, m)); };
  const std::string name = "program " + std::to_string(pc.program);
  if (pc.op == ProgramCmd::Op::register_program) {
    for (BlockId b : pc.blocks)
      if (!link_.is_live(b))
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
  if (pc.op == ProgramCmd::Op::withdraw) return withdraw(rid, pc.program, pc.request);
  Status s = Status::success();
  if (pc.op == ProgramCmd::Op::pause) s = link_.pause(p.blocks, pc.mode);
  if (pc.op == ProgramCmd::Op::restore) s = restore(pc.program, p, name);
  std::vector<RequestId> cancelled;
  if (pc.op == ProgramCmd::Op::terminate) s = link_.end_blocks(p.blocks, pc.cancel, name, &cancelled);
  for (RequestId id : cancelled) gate_.release(id);
  if (!s.ok()) return encode_error_envelope(rid, s.error());
  p.state = pc.op == ProgramCmd::Op::pause ? ProgramState::paused : ProgramState::active;
  std::vector<Held> held = take_held(pc.program, pc.op);
  if (pc.op == ProgramCmd::Op::terminate) {
    programs_.erase(pc.program);
    for (Held& h : held)  // they asked for blocks that are gone now
      h.deliver(encode_error_envelope(
          h.rid,
          make_error(Errc::not_found, name + " was terminated while this request waited for its restore")));
    start_waiting();  // its pages are free
    return encode_program_status(rid, pc.program, ProgramState::terminated, 0, 0);
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

// A waiting request of `program` taken back by its client: it ends with an error saying so.
Frame MemorySide::withdraw(uint64_t rid, uint64_t program, uint64_t request) {
  const std::string name = "program " + std::to_string(program);
  std::optional<Held> found;
  if (auto it = held_.find(program); it != held_.end())
    for (auto h = it->second.begin(); h != it->second.end(); ++h)
      if (h->rid == request) {
        found = std::move(*h);
        it->second.erase(h);
        break;
      }
  for (auto h = waiting_.begin(); !found && h != waiting_.end(); ++h)
    if (h->program == program && h->rid == request) {
      found = std::move(*h);
      waiting_.erase(h);
      start_waiting();  // those behind it may fit
      break;
    }
  if (!found)
    return encode_error_envelope(
        rid, make_error(Errc::not_found, "no request " + std::to_string(request) + " of " + name + " waits"));
  found->deliver(encode_error_envelope(
      found->rid, make_error(Errc::withdrawn, "withdrawn by its client while it waited for " + name +
                                                  " to be restored or for room in the KV pool")));
  return status(rid, program, *programs_.find(program));
}

// The pool's room is what running scheduled requests will not write: a restore that takes it
// would make them run out.
Status MemorySide::restore(uint64_t program, const ProgramRecord& p, const std::string& name) {
  const PoolView& pool = link_.pool();
  const int64_t need = programs_.restore_pages(program, pool);
  const int64_t free = pool.n_free(), left = gate_.room(pool);
  if (need > left && need <= free)
    return make_error(Errc::out_of_memory, "KV cache full: restoring " + name + " needs " +
                                               std::to_string(need) + " pages; " + std::to_string(free) +
                                               " are free, " + std::to_string(free - left) +
                                               " of them kept for running requests; nothing was restored");
  const int64_t need_slots = programs_.restore_slots(program, pool);
  const int64_t free_slots = pool.n_free_slots(), slots_left = gate_.slot_room(pool);
  if (need_slots > slots_left && need_slots <= free_slots)
    return make_error(Errc::out_of_memory, "linear-state slots full: restoring " + name + " needs " +
                                               std::to_string(need_slots) + "; " +
                                               std::to_string(free_slots) + " are free, " +
                                               std::to_string(free_slots - slots_left) +
                                               " of them kept for running requests; nothing was restored");
  return link_.restore(p.blocks);
}

std::vector<MemorySide::Held> MemorySide::take_held(uint64_t program, ProgramCmd::Op op) {
  // Its requests waiting for room are held for its restore now (paused), or end with it.
  for (auto it = waiting_.begin(); it != waiting_.end();)
    if (it->program == program) {
      it->program = 0;
      held_[program].push_back(std::move(*it));
      it = waiting_.erase(it);
    } else {
      ++it;
    }
  std::vector<Held> held;
  if (op != ProgramCmd::Op::pause) {
    held.swap(held_[program]);
    held_.erase(program);
  }
  return held;
}

}  // namespace chorus
