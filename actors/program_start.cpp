// Program::start and Program::patch: the phases that build a program's actors and blocks from
// its topology, and that grow and swap them when a patch changes it (Program::Starter).
#include "actors/program.h"

#include <spdlog/spdlog.h>
#include <unistd.h>
#include <atomic>
#include <caf/all.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <future>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <zmq.hpp>

#include "actors/atoms.h"
#include "actors/batcher.h"
#include "actors/feeders.h"
#include "actors/node_port.h"
#include "actors/placed_actor.h"
#include "actors/program_impl.h"
#include "actors/program_manager.h"
#include "actors/program_roles.h"
#include "actors/role_messages.h"
#include "actors/sandbox.h"
#include "actors/submit.h"
#include "engine/forward/kv_cache.h"
#include "engine/model/model.h"
#include "engine/step/engine.h"
#include "engine/step/trace.h"
#include "net/codec.h"
#include "net/role_codec.h"

namespace chorus {

using namespace program_roles;
using topology::Kind;

namespace {

std::vector<TokenId> encode(const Tokenizer& tok, const std::string& text) {
  return tok.encode(text, {.parse_special = true});
}

// The chat turn a block's text is wrapped as (ChatML, the template chorus renders).
std::string render_block(const topology::Block& b) {
  if (b.chat.empty()) return b.text;
  return "<|im_start|>" + b.chat + "\n" + b.text + "<|im_end|>\n";
}

}  // namespace

Result<std::unique_ptr<Program>> Program::start(caf::actor_system& sys, const topology::Topology& t,
                                                const Model& model, CpuDevice& device, ProgramHooks hooks,
                                                CudaDevice* gpu) {
  EngineOptions opts = engine_options(t);
  opts.trace = hooks.trace;
  auto engine = SharedEngine::create(sys, model, device, opts, gpu);
  if (!engine) return engine.error();
  auto p = start(sys, t, std::move(*engine), std::move(hooks));
  if (p) (*p)->impl_->own_engine = true;  // its end stops the engine: no need to free blocks first
  return p;
}

// Program::start's phases, in order: the tools' sandbox, the program and its blocks in the
// memory actor, its admission (on a scheduled engine), the blocks' initial texts, the sinks,
// the roles (and the feeders of their sources), the controller; then every role starts. Each
// phase returns an error that names the file and the block or actor; the Program being built
// tears down whatever was made when one fails.
class Program::Starter {
 public:
  Starter(caf::actor_system& sys, Program::Impl& im)
      : sys_(sys),
        t_(im.topo),
        hooks_(im.hooks),
        im_(im),
        tok_(im.engine->model().tokenizer),
        self_(sys),
        where_(im.topo.file + ": "),
        manager_(im.engine->manager()),
        emitters_(im.topo.emitters()) {}

  Status run() {
    for (auto phase : {&Starter::check_placement, &Starter::trace_program, &Starter::make_tools,
                       &Starter::register_blocks, &Starter::await_admission, &Starter::initial_texts,
                       &Starter::make_sinks, &Starter::make_roles, &Starter::go})
      if (Status s = (this->*phase)(); !s.ok()) return s;
    return Status::success();
  }

 private:
  Result<Reply> call(const Frame& f) { return ask(self_, im_.batcher, f); }
  Error failed(const Error& e, const std::string& what) const {
    return make_error(e.code, where_ + what + ": " + e.message);
  }
  std::vector<BlockId> ids(const std::vector<std::string>& names) const {
    std::vector<BlockId> v;
    for (const auto& n : names) v.push_back(im_.blocks.at(n));
    return v;
  }

  // Placed roles: sinks, sources' feeds, probes and the tool sandbox go where their `node:` says
  // (make_sinks, feed, placed_probe, make_tools); a thinker's or writer's placement is not carried
  // yet, and is refused rather than run elsewhere than the file says.
  Status check_placement() {
    if (!hooks_.placement) return Status::success();
    for (const auto& a : t_.actors)
      if (!a.node.empty() && (a.kind == Kind::thinker || a.kind == Kind::writer))
        return make_error(Errc::unsupported,
                          where_ + "actors." + a.name + ": a " + std::string(topology::kind_name(a.kind)) +
                              " placed on " + a.node.describe() +
                              " is not carried yet (sinks, sources, probes and tool sandboxes are placed): "
                              "nothing was started");
    return Status::success();
  }

