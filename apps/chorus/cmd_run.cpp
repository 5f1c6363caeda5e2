// `chorus check` and `chorus run`: a topology file (topologies/README.md) validated, or topology
// files run, each as a program (--copies: several of each), all on one engine until they end.
#include <atomic>
#include <caf/all.hpp>
#include <csignal>
#include <cstdio>
#include <mutex>
#include <optional>
#include <thread>

#include "actors/program.h"
#include "actors/program_manager.h"
#include "actors/sandbox.h"
#include "apps/chorus/commands.h"
#include "apps/chorus/gpu_choice.h"
#include "device/cpu_device.h"
#include "engine/model/model.h"
#include "engine/model/model_paths.h"
#include "engine/step/engine.h"
#include "engine/step/trace.h"
#include "gateway/control_server.h"
#include "gateway/metrics_server.h"
#include "topology/topology.h"

namespace chorus::app {
namespace {

Result<topology::Topology> load(const std::string& file, const std::vector<std::string>& sets,
                                const std::string* input, bool require) {
  topology::LoadOptions lo;
  lo.require_params = require;
  for (const auto& kv : sets) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0)
      return make_error(Errc::invalid_argument, "--set " + kv + ": expected KEY=VALUE");
    lo.set.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
  }
  if (input) lo.set.emplace_back("input", *input);
  return topology::load_file(file, lo);
}

struct Running {
  std::string label;
  const topology::Topology* topo = nullptr;
  std::unique_ptr<Program> program;  // once started (under `m`)
  ProgramReport report;
  std::string start_error;     // it did not start: why
  bool never_started = false;  // stopped while it waited to start
  bool ended = false;          // wait() returned (under `m`)
};

// --control-port: the programs listed and patched over HTTP, while `runs` (guarded by `m`) lives.
std::optional<std::unique_ptr<ControlServer>> start_control(const RunArgs& args, std::vector<Running>& runs,
                                                            std::mutex& m) {
  if (args.control_port < 0) return std::unique_ptr<ControlServer>();
  ProgramControl pc;
  pc.list = [&runs, &m] {
    std::lock_guard<std::mutex> l(m);
    std::vector<ProgramControl::Entry> out;
    for (const auto& r : runs)
      out.push_back({r.label, r.ended || r.never_started || !r.start_error.empty() ? "ended"
                              : r.program                                          ? "running"
                                                                                   : "waiting"});
    return out;
  };
  // The program of that name once it started (it stays until `runs` goes, ended or not).
  auto find = [&runs, &m](const std::string& name) -> Program* {
    std::lock_guard<std::mutex> l(m);
    for (auto& r : runs)
      if (r.label == name) return r.program.get();
    return nullptr;
  };
  pc.topology = [find](const std::string& name) -> Result<topology::Topology> {
    Program* p = find(name);
    if (!p) return make_error(Errc::not_found, "no running program \"" + name + "\"");
    return p->topology();
  };
  pc.patch = [find](const std::string& name, const std::string& text) -> Result<std::string> {
    Program* p = find(name);
    if (!p) return make_error(Errc::not_found, "program \"" + name + "\" has not started yet");
    return p->patch(text);
  };
  auto c = ControlServer::start(args.control_host, args.control_port, std::move(pc));
  if (!c) {
    std::fprintf(stderr, "chorus run: %s\n", c.error().message.c_str());
    return std::nullopt;
  }
  std::fprintf(stderr, "chorus run: control on http://%s:%d/programs\n", args.control_host.c_str(),
               (*c)->port());
  return std::move(*c);
}

}  // namespace

int run_check(const RunArgs& args) {
  auto t = load(args.file, args.set, args.input_given ? &args.input : nullptr, false);
  if (!t) {
    std::fprintf(stderr, "%s\n", t.error().message.c_str());
    return 1;
  }
  int roles[5] = {};
  for (const auto& a : t->actors) ++roles[static_cast<int>(a.kind)];
  std::printf(
      "%s: ok: topology \"%s\", %zu blocks, %d thinkers, %d writers, %d probes, %d sources, %d sinks, %zu "
      "events\n",
      args.file.c_str(), t->name.c_str(), t->blocks.size(), roles[0], roles[1], roles[2], roles[3], roles[4],
      t->emitters().size());
  for (const auto& tool : t->tools)  // what each tool may reach beyond its sandbox's defaults
    std::printf("  tool %s: %s%s\n", tool.name.c_str(),
                tool.opts_in() ? tool.access().c_str() : "no network, its own directory only",
                tool.node.empty() ? "" : ("; runs on " + tool.node.describe()).c_str());
  for (const auto& a : t->actors)  // where placed actors run in a cluster
    if (!a.node.empty()) std::printf("  actor %s: runs on %s\n", a.name.c_str(), a.node.describe().c_str());
  return 0;
}

