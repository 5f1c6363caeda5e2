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
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <zmq.hpp>

#include "actors/atoms.h"
#include "actors/batcher.h"
#include "actors/feeders.h"
#include "actors/node_port.h"
#include "actors/program_manager.h"
#include "actors/program_roles.h"
#include "actors/sandbox.h"
#include "actors/submit.h"
#include "engine/forward/kv_cache.h"
#include "engine/model/model.h"
#include "engine/step/engine.h"
#include "net/codec.h"

namespace chorus {

using namespace program_roles;
using topology::Kind;

// ---- SharedEngine -------------------------------------------------------------------------------

EngineOptions engine_options(const topology::Topology& t) {
  EngineOptions eo;
  eo.n_pages = t.engine.pages;
  eo.token_budget = t.engine.token_budget;
  eo.max_view_tokens = t.engine.max_view_tokens;
  return eo;
}

struct SharedEngine::Impl {
  std::shared_ptr<Engine> engine;
  caf::actor batcher;
  std::atomic<uint64_t> next_program{1};
  int64_t pool_pages = 0;
  std::unique_ptr<ProgramManager> manager;  // before the batcher stops: it talks to it
};

SharedEngine::SharedEngine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

SharedEngine::~SharedEngine() {
  impl_->manager.reset();
  if (!impl_->batcher) return;
  caf::scoped_actor self{impl_->batcher.home_system()};
  self->send_exit(impl_->batcher, caf::exit_reason::user_shutdown);
  self->wait_for(impl_->batcher);
}

Result<std::shared_ptr<SharedEngine>> SharedEngine::create(caf::actor_system& sys, const Model& model,
                                                           CpuDevice& device, const EngineOptions& opts,
                                                           CudaDevice* gpu) {
  auto engine = Engine::create(model, device, opts, gpu);
  if (!engine) return engine.error();
  auto impl = std::make_unique<Impl>();
  impl->engine = std::shared_ptr<Engine>(std::move(*engine));
  impl->pool_pages = opts.n_pages;
  impl->batcher = spawn_batcher(sys, impl->engine);
  return std::shared_ptr<SharedEngine>(new SharedEngine(std::move(impl)));
}

const Model& SharedEngine::model() const {
  return impl_->engine->model();
}
std::string SharedEngine::describe() const {
  return impl_->engine->describe();
}
caf::actor SharedEngine::batcher() const {
  return impl_->batcher;
}
uint64_t SharedEngine::new_program_id() {
  // Scheduled: the scheduler's ids, which its other clients (a gateway) draw from too.
  return impl_->manager ? impl_->manager->new_program_id() : impl_->next_program++;
}
int64_t SharedEngine::pool_pages() const {
  return impl_->pool_pages;
}

ProgramManager& SharedEngine::schedule(const ProgramPolicyOptions& opts, double tool_lease_s) {
  SchedulerOptions o;
  o.policy = opts;
  o.policy.capacity_pages = pool_pages();
  o.tool_lease_s = tool_lease_s;
  o.first_program_id = impl_->next_program;  // after those given out already
  impl_->manager = std::make_unique<ProgramManager>(impl_->batcher.home_system(), impl_->batcher, o);
  return *impl_->manager;
}

ProgramManager* SharedEngine::manager() const {
  return impl_->manager.get();
}

// ---- Program ------------------------------------------------------------------------------------

struct Program::Impl {
  caf::actor_system* sys = nullptr;
  std::shared_ptr<SharedEngine> engine;  // this program's alone, or shared with others
  bool own_engine = false;               // made for it (Program::start with a model)
  uint64_t program_id = 0;               // in the engine's batcher
  caf::actor batcher, ctl;
  std::vector<caf::actor> actors;   // roles and feeders (the controller apart)
  std::vector<caf::actor> sinks;    // stopped after the others, once their mailboxes are written out
  std::vector<caf::actor> outlets;  // consoles and ZeroMQ PUB sockets: stopped last
  std::map<topology::SinkKind, caf::actor> consoles;  // one per standard stream
  std::map<std::string, caf::actor> api_sources;
  std::map<std::string, BlockId> blocks;
  std::shared_ptr<Outcome> outcome = std::make_shared<Outcome>();
  std::unique_ptr<zmq::context_t> zmq_ctx;  // outlives the ZeroMQ actors
  bool torn_down = false;
  bool registered = false;  // with the batcher, under program_id
  // Set at teardown: a tool still running is killed instead of waited for.
  std::shared_ptr<std::atomic<bool>> tools_cancel = std::make_shared<std::atomic<bool>>(false);
  bool managed = false;  // scheduled by the engine's ProgramManager