  // With a trace: the program's lane in it, and each event on it with who heard it.
  Status trace_program() {
    if (!hooks_.trace) return Status::success();
    lane_ = {hooks_.trace, hooks_.trace_lane >= 0 ? hooks_.trace_lane : static_cast<int64_t>(im_.program_id)};
    hooks_.trace->name_lane(Trace::kRolesPid, lane_.lane,
                            hooks_.trace_name.empty() ? t_.name : hooks_.trace_name);
    hooks_.event = [inner = hooks_.event, lane = lane_](const ProgramEvent& e) {
      std::string to;
      for (const auto& n : e.to) to += (to.empty() ? "" : ",") + Trace::quote(n);
      lane.trace->instant("role", e.name, Trace::kRolesPid, lane.lane, lane.trace->now_us(),
                          "{\"text\":" + Trace::quote(e.text) + ",\"to\":[" + to + "]}");
      if (inner) inner(e);
    };
    return Status::success();
  }

  // The program's sandbox, made with it and removed with it (and, on a scheduled engine, while
  // it is paused past a lease).
  Status make_tools() {
    std::vector<topology::Tool> sandboxed;
    for (const auto& tool : t_.tools)
      if (!tool.builtin()) sandboxed.push_back(tool);
    if (sandboxed.empty()) return Status::success();
    if (!sandboxed.front().node.empty() && hooks_.placement) return place_tools(sandboxed);
    if (const std::string missing = Sandbox::missing_isolation(); !missing.empty() && !hooks_.unsafe_tools)
      return make_error(Errc::unsupported,
                        where_ + "its tools need the sandbox, and this machine lacks " + missing +
                            "; nothing was started. To run them anyway with what isolation there is (" +
                            Sandbox::isolation() +
                            "; a tool could then read and change what this user can), pass --unsafe-tools");
    const char* env = std::getenv("CHORUS_SANDBOX_DIR");
    static std::atomic<int> n{0};
    im_.tools = spawn_tools(sys_, std::string(env ? env : "/tmp/chorus-sandboxes"),
                            t_.name + "-" + std::to_string(::getpid()) + "-" + std::to_string(++n),
                            std::move(sandboxed), im_.tools_cancel, lane_);
    im_.actors.push_back(im_.tools);
    return Status::success();
  }

  // The program's sandbox on the node its tools' placement names (one sandbox: they share it).
  Status place_tools(const std::vector<topology::Tool>& tools) {
    std::vector<ToolSpecData> specs;
    for (const auto& t : tools) specs.push_back(tool_spec(t));
    auto h = im_.place(where_, "sandbox", tools.front().node,  // reported as `tools`
                       [key = im_.host_key, name = t_.name, specs](uint64_t id) {
                         return encode_host_sandbox(id, key, name, "sandbox", specs);
                       });
    if (!h) return h.error();
    im_.tools = *h;
    im_.actors.push_back(im_.tools);
    return Status::success();
  }

  // One program for the memory actor: its blocks are paused and restored together.
  Status register_blocks() {
    ProgramCmd reg;
    reg.program = im_.program_id;
    reg.name = t_.name;
    reg.hold = manager_ != nullptr;  // scheduled: its requests wait while it is paused
    if (auto r = call(encode_program(++rid_, reg)); !r) return failed(r.error(), "registering the program");
    im_.registered = true;
    return create_blocks(t_.blocks);
  }

  Status create_blocks(const std::vector<topology::Block>& blocks) {
    for (const auto& b : blocks) {
      auto r = call(encode_create_block(++rid_, b.name, im_.program_id));
      if (!r) return failed(r.error(), "block " + b.name);
      im_.blocks[b.name] = static_cast<BlockId>(r->id);
    }
    return Status::success();
  }