int run_run(const RunArgs& args) {
  // Ctrl-C from the start: one during the model's load (its weight panels take a while on a
  // large model) is kept, and the programs then stop before they start, each reported.
  stop_on_signals();
  // Every file loads first: a mistake in the last one stops the run before anything starts.
  std::vector<topology::Topology> topos;
  for (const auto& file : args.files) {
    auto t = load(file, args.set, args.input_given ? &args.input : nullptr, true);
    if (!t) {
      std::fprintf(stderr, "%s\n", t.error().message.c_str());
      return 1;
    }
    topos.push_back(std::move(*t));
  }
  // One engine for all of them: its model and settings are the first file's, and the others must
  // agree (a program written for another model or pool would not run as its file says).
  const topology::Topology& first = topos.front();
  for (const auto& t : topos) {
    if (args.model.empty() && t.model != first.model) {
      std::fprintf(stderr,
                   "chorus run: %s names model \"%s\" but %s names \"%s\": programs on one engine share one "
                   "model (or pass --model)\n",
                   t.file.c_str(), t.model.c_str(), first.file.c_str(), first.model.c_str());
      return 1;
    }
    const EngineOptions a = engine_options(t), b = engine_options(first);
    if (a.n_pages != b.n_pages || a.token_budget != b.token_budget ||
        a.max_view_tokens != b.max_view_tokens || a.linear_slots != b.linear_slots ||
        t.engine.threads != first.engine.threads) {
      std::fprintf(stderr,
                   "chorus run: %s and %s have different engine: sections; programs on one engine share one "
                   "(make them equal)\n",
                   t.file.c_str(), first.file.c_str());
      return 1;
    }
  }
  // Placement (`node:`) is for a cluster: on one engine every actor runs here, which it says.
  for (const auto& t : topos) {
    std::string placed;
    for (const auto& a : t.actors)
      if (!a.node.empty()) placed += (placed.empty() ? "" : ", ") + ("actors." + a.name);
    for (const auto& tool : t.tools)
      if (!tool.node.empty()) placed += (placed.empty() ? "" : ", ") + ("tools." + tool.name);
    if (!placed.empty())
      std::fprintf(
          stderr,
          "chorus run: %s: %s run%s here: their `node:` placement is for a cluster (chorus run --cluster "
          "URL)\n",
          t.file.c_str(), placed.c_str(), placed.find(',') == std::string::npos ? "s" : "");
  }
  const std::string model_path = !args.model.empty()    ? args.model
                                 : !first.model.empty() ? first.model
                                                        : default_model_path();
  auto model = Model::load(model_path);
  if (!report("run", model)) return 1;
  show_load_progress("run", **model);
  CpuDeviceOptions dev;
  dev.n_threads = args.threads > 0 ? args.threads : first.engine.threads;
  dev.kv_type = kv_type_flag(args.kv_type);
  auto device = CpuDevice::create(dev);
  if (!report("run", device)) return 1;
  auto gpu = open_gpu("run", args.device, **model);
  if (!report("run", gpu)) return 1;

  caf::actor_system_config cfg;
  cfg.set("scheduler.max-threads", 2);
  caf::actor_system sys{cfg};
  std::shared_ptr<Trace> trace;
  if (!open_trace("run", args.trace, &trace)) return 2;
  const bool several = topos.size() > 1 || args.copies > 1;
  // With --metrics-port the engine is a shared one even for one program: its counters outlive it.
  const bool shared = several || args.metrics_port >= 0;
  Result<std::shared_ptr<SharedEngine>> engine = std::shared_ptr<SharedEngine>();
  if (shared) {
    EngineOptions eo = engine_options(first);
    eo.trace = trace;
    engine = SharedEngine::create(sys, **model, **device, eo, gpu->get());
  }
  if (!report("run", engine)) return 1;
  auto metrics = start_metrics(
      "run", args.metrics_host, args.metrics_port,
      [counters = shared ? (*engine)->counters() : nullptr, pages = shared ? (*engine)->pool_pages() : 0] {
        return engine_metrics_text(*counters, -1, pages);
      });
  if (!metrics) return 1;
  if (*metrics)
    std::fprintf(stderr, "chorus run: metrics on http://%s:%d/metrics\n", args.metrics_host.c_str(),
                 (*metrics)->port());
  ProgramManager* manager = nullptr;
  if (several && args.policy == "program") {
    ProgramPolicyOptions po;
    po.check_period_s = args.check_period_s;
    po.host_capacity_pages = args.host_pages;
    manager = &(*engine)->schedule(po, args.tool_lease_s);
  }

  // Each program, named for the report and for --events: the topology's name, and #k when a file
  // runs more than once. Each starts and ends on a thread of its own: under the program policy a
  // start waits until the program is admitted, and a program that ends frees its room at once.
  std::mutex err;  // before `runs`: their hooks may use it until they are gone
  std::vector<Running> runs;
  for (const auto& t : topos)
    for (int k = 1; k <= args.copies; ++k) {
      Running r;
      r.label = t.name + (args.copies > 1 ? "#" + std::to_string(k) : "");
      r.topo = &t;
      runs.push_back(std::move(r));
    }
  std::mutex m;
  bool stopping = false;
  auto stop_all = [&] {  // Ctrl-C, or a program that could not start: the others end cleanly
    {
      std::lock_guard<std::mutex> l(m);
      if (stopping) return;
      stopping = true;
      for (auto& r : runs)
        if (r.program) r.program->stop();
    }
    if (manager) manager->abandon_waiting();  // the starts still waiting to be admitted fail
  };
  if (args.unsafe_tools)
    std::fprintf(
        stderr, "chorus run: --unsafe-tools: tools run with what isolation there is here (%s)%s\n",
        Sandbox::isolation().c_str(),
        Sandbox::missing_isolation().empty() ? "" : "; a tool can read and change what this user can");
  auto run_one = [&](Running& r) {
    ProgramHooks hooks;
    hooks.unsafe_tools = args.unsafe_tools;
    hooks.trace = trace;
    std::function<void(const ProgramEvent&)> print;
    if (args.events)
      print = [&err, label = several ? r.label + " " : std::string()](const ProgramEvent& e) {
        std::lock_guard<std::mutex> l(err);
        std::string text = e.text.size() > 60 ? e.text.substr(0, 57) + "..." : e.text;
        for (char& c : text)
          if (c == '\n') c = ' ';
        std::fprintf(stderr, "  <%.2fs %s%s: %s>\n", e.seconds, label.c_str(), e.name.c_str(), text.c_str());
      };
    hooks.event = print;
    hooks.trace_lane = &r - runs.data();  // one lane per program, named as the report names it
    hooks.trace_name = r.label;
    // One program alone owns the engine: when it ends, the engine stops with it, without
    // waiting for the requests its roles left running.
    auto program = shared ? Program::start(sys, *r.topo, *engine, hooks)
                          : Program::start(sys, *r.topo, **model, **device, hooks, gpu->get());
    if (!program) {
      bool was_stopping;
      {
        std::lock_guard<std::mutex> l(m);
        was_stopping = stopping;
      }
      if (was_stopping)
        r.never_started = true;
      else
        r.start_error = program.error().message;
      stop_all();
      return;
    }
    {
      std::lock_guard<std::mutex> l(m);
      r.program = std::move(*program);
      if (stopping) r.program->stop();
    }
    ProgramReport report = r.program->wait();
    std::lock_guard<std::mutex> l(m);
    r.report = std::move(report);
    r.ended = true;
  };
  // Declared after `runs`: the listener is gone before them.
  auto control = start_control(args, runs, m);
  if (!control) return 1;
  std::atomic<bool> all_done{false};
  std::thread watch([&] {  // Ctrl-C ends the programs cleanly (their reports are still printed)
    while (!stop_requested() && !all_done) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (stop_requested()) stop_all();
  });
  {
    std::vector<std::thread> threads;
    for (auto& r : runs) threads.emplace_back(run_one, std::ref(r));
    for (auto& th : threads) th.join();
  }
  all_done = true;
  watch.join();
  int failed = 0;
  for (const auto& run : runs) {
    if (!run.start_error.empty()) {
      std::fprintf(stderr, "chorus run: %s: %s\n", run.label.c_str(), run.start_error.c_str());
      ++failed;
      continue;
    }
    if (run.never_started) {
      if (!args.quiet) std::fprintf(stderr, "[%s: stopped before it started]\n", run.label.c_str());
      continue;
    }
    const ProgramReport& r = run.report;
    if (!args.quiet) {
      std::string blocks, events;
      for (const auto& [b, n] : r.block_tokens)
        blocks += (blocks.empty() ? "" : ", ") + b + " " + std::to_string(n);
      for (const auto& [e, n] : r.events)
        events += (events.empty() ? "" : ", ") + e + " x" + std::to_string(n);
      std::fprintf(stderr,
                   "%s[%s: ended by %s after %.2f s; %lld tokens generated; blocks: %s; events: %s]\n",
                   several ? "" : "\n", run.label.c_str(), r.ended_by.c_str(), r.seconds,
                   static_cast<long long>(r.generated_tokens), blocks.c_str(),
                   events.empty() ? "none" : events.c_str());
    }
    if (!r.ok()) {
      std::fprintf(stderr, "chorus run: %s%s\n", several ? (run.label + ": ").c_str() : "", r.error.c_str());
      ++failed;
    }
  }
  if (manager && !args.quiet) {
    const ProgramManagerStats st = manager->stats();
    std::fprintf(stderr,
                 "[scheduler: %lld programs admitted; %lld pauses (%lld offloaded), %lld restores, %lld "
                 "tokens recomputed; most resident at a check %lld of %lld pages%s]\n",
                 static_cast<long long>(st.admitted), static_cast<long long>(st.pauses),
                 static_cast<long long>(st.offloaded_pauses), static_cast<long long>(st.restores),
                 static_cast<long long>(st.recomputed_tokens), static_cast<long long>(st.peak_resident_pages),
                 static_cast<long long>((*engine)->pool_pages()),
                 st.tools_cooled == 0
                     ? ""
                     : ("; " + std::to_string(st.tools_cooled) + " tool sandboxes removed while idle, " +
                        std::to_string(st.tools_prewarmed) + " made again ahead of a restore")
                           .c_str());
  }
  write_trace("run", trace, args.trace);
  return failed > 0 ? 1 : 0;
}

}  // namespace chorus::app