  void teardown() {
    if (torn_down) return;
    torn_down = true;
    caf::scoped_actor self{*sys};
    tools_cancel->store(true);
    std::vector<caf::actor> all = actors;
    if (ctl) all.push_back(ctl);
    for (const auto& a : all) self->send_exit(a, caf::exit_reason::user_shutdown);
    for (const auto& a : all) self->wait_for(a);
    for (const auto* stage : {&sinks, &outlets}) {  // nothing a sink was given is lost
      for (const auto& a : *stage) self->send(a, stop_atom::value);
      for (const auto& a : *stage) self->wait_for(a);
    }
    // What the blocks hold, through the batcher (other programs may be stepping the engine);
    // then the program ends there, its blocks freed.
    std::map<std::string, int64_t> tokens;
    // Not paused or restored from here on (abandoned while it waited: already terminated).
    if (managed && !engine->manager()->remove(program_id)) registered = false;
    if (batcher) {
      auto call = [&](const Frame& f) { return ask(self, batcher, f, std::chrono::seconds(60)); };
      for (const auto& [name, id] : blocks)
        if (auto r = call(encode_snapshot_view(0, {id})); r && !r->blocks.empty())
          tokens[name] = r->blocks[0].tokens;
      // Requests its roles left in the engine end with it (their actors are gone): cancelled,
      // then every block freed. An engine of its own goes as a whole.
      if (!own_engine && registered) {
        ProgramCmd end{ProgramCmd::Op::terminate, program_id, "", {}, PauseMode::drop};
        end.cancel = true;
        if (auto r = call(encode_program(0, end)); !r)
          spdlog::warn("program {}: ending it on the shared engine: {}", program_id, r.error().message);
      }
      if (managed) engine->manager()->check_now();  // its room may let a waiting program in
    }
    engine.reset();  // this program's own engine stops here
    std::lock_guard<std::mutex> l(outcome->m);
    for (const auto& [name, n] : tokens) outcome->report.block_tokens[name] = n;
    if (outcome->report.ended_by.empty()) {
      outcome->report.ended_by = "stopped";
      outcome->report.seconds = outcome->now();
    }
  }
};

Program::Program(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Program::~Program() {
  if (impl_) {
    stop();
    wait();
  }
}

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
  auto engine = SharedEngine::create(sys, model, device, engine_options(t), gpu);
  if (!engine) return engine.error();
  auto p = start(sys, t, std::move(*engine), std::move(hooks));
  if (p) (*p)->impl_->own_engine = true;  // its end stops the engine: no need to free blocks first
  return p;
}

Result<std::unique_ptr<Program>> Program::start(caf::actor_system& sys, const topology::Topology& t,
                                                std::shared_ptr<SharedEngine> engine, ProgramHooks hooks) {
  auto impl = std::make_unique<Impl>();
  impl->sys = &sys;
  const Tokenizer& tok = engine->model().tokenizer;
  impl->batcher = engine->batcher();
  impl->program_id = engine->new_program_id();
  impl->engine = std::move(engine);
  Program prog(std::move(impl));  // from here on, an error tears everything down
  Impl& im = *prog.impl_;
  const std::string where = t.file + ": ";

  caf::scoped_actor self{sys};
  uint64_t rid = 0;
  auto call = [&](const Frame& f) { return ask(self, im.batcher, f); };
  // The program's sandbox, made with it and removed with it (and, on a scheduled engine, while
  // it is paused past a lease).
  caf::actor tools;
  if (!t.tools.empty()) {
    if (const std::string missing = Sandbox::missing_isolation(); !missing.empty() && !hooks.unsafe_tools)
      return make_error(Errc::unsupported,
                        where + "its tools need the sandbox, and this machine lacks " + missing +
                            "; nothing was started. To run them anyway with what isolation there is (" +
                            Sandbox::isolation() +
                            "; a tool could then read and change what this user can), pass --unsafe-tools");
    const char* env = std::getenv("CHORUS_SANDBOX_DIR");
    static std::atomic<int> n{0};
    tools = spawn_tools(sys, std::string(env ? env : "/tmp/chorus-sandboxes"),
                        t.name + "-" + std::to_string(::getpid()) + "-" + std::to_string(++n), t.tools,
                        im.tools_cancel);
    im.actors.push_back(tools);
  }
  // One program for the batcher: its blocks are paused and restored together.
  ProgramManager* manager = im.engine->manager();
  ProgramCmd reg;
  reg.program = im.program_id;
  reg.name = t.name;
  reg.hold = manager != nullptr;  // scheduled: its requests wait while it is paused
  if (auto r = call(encode_program(++rid, reg)); !r)
    return make_error(r.error().code, where + "registering the program: " + r.error().message);
  im.registered = true;
  for (const auto& b : t.blocks) {
    auto r = call(encode_create_block(++rid, b.name, im.program_id));
    if (!r) return make_error(r.error().code, where + "block " + b.name + ": " + r.error().message);
    im.blocks[b.name] = static_cast<BlockId>(r->id);
  }
  if (manager) {
    // It waits to be admitted, paused while its blocks are empty (nothing to move): what it
    // takes then is its initial texts and a first turn of each thinker and writer.
    int64_t need = 0;
    for (const auto& b : t.blocks)
      if (!b.text.empty())
        need += KvCache::pages_for(static_cast<int64_t>(encode(tok, render_block(b)).size()));
    for (const auto& a : t.actors)
      if (a.kind == Kind::thinker || a.kind == Kind::writer)
        need += KvCache::pages_for(static_cast<int64_t>(encode(tok, a.prefill).size()) + a.max_tokens);
    ProgramCmd pause;
    pause.op = ProgramCmd::Op::pause;
    pause.program = im.program_id;
    if (auto r = call(encode_program(++rid, pause)); !r)
      return make_error(r.error().code,
                        where + "pausing the program until it is admitted: " + r.error().message);
    ProgramTools env;
    if (tools) {
      env.cool = [tools] { caf::anon_send(tools, cool_atom::value); };
      env.warm = [tools] { caf::anon_send(tools, warm_atom::value); };
    }
    if (!manager->add(im.program_id, need, std::move(env)))
      return make_error(Errc::invalid_argument, where + "not started: the run is ending");
    im.managed = true;
    // Its phase comes from its roles' tool calls.
    hooks.event = [inner = hooks.event, manager, id = im.program_id](const ProgramEvent& e) {
      if (e.name.ends_with(".tool_call")) manager->tool_started(id);
      if (e.name.ends_with(".tool_result")) manager->tool_ended(id);
      if (inner) inner(e);
    };
  }
  auto ids = [&](const std::vector<std::string>& names) {
    std::vector<BlockId> v;
    for (const auto& n : names) v.push_back(im.blocks.at(n));
    return v;
  };
  // Initial texts, one block after the other: each is read under a view of the blocks before it.
  for (const auto& b : t.blocks) {
    if (b.text.empty()) continue;
    const auto toks = encode(tok, render_block(b));
    if (toks.empty()) continue;
    auto r = call(encode_request(++rid, Request::forward(im.blocks.at(b.name), toks, ids(b.view))));
    if (!r) return make_error(r.error().code, where + "block " + b.name + ": " + r.error().message);
    Reply fin;
    for (bool finished = false; !finished;)
      self->receive([&](event_atom, const std::vector<uint8_t>& f) {
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
          where + "block " + b.name + ": " + fin.text);
  }

  // Sinks first (the roles send to them), then the roles.
  std::map<std::string, caf::actor> by_name;
  for (const auto& a : t.actors) {
    if (a.kind != Kind::sink) continue;
    SinkRoleConfig sc;
    sc.name = a.name;
    sc.kind = a.sink;
    sc.prefix = a.prefix;
    if (a.sink == topology::SinkKind::file) {
      std::FILE* f = std::fopen(a.path.c_str(), "w");
      if (!f)
        return make_error(
            Errc::io, where + "actors." + a.name + ": cannot open " + a.path + ": " + std::strerror(errno));
      sc.file = std::shared_ptr<std::FILE>(f, [](std::FILE* p) { std::fclose(p); });
    }
    if (a.sink == topology::SinkKind::zmq) {
      if (!im.zmq_ctx) im.zmq_ctx = std::make_unique<zmq::context_t>(1);
      caf::actor pub;
      auto bound = spawn_zmq_pub_sink(sys, *im.zmq_ctx, a.endpoint, a.topic, &pub);
      if (!bound)
        return make_error(bound.error().code, where + "actors." + a.name + ": " + bound.error().message);
      im.outlets.push_back(pub);
      sc.zmq = pub;
    }
    if (a.sink == topology::SinkKind::callback) {
      if (!hooks.sink)
        return make_error(
            Errc::invalid_argument,
            where + "actors." + a.name + ": a callback sink needs a sink hook (embedded use only)");
      sc.callback = hooks.sink;
    }
    if (a.sink == topology::SinkKind::stdout_stream || a.sink == topology::SinkKind::stderr_stream) {
      caf::actor& console = im.consoles[a.sink];
      if (!console) {
        SinkRoleConfig cc;
        cc.name = a.sink == topology::SinkKind::stdout_stream ? "stdout" : "stderr";
        cc.kind = a.sink;
        console = spawn_sink(sys, std::move(cc));
        im.outlets.push_back(console);
      }
      sc.console = console;
    }
    by_name[a.name] = spawn_sink(sys, std::move(sc));
    im.sinks.push_back(by_name[a.name]);
  }
  const auto emitters = t.emitters();
  auto triggers = [&](const topology::Actor& a) {
    Triggers tr;
    tr.on = {a.on.begin(), a.on.end()};
    tr.after = {a.after.begin(), a.after.end()};
    for (const auto& ev : a.on)
      for (const auto& who : emitters.at(ev)) tr.upstream.insert(who);
    return tr;
  };
  auto sinks_of = [&](const topology::Actor& a) {
    std::vector<caf::actor> v;
    for (const auto& s : a.to) v.push_back(by_name.at(s));
    return v;
  };
  std::vector<std::function<Status(const caf::actor& ctl)>> feeders;  // started once the controller exists
  for (const auto& a : t.actors) {
    caf::actor h;
    switch (a.kind) {
      case Kind::thinker:
      case Kind::writer: {
        GeneratorConfig gc;
        gc.name = a.name;
        gc.stream = a.kind == Kind::thinker;
        gc.triggers = triggers(a);
        StopCondition stop;
        stop.max_tokens = a.max_tokens;
        stop.strings = a.stop;
        gc.prefill = RunText{a.prefill, encode(tok, a.prefill), &tok};
        gc.request =
            Request::generate(im.blocks.at(a.writes), ids(a.view), gc.prefill.fixed, a.sampling, stop);
        gc.emits = a.emits;
        gc.sinks = sinks_of(a);
        if (!a.tools.empty()) {
          gc.tools = tools;
          gc.max_tool_calls = a.max_tool_calls;
        }
        gc.tokenizer = &tok;
        h = spawn_generator(sys, im.batcher, std::move(gc));
        break;
      }
      case Kind::probe: {
        ProbeRoleConfig pc;
        pc.name = a.name;
        pc.triggers = triggers(a);
        std::vector<std::vector<TokenId>> cands;
        for (const auto& s : a.candidates) cands.push_back(encode(tok, s));
        pc.question = RunText{a.question, encode(tok, a.question), &tok};
        pc.request = Request::probe(ids(a.view), pc.question.fixed, cands);
        pc.fire_on = a.fire_on;
        pc.threshold = a.threshold;
        pc.edge = a.edge;
        pc.fires = a.fires;
        pc.watch = a.watch.empty() ? -1 : im.blocks.at(a.watch);
        pc.every_new_tokens = a.every_new_tokens;
        pc.every_ms = a.every_ms;
        h = spawn_probe(sys, im.batcher, std::move(pc));
        break;
      }
      case Kind::source: {
        SourceRoleConfig sc;
        sc.name = a.name;
        sc.triggers = triggers(a);
        sc.text_once = a.from == topology::SourceKind::text;
        sc.text = a.text;
        sc.delay_ms = a.delay_ms;
        sc.write_to = im.blocks.at(a.writes);
        sc.view = ids(a.view);
        sc.every_lines = a.every_lines;
        sc.emit_event = a.emit_event;
        sc.max_lines = a.max_lines;
        sc.keep_lines = a.keep_lines;
        sc.records = a.from == topology::SourceKind::zmq || a.from == topology::SourceKind::api;
        sc.tokenizer = &tok;
        h = spawn_source(sys, im.batcher, std::move(sc));
        const topology::Actor* ap = &a;
        switch (a.from) {
          case topology::SourceKind::api: im.api_sources[a.name] = h; break;
          case topology::SourceKind::stdin_lines:
            feeders.push_back([&, h](const caf::actor&) {
              im.actors.push_back(spawn_fd_lines(sys, 0, h, h));
              return Status::success();
            });
            break;
          case topology::SourceKind::file:
            feeders.push_back([&, h, ap](const caf::actor& ctl) {
              if (ap->follow)
                im.actors.push_back(spawn_file_tail(sys, ap->path, h, true));
              else
                im.actors.push_back(spawn_file_reader(sys, ap->path, h, ap->name, ctl));
              return Status::success();
            });
            break;
          case topology::SourceKind::zmq:
            feeders.push_back([&, h, ap](const caf::actor&) -> Status {
              if (!im.zmq_ctx) im.zmq_ctx = std::make_unique<zmq::context_t>(1);
              auto sub = spawn_zmq_sub_source(sys, *im.zmq_ctx, ap->endpoint, ap->topic, h);
              if (!sub)
                return make_error(sub.error().code,
                                  where + "actors." + ap->name + ": " + sub.error().message);
              im.actors.push_back(*sub);
              return Status::success();
            });
            break;
          case topology::SourceKind::text: break;
        }
        break;
      }
      case Kind::sink: continue;
    }
    by_name[a.name] = h;
    im.actors.push_back(h);
  }

  ControllerConfig cc;
  for (const auto& a : t.actors) {
    std::set<std::string> hears(a.on.begin(), a.on.end());
    hears.insert(a.after.begin(), a.after.end());
    if (a.kind != Kind::sink)  // a role also hears when those who trigger it are done
      for (const auto& ev : a.on)
        for (const auto& who : emitters.at(ev)) hears.insert(who + ".done");
    for (const auto& ev : hears) cc.subscribers[ev].push_back(by_name.at(a.name));
    if (a.kind == Kind::thinker || a.kind == Kind::writer || a.kind == Kind::source)
      cc.pending.insert(a.name);
  }
  cc.finish = {t.finish.begin(), t.finish.end()};
  cc.budget_seconds = t.budget_seconds;
  cc.budget_tokens = t.budget_tokens;
  cc.outcome = im.outcome;
  cc.hook = hooks.event;
  im.outcome->t0 = Clock::now();
  im.ctl = spawn_controller(sys, std::move(cc));
  for (auto& f : feeders)
    if (Status s = f(im.ctl); !s.ok()) return s.error();
  for (const auto& a : t.actors)
    if (a.kind != Kind::sink) self->send(by_name.at(a.name), start_atom::value, im.ctl);
  if (im.managed) manager->started(im.program_id);
  return std::unique_ptr<Program>(new Program(std::move(prog.impl_)));
}

Status Program::feed(const std::string& source, const std::string& text) {
  auto it = impl_->api_sources.find(source);
  if (it == impl_->api_sources.end())
    return make_error(Errc::not_found, "no source \"" + source + "\" with from: api");
  caf::anon_send(it->second, text_atom::value, text);
  return Status::success();
}

Status Program::close(const std::string& source) {
  auto it = impl_->api_sources.find(source);
  if (it == impl_->api_sources.end())
    return make_error(Errc::not_found, "no source \"" + source + "\" with from: api");
  caf::anon_send(it->second, done_atom::value);
  return Status::success();
}

ProgramReport Program::wait() {
  {
    std::unique_lock<std::mutex> l(impl_->outcome->m);
    impl_->outcome->cv.wait(l, [&] { return impl_->outcome->ended; });
  }
  impl_->teardown();
  std::lock_guard<std::mutex> l(impl_->outcome->m);
  return impl_->outcome->report;
}

void Program::stop() {
  if (impl_->ctl) caf::anon_send(impl_->ctl, stop_atom::value);
  std::unique_lock<std::mutex> l(impl_->outcome->m);
  if (!impl_->ctl) {  // never started: nothing will end it but us
    impl_->outcome->ended = true;
    impl_->outcome->report.ended_by = "stopped";
  }
}

}  // namespace chorus