  // On a scheduled engine it waits to be admitted, paused while its blocks are empty (nothing to
  // move): what it takes then is its initial texts and a first turn of each thinker and writer.
  // Its phase comes from its roles' tool calls.
  Status await_admission() {
    if (!manager_) return Status::success();
    int64_t need = 0;
    for (const auto& b : t_.blocks)
      if (!b.text.empty())
        need += KvCache::pages_for(static_cast<int64_t>(encode(tok_, render_block(b)).size()));
    for (const auto& a : t_.actors)
      if (a.kind == Kind::thinker || a.kind == Kind::writer)
        need += KvCache::pages_for(static_cast<int64_t>(encode(tok_, a.prefill).size()) + a.max_tokens);
    ProgramCmd pause;
    pause.op = ProgramCmd::Op::pause;
    pause.program = im_.program_id;
    if (auto r = call(encode_program(++rid_, pause)); !r)
      return failed(r.error(), "pausing the program until it is admitted");
    ProgramTools env;
    if (im_.tools) {
      env.cool = [tools = im_.tools] { caf::anon_send(tools, role_atom::value, encode_sandbox_cool()); };
      env.warm = [tools = im_.tools] {  // its answer (whether the sandbox is ready) is not awaited
        caf::anon_send(tools, role_ask_atom::value, encode_sandbox_warm());
      };
    }
    if (!manager_->add(im_.program_id, need, std::move(env)))
      return make_error(Errc::invalid_argument, where_ + "not started: the run is ending");
    im_.managed = true;
    hooks_.event = [inner = hooks_.event, manager = manager_, id = im_.program_id](const ProgramEvent& e) {
      if (e.name.ends_with(".tool_call")) manager->tool_started(id);
      if (e.name.ends_with(".tool_result")) manager->tool_ended(id);
      if (inner) inner(e);
    };
    return Status::success();
  }

  // Initial texts, one block after the other: each is read under a view of the blocks before it.
  Status initial_texts() { return write_texts(t_.blocks); }

  Status write_texts(const std::vector<topology::Block>& blocks) {
    for (const auto& b : blocks) {
      if (b.text.empty()) continue;
      const auto toks = encode(tok_, render_block(b));
      if (toks.empty()) continue;
      auto r = call(encode_request(++rid_, Request::forward(im_.blocks.at(b.name), toks, ids(b.view))));
      if (!r) return failed(r.error(), "block " + b.name);
      Reply fin;
      for (bool finished = false; !finished;)
        self_->receive([&](event_atom, const std::vector<uint8_t>& f) {
          auto e = decode_reply(f);
          if (e && e->kind == ReplyKind::finished) {
            finished = true;
            fin = *e;
          }
        });
      if (fin.reason == FinishReason::error ||
          fin.reason == FinishReason::context_full)  // a short text is no text
        return make_error(
            fin.reason == FinishReason::context_full ? Errc::out_of_memory : Errc::invalid_argument,
            where_ + "block " + b.name + ": " + fin.text);
    }
    return Status::success();
  }

  // Sinks first (the roles send to them).
  Status make_sinks() {
    for (const auto& a : t_.actors)
      if (a.kind == Kind::sink)
        if (Status s = make_sink(a); !s.ok()) return s;
    return Status::success();
  }

  Status make_sink(const topology::Actor& a) { return Sinks::make(sys_, im_, where_, a); }

  static Triggers triggers(const topology::Actor& a,
                           const std::map<std::string, std::vector<std::string>>& emitters) {
    Triggers tr;
    tr.on = {a.on.begin(), a.on.end()};
    tr.after = {a.after.begin(), a.after.end()};
    for (const auto& ev : a.on)
      for (const auto& who : emitters.at(ev)) tr.upstream.insert(who);
    return tr;
  }
  Triggers triggers(const topology::Actor& a) const { return triggers(a, emitters_); }

  caf::actor generator(const topology::Actor& a) {
    GeneratorConfig gc;
    gc.name = a.name;
    gc.stream = a.kind == Kind::thinker;
    gc.triggers = triggers(a);
    StopCondition stop;
    stop.max_tokens = a.max_tokens;
    stop.strings = a.stop;
    gc.prefill = RunText{a.prefill, encode(tok_, a.prefill), &tok_};
    gc.request = Request::generate(im_.blocks.at(a.writes), ids(a.view), gc.prefill.fixed, a.sampling, stop);
    gc.emits = a.emits;
    for (const auto& s : a.to) gc.sinks.push_back(im_.roles.at(s));
    if (!a.tools.empty()) {
      gc.tools = im_.tools;
      gc.patcher = im_.patcher;
      gc.max_tool_calls = a.max_tool_calls;
    }
    gc.tokenizer = &tok_;
    if (a.fresh) gc.clear_before_run = im_.blocks.at(a.writes);
    gc.journal = hooks_.journal;
    const int n = im_.incarnations[a.name]++;
    gc.journal_name = n == 0 ? a.name : a.name + "#" + std::to_string(n);
    gc.ending = im_.tools_cancel;
    return spawn_generator(sys_, im_.batcher, std::move(gc));
  }

  caf::actor probe(const topology::Actor& a) {
    ProbeRoleConfig pc;
    pc.name = a.name;
    pc.triggers = triggers(a);
    std::vector<std::vector<TokenId>> cands;
    for (const auto& s : a.candidates) cands.push_back(encode(tok_, s));
    pc.question = RunText{a.question, encode(tok_, a.question), &tok_};
    pc.request = Request::probe(ids(a.view), pc.question.fixed, cands);
    pc.fire_on = a.fire_on;
    pc.threshold = a.threshold;
    pc.edge = a.edge;
    pc.fires = a.fires;
    pc.watch = a.watch.empty() ? -1 : im_.blocks.at(a.watch);
    pc.every_new_tokens = a.every_new_tokens;
    pc.every_ms = a.every_ms;
    if (!a.node.empty() && hooks_.placement) return placed_probe(a, pc);
    return spawn_probe(sys_, im_.batcher, std::move(pc));
  }

  // A probe whose role runs on the node its placement names: its stand-in here. A failed hosting
  // is the program's error (unplaced_).
  caf::actor placed_probe(const topology::Actor& a, const ProbeRoleConfig& pc) {
    const ProbeSpecData d = probe_spec(pc);
    PlacedActorConfig c;
    c.program = im_.host_key;
    c.program_name = t_.name;
    c.actor = a.name;
    c.where = a.node;
    c.host = [key = im_.host_key, name = t_.name, d](uint64_t id) {
      return encode_host_probe(id, key, name, d);
    };
    c.placement = hooks_.placement;
    c.on_lost = im_.lost("actors." + a.name);
    auto started = std::make_shared<std::promise<Status>>();
    auto result = started->get_future();
    caf::actor h = spawn_placed_probe(sys_, std::move(c), im_.batcher, started);
    if (Status s = result.get(); !s.ok() && !unplaced_) unplaced_.emplace(a.name, s.error());
    return h;
  }

  caf::actor source(const topology::Actor& a) {
    SourceRoleConfig sc;
    sc.name = a.name;
    sc.triggers = triggers(a);
    sc.text_once = a.from == topology::SourceKind::text;
    sc.text = a.text;
    sc.delay_ms = a.delay_ms;
    sc.write_to = im_.blocks.at(a.writes);
    sc.view = ids(a.view);
    sc.every_lines = a.every_lines;
    sc.emit_event = a.emit_event;
    sc.max_lines = a.max_lines;
    sc.keep_lines = a.keep_lines;
    sc.records = a.from == topology::SourceKind::zmq || a.from == topology::SourceKind::api;
    sc.tokenizer = &tok_;
    caf::actor h = spawn_source(sys_, im_.batcher, std::move(sc));
    if (a.from == topology::SourceKind::api) im_.api_sources[a.name] = h;
    if (a.from != topology::SourceKind::api && a.from != topology::SourceKind::text)
      feeding_.emplace_back(&a, h);
    return h;
  }

  // Its feeder, once the controller exists (a file reader tells it of a file it cannot open).
  Status feed(const topology::Actor& a, const caf::actor& h) {
    if (!a.node.empty() && hooks_.placement) {  // its file or socket is read on another node
      PlacedActorConfig pc;
      pc.program = im_.host_key;
      pc.program_name = t_.name;
      pc.actor = a.name;
      pc.where = a.node;
      pc.host = [key = im_.host_key, name = t_.name, actor = a.name, spec = feed_spec(a)](uint64_t id) {
        return encode_host_feed(id, key, name, actor, spec);
      };
      pc.placement = hooks_.placement;
      pc.on_lost = im_.lost("actors." + a.name);
      auto f = spawn_placed_feed(sys_, std::move(pc), h);
      if (!f) return make_error(f.error().code, where_ + "actors." + a.name + ": " + f.error().message);
      im_.actors.push_back(*f);
      return Status::success();
    }
    switch (a.from) {
      case topology::SourceKind::stdin_lines: im_.actors.push_back(spawn_fd_lines(sys_, 0, h, h)); break;
      case topology::SourceKind::file:
        im_.actors.push_back(a.follow ? spawn_file_tail(sys_, a.path, h, true)
                                      : spawn_file_reader(sys_, a.path, h, a.name, im_.ctl));
        break;
      case topology::SourceKind::zmq: {
        if (!im_.zmq_ctx) im_.zmq_ctx = std::make_unique<zmq::context_t>(1);
        auto sub = spawn_zmq_sub_source(sys_, *im_.zmq_ctx, a.endpoint, a.topic, h);
        if (!sub)
          return make_error(sub.error().code, where_ + "actors." + a.name + ": " + sub.error().message);
        im_.actors.push_back(*sub);
        break;
      }
      case topology::SourceKind::api:
      case topology::SourceKind::text: break;
    }
    return Status::success();
  }

  Status make_roles() {
    make_patcher();
    for (const auto& a : t_.actors)
      if (a.kind != Kind::sink) make_role(a);
    if (unplaced_)
      return make_error(unplaced_->second.code,
                        where_ + "actors." + unplaced_->first + ": " + unplaced_->second.message);
    return Status::success();
  }

  void make_role(const topology::Actor& a) {
    const caf::actor h = a.kind == Kind::probe ? probe(a) : a.kind == Kind::source ? source(a) : generator(a);
    im_.roles[a.name] = h;
    im_.actors.push_back(h);
  }

  // A detached actor that applies the patches of edit_program calls, one after the other, when
  // a role may make one.
  void make_patcher() {
    if (im_.patcher || !t_.tool(topology::kEditProgram)) return;
    im_.patcher = sys_.spawn<caf::detached>([im = &im_]() -> caf::behavior {
      return {[im](role_ask_atom, const Frame& f) {
        auto m = read_role("patcher", f);
        if (!m || m->kind != RoleKind::edit_program)
          return encode_tool_result("refused: the patcher takes EditProgram messages");
        auto r = Starter::patch(*im, m->text, m->actor);
        return encode_tool_result(r ? "applied: " + *r : "refused: " + r.error().message);
      }};
    });
    im_.actors.push_back(im_.patcher);
  }

  static bool pends(const topology::Actor& a) {
    return a.kind == Kind::thinker || a.kind == Kind::writer || a.kind == Kind::source;
  }

  // Who hears which event: those it triggers, and each role those whose `.done` ends its triggers.
  std::map<std::string, std::vector<caf::actor>> routes() const {
    std::map<std::string, std::vector<caf::actor>> out;
    for (const auto& a : t_.actors) {
      std::set<std::string> hears(a.on.begin(), a.on.end());
      hears.insert(a.after.begin(), a.after.end());
      if (a.kind != Kind::sink)
        for (const auto& ev : a.on)
          for (const auto& who : emitters_.at(ev)) hears.insert(who + ".done");
      for (const auto& ev : hears) out[ev].push_back(im_.roles.at(a.name));
    }
    return out;
  }

  // The controller (who hears which event, what must be done), the feeders, then every role.
  Status go() {
    ControllerConfig cc;
    cc.subscribers = routes();
    cc.roles = im_.roles;
    for (const auto& a : t_.actors)
      if (pends(a)) cc.pending.insert(a.name);
    cc.finish = {t_.finish.begin(), t_.finish.end()};
    cc.budget_seconds = t_.budget_seconds;
    cc.budget_tokens = t_.budget_tokens;
    cc.outcome = im_.outcome;
    cc.hook = hooks_.event;
    im_.outcome->t0 = Clock::now();
    im_.ctl = spawn_controller(sys_, std::move(cc));
    {
      std::lock_guard<std::mutex> l(im_.ctl_slot->m);
      im_.ctl_slot->ctl = im_.ctl;
    }
    for (const auto& [a, h] : feeding_)
      if (Status s = feed(*a, h); !s.ok()) return s;
    for (const auto& a : t_.actors)
      if (a.kind != Kind::sink)
        self_->send(im_.roles.at(a.name), start_atom::value, im_.ctl, encode_start_role());
    if (im_.managed) manager_->started(im_.program_id);
    return Status::success();
  }

  // ---- a patch: the blocks and sinks it adds (undone when one fails), then the roles ---------

  Status grow(const topology::Patched& p) {
    std::vector<topology::Block> blocks;
    for (const auto& n : p.blocks) blocks.push_back(*t_.block(n));
    Status s = create_blocks(blocks);
    if (s.ok()) s = write_texts(blocks);
    for (const auto& n : p.added)
      if (s.ok() && t_.actor(n)->kind == Kind::sink) s = make_sink(*t_.actor(n));
    if (s.ok()) return s;
    for (const auto& b : blocks)
      if (auto it = im_.blocks.find(b.name); it != im_.blocks.end()) {
        if (auto r = call(encode_free_block(++rid_, it->second)); !r)
          spdlog::warn("{}block {}: freeing it: {}", where_, b.name, r.error().message);
        im_.blocks.erase(it);
      }
    for (const auto& n : p.added)
      if (auto it = im_.roles.find(n); it != im_.roles.end()) {
        self_->send(it->second, stop_atom::value);
        std::erase(im_.sinks, it->second);
        im_.roles.erase(it);
      }
    return s;
  }

  // New roles for those added and changed; the controller routes to them from now on; the old
  // selves of those changed and removed end the run they are in and go (what they had queued
  // goes to their new selves); then the new roles start.
  void swap_roles(const topology::Patched& p, const topology::Topology& before) {
    std::map<std::string, caf::actor> old;
    for (const auto* names : {&p.changed, &p.removed})
      for (const auto& n : *names) old[n] = im_.roles.at(n);
    for (const auto& n : p.removed) im_.roles.erase(n);
    make_patcher();
    Rewiring w;
    for (const auto* names : {&p.added, &p.changed})
      for (const auto& n : *names) {
        const topology::Actor& a = *t_.actor(n);
        if (a.kind == Kind::sink) continue;
        make_role(a);
        if (unplaced_) {  // a placed probe no node hosts: the program ends with why
          im_.lost("actors." + n)(unplaced_->second.message);
          unplaced_.reset();
        }
        w.fresh.push_back(n);
        if (pends(a)) w.pending_added.push_back(n);
      }
    for (const auto& [n, h] : old)
      if (pends(*before.actor(n))) w.pending_gone.push_back(n);
    const auto were = before.emitters();
    for (const auto& a : t_.actors) {  // untouched roles whose events have other emitters now
      if (a.kind == Kind::sink || a.kind == Kind::source || old.count(a.name) || !before.actor(a.name))
        continue;
      const std::set<std::string> now = triggers(a).upstream;
      if (now != triggers(a, were).upstream)
        w.upstream.emplace_back(im_.roles.at(a.name), std::vector<std::string>(now.begin(), now.end()));
    }
    w.subscribers = routes();
    w.roles = im_.roles;
    w.finish = {t_.finish.begin(), t_.finish.end()};
    const std::vector<std::string> fresh = w.fresh;
    self_->request(im_.ctl, std::chrono::seconds(30), rewire_atom::value, std::move(w))
        .receive([](bool) {},
                 [&](caf::error& e) { spdlog::warn("{}rewiring: {}", where_, caf::to_string(e)); });
    std::map<std::string, std::vector<std::string>> carried;
    for (const auto& [n, h] : old) {
      self_->request(h, kRetireWait, role_ask_atom::value, encode_retire_role())
          .receive(
              [&, n = n](const Frame& reply) {
                if (auto m = read_role(where_ + "actors." + n, reply); m && m->kind == RoleKind::retired)
                  carried[n] = m->names;
              },
              [&, n = n, h = h](caf::error& e) {
                spdlog::warn("{}actors.{}: retiring it: {}; stopped", where_, n, caf::to_string(e));
                self_->send_exit(h, caf::exit_reason::user_shutdown);
              });
      self_->wait_for(h);
      std::erase(im_.actors, h);
    }
    for (const auto& n : fresh)  // (a probe carries nothing: it had nothing queued)
      self_->send(im_.roles.at(n), start_atom::value, im_.ctl, encode_start_role(carried[n]));
  }

  static constexpr std::chrono::seconds kRetireWait{120};

 public:
  // Program::patch, and the patcher's edit_program calls (`caller`: the role): one at a time.
  static Result<std::string> patch(Program::Impl& im, const std::string& text, const std::string& caller) {
    std::lock_guard<std::mutex> l(im.patch_m);
    if (im.torn_down || !im.ctl || im.ended())
      return make_error(Errc::invalid_argument, "patch: the program has ended; nothing was changed");
    auto refused = [&](const Error& e) {
      caf::anon_send(im.ctl, role_atom::value, encode_signal("program.patch_refused", e.message));
      return e;
    };
    if (!caller.empty() && !im.topo.actor(caller))
      return refused(make_error(Errc::not_found, "patch: " + caller + " was removed before its patch came"));
    const auto now = Clock::now();
    while (!im.patches.empty() && now - im.patches.front() >= std::chrono::minutes(1)) im.patches.pop_front();
    if (im.patches.size() >= kPatchesPerMinute) {
      const auto wait =
          std::chrono::ceil<std::chrono::seconds>(im.patches.front() + std::chrono::minutes(1) - now);
      return refused(
          make_error(Errc::out_of_range, "patch: at most " + std::to_string(kPatchesPerMinute) +
                                             " patches a minute (refused ones count): try again in " +
                                             std::to_string(wait.count()) + " s"));
    }
    im.patches.push_back(now);
    topology::PatchOptions opts;
    opts.caller = caller;
    auto p = topology::patch(im.topo, text, "patch", opts);
    if (!p) return refused(p.error());
    topology::Topology before = std::exchange(im.topo, p->topology);
    Starter s(*im.sys, im);
    if (Status st = s.grow(*p); !st.ok()) {
      im.topo = std::move(before);
      return refused(st.error());
    }
    s.swap_roles(*p, before);
    caf::anon_send(im.ctl, role_atom::value, encode_signal("program.patched", p->summary()));
    return p->summary();
  }

 private:
  caf::actor_system& sys_;
  program_roles::TraceLane lane_;  // where the program records itself (no trace: none)
  const topology::Topology& t_;    // im_.topo
  ProgramHooks& hooks_;
  Program::Impl& im_;
  const Tokenizer& tok_;
  caf::scoped_actor self_;
  uint64_t rid_ = 0;
  const std::string where_;
  ProgramManager* manager_;
  const std::map<std::string, std::vector<std::string>> emitters_;
  std::vector<std::pair<const topology::Actor*, caf::actor>> feeding_;  // sources with a feeder
  std::optional<std::pair<std::string, Error>> unplaced_;  // a placed probe no node hosted, and why
};

Result<std::unique_ptr<Program>> Program::start(caf::actor_system& sys, const topology::Topology& t,
                                                std::shared_ptr<SharedEngine> engine, ProgramHooks hooks) {
  auto impl = std::make_unique<Impl>();
  impl->sys = &sys;
  impl->topo = t;
  impl->hooks = std::move(hooks);
  impl->batcher = engine->batcher();
  impl->program_id = engine->new_program_id();
  impl->engine = std::move(engine);
  Program prog(std::move(impl));  // from here on, an error tears everything down
  if (Status s = Starter(sys, *prog.impl_).run(); !s.ok()) return s.error();
  return std::unique_ptr<Program>(new Program(std::move(prog.impl_)));
}

Result<std::string> Program::patch(const std::string& text) {
  return Starter::patch(*impl_, text, "");
}

}  // namespace chorus
